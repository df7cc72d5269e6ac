"""vLLM's router (``vllm-router``, the ``router`` extra) in front of running servers: one URL,
load spread over them."""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving.launcher import Secret, free_port
from langchain_qwen_fast.serving.lifecycle import ChildProcessServer
from langchain_qwen_fast.serving.process_group import refuse_answering_port, spawn_in_own_group

#: The policies ``qwen-fast serve --router`` offers. Not a prefix-affinity one: every classifier
#: prompt shares its prefix, so affinity would send everything to one server.
ROUTER_POLICIES = ("round_robin", "power_of_two", "random")


def _router_program() -> list[str]:
    """vllm-router's console script, or its module where no script was installed (a
    package tree unpacked onto PYTHONPATH)."""
    script = shutil.which("vllm-router") or str(Path(sys.executable).with_name("vllm-router"))
    return [script] if Path(script).exists() else [sys.executable, "-m", "vllm_router.launch_router"]


class Router(ChildProcessServer):
    """vLLM's router in front of running servers (a context manager: ``with`` starts and stops
    it): one URL, load spread by ``policy`` (one of
    :data:`ROUTER_POLICIES`; ``power_of_two`` needs two workers or more). ``worker_urls`` are the
    servers' base URLs, with or without ``/v1``; its Prometheus metrics are on ``metrics_port``
    (default: ``port + 1`` when ``port`` is given, else a free port). ``start`` refuses a port
    that already answers, and waits until the router on the port is its own process answering
    ``/v1/models`` (listing ``served_model_name`` when given; ``api_key``: the workers' key,
    sent with that check only, never on the router's command line)."""

    name = "vllm-router"
    stop_timeout = 10.0

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
        served_model_name: str | None = None,
        api_key: Secret | str | None = None,
    ) -> None:
        if policy == "power_of_two" and len(worker_urls) < 2:
            raise ConfigurationError("the power_of_two policy needs at least two servers")
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
        self.served_model_name = served_model_name
        self._api_key = Secret(api_key) if isinstance(api_key, str) else api_key

    def __repr__(self) -> str:
        return f"Router({self.policy!r}, {len(self.worker_urls)} workers, url={self.base_url!r})"

    @property
    def base_url(self) -> str:
        """The router's ``…/v1`` URL."""
        return f"http://{self.host}:{self.port}/v1"

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
        """Start the router and wait until it is ready (stopping it if it fails or is
        interrupted)."""
        command = self.command()
        require_extra("router", "vllm_router", what="the router")
        refuse_answering_port(self.host, self.port, name=self.name)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        self._spawned_at = time.monotonic()
        self._process = spawn_in_own_group(command, self.log_path)
        api_key = self._api_key.reveal() if self._api_key is not None else None
        self._wait_until_answering(interval=0.3, model=self.served_model_name, api_key=api_key, health_path=None)
        return self
