"""Command line: ``python -m server serve ...`` and ``python -m server build-model ...``."""

from __future__ import annotations

import argparse
import signal
import sys
import threading

from server.launcher import DEFAULT_MODEL, PROFILES, ServerStartError, VLLMServer
from server.test_model import main as build_model_main


def _serve(args: argparse.Namespace) -> int:
    server = VLLMServer(
        args.model,
        profile=args.profile,
        host=args.host,
        port=args.port,
        served_model_name=args.served_model_name,
        max_model_len=args.max_model_len,
        api_key=args.api_key,
        extra_args=args.vllm_args,
        log_path=args.log,
        startup_timeout=args.timeout,
    )
    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    print(f"starting {server!r}; log: {server.log_path}", flush=True)
    try:
        server.start()
    except ServerStartError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"ready in {server.startup_seconds:.1f} s at {server.base_url} (Ctrl-C stops it)", flush=True)
    try:
        while not stop.wait(1.0):
            if not server.running:
                print("server exited", file=sys.stderr)
                return 1
    finally:
        server.stop()
        print("stopped", flush=True)
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m server")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="run vLLM's OpenAI server in the foreground")
    serve.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local directory")
    serve.add_argument("--profile", choices=["auto", *PROFILES], default="auto")
    serve.add_argument("--host", default="127.0.0.1")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--served-model-name", default="qwen3")
    serve.add_argument("--max-model-len", type=int, default=512)
    serve.add_argument("--api-key", help="require this bearer token")
    serve.add_argument("--log", help="server log file (default: a temporary file)")
    serve.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health")
    serve.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: more vLLM flags")
    sub.add_parser("build-model", help="write a random-weight Qwen3 test model", add_help=False)
    args, rest = parser.parse_known_args(argv)
    if args.command == "build-model":
        build_model_main(rest)
        return 0
    if rest:
        parser.error(f"unrecognised arguments: {' '.join(rest)}")
    args.vllm_args = [a for a in args.vllm_args if a != "--"]
    return _serve(args)


if __name__ == "__main__":
    sys.exit(main())
