"""Several independent vLLM servers of one model, started, waited for and stopped together:
pinned to GPUs (several per GPU, optionally under MPS), or CPU servers, optionally behind vLLM's
router."""

from __future__ import annotations

import os
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving.launcher import DEFAULT_MODEL, ServerSettings, VLLMServer, resolve_api_key
from langchain_qwen_fast.serving.lifecycle import ManagedServer
from langchain_qwen_fast.serving.mps import MPSDaemon
from langchain_qwen_fast.serving.router import Router

if TYPE_CHECKING:
    from typing_extensions import Unpack


def share_gpu_memory(args: Sequence[str], servers_on_gpu: int) -> tuple[str, ...]:
    """``args`` of a server that starts beside ``servers_on_gpu - 1`` others on its GPU, with
    an equal share of the card unless they name their own. vLLM refuses to start unless the
    card's free memory covers its utilisation share (most of the card by default), even with a
    fixed KV cache: a server starting after its neighbours took their memory failed
    (docs/gpu-deployment.md)."""
    if servers_on_gpu > 1 and "--gpu-memory-utilization" not in args:
        return (*args, "--gpu-memory-utilization", f"{0.9 / servers_on_gpu:.3f}")
    return tuple(args)


class ServerGroup(ManagedServer):
    """Independent vLLM servers of one model: ``servers_per_gpu`` on each GPU in ``gpus``
    (each sees only its GPU, with the profile's job-sized KV cache), or, without GPUs,
    ``servers_per_gpu`` CPU servers. Independent servers scale where vLLM's data parallel
    behind one URL did not (a server's CPU work, not the GPU, caps it). Started together,
    waited for together, stopped together; ``base_urls`` is what ``QwenClassifier(base_url=...)``
    takes. ``router`` (a vllm-router policy, e.g. ``round_robin``) also starts vLLM's router in
    front of them; ``url`` is then its single URL. ``mps`` runs the servers under NVIDIA's
    Multi-Process Service (:class:`~langchain_qwen_fast.serving.mps.MPSDaemon`). ``settings``
    are each server's :class:`~langchain_qwen_fast.serving.VLLMServer` options
    (``frontend="rust"``: every server serves HTTP with vLLM's Rust frontend). Each server, and
    the router, refuses a port that already answers and is ready only once it is its own
    process serving the model; all die with the process that started them. A context manager:
    ``with`` starts and stops them all."""

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
        **settings: Unpack[ServerSettings],
    ) -> None:
        if servers_per_gpu < 1:
            raise ConfigurationError("servers_per_gpu must be at least 1")
        if mps and not gpus:
            raise ConfigurationError("mps (NVIDIA's Multi-Process Service) is for servers sharing GPUs: give gpus")
        self.mps = MPSDaemon() if mps else None
        slots: list[int | None] = [g for g in gpus for _ in range(servers_per_gpu)] or [None] * servers_per_gpu
        log_root = Path(log_dir) if log_dir is not None else Path(tempfile.mkdtemp(prefix="vllm-group-"))
        log_root.mkdir(parents=True, exist_ok=True)
        base_env = {**(settings.get("env") or {}), **(self.mps.env if self.mps else {})}
        extra = tuple(settings.get("extra_args", ()))
        settings["extra_args"] = share_gpu_memory(extra, servers_per_gpu) if gpus else extra
        self.servers: list[VLLMServer] = []
        for n, gpu in enumerate(slots):
            settings["env"] = {**base_env, **({"CUDA_VISIBLE_DEVICES": str(gpu)} if gpu is not None else {})}
            self.servers.append(
                VLLMServer(
                    model, host=host, port=port + n if port else 0, log_path=log_root / f"server-{n}.log", **settings
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
                served_model_name=self.servers[0].served_model_name,
                api_key=resolve_api_key(settings.get("api_key"), base_env),
            )
            if router
            else None
        )
        self.log_dir = log_root

    def __repr__(self) -> str:
        router = f", router={self.router.policy!r}" if self.router else ""
        mps = ", MPS" if self.mps else ""
        frontend = ", Rust frontend" if self.servers[0].frontend == "rust" else ""
        model = self.servers[0].model
        return f"ServerGroup({len(self.servers)} servers of {model!r}{frontend}{router}{mps}, logs in {self.log_dir})"

    @property
    def base_urls(self) -> list[str]:
        """Each server's ``…/v1`` URL."""
        return [s.base_url for s in self.servers]

    @property
    def url(self) -> str | list[str]:
        """The router's ``…/v1`` URL with a router, else the servers' URLs."""
        return self.router.base_url if self.router else self.base_urls

    def start(self) -> ServerGroup:
        """Start every server (and the router), waiting until all are ready; on any failure or
        an interrupt (Ctrl-C), stop them all and raise."""
        with self.stopped_on_failure():
            if self.mps:
                self.mps.start()
            for server in self.servers:
                server.spawn()
            for server in self.servers:
                server.wait_ready()
            if self.router:
                self.router.start()
        return self

    def stop(self, timeout: float | None = None) -> None:
        """Stop the router, every server (each killed after ``timeout`` seconds, default
        :attr:`stop_timeout`) and the MPS daemon; idempotent."""
        timeout = self.stop_timeout if timeout is None else timeout
        if self.router:
            self.router.stop(min(timeout, self.router.stop_timeout))
        for server in self.servers:
            server.stop(timeout)
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
