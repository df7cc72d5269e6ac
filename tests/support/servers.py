"""Real vLLM servers for the integration tests, started ahead of the tests that need them.

A CPU server's start-up is mostly one process importing and setting up at a time, so it leaves
the other core idle: servers spawned together, or while other tests run, come up in far less
wall time than one after the other. A :class:`PlannedServer` is spawned early (``spawn``) and
waited for only when a test first asks for its URL (``url``).
"""

from __future__ import annotations

import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from langchain_qwen_fast.serving import VLLMServer


class PlannedServer:
    """One test server: its model (built on spawn), its settings and its log.

    ``env`` names a variable that, when set, gives the base URL of a server that is already
    running: then nothing is started (None: always started here, for tests that need the
    server's process itself).
    """

    def __init__(self, env: str | None, log: Path, model: Callable[[], Path], **settings: Any) -> None:
        self.env = env
        self.log = log
        self.model = model
        self.settings = settings
        self.server: VLLMServer | None = None
        self.startup_seconds: float | None = None

    @property
    def given(self) -> str | None:
        """The running server's URL that the environment names, if any."""
        return (os.environ.get(self.env) if self.env else None) or None

    def spawn(self) -> None:
        """Build the model and start the server's processes without waiting for them (again: a
        no-op)."""
        if self.given or self.server is not None:
            return
        self.log.parent.mkdir(parents=True, exist_ok=True)
        self.server = VLLMServer(self.model(), profile="cpu", log_path=self.log, **self.settings)
        self.server.spawn()

    def planned_url(self) -> str | None:
        """The server's base URL as soon as it is spawned (or given), before it answers; None
        before it is spawned."""
        return self.given or (self.server.base_url if self.server is not None else None)

    def url(self) -> str:
        """The server's base URL (``.../v1``) once it answers ``/health``."""
        given = self.given
        if given:
            return given
        self.spawn()
        assert self.server is not None
        if self.startup_seconds is None:
            self.server.wait_ready()
            self.startup_seconds = self.server.startup_seconds
        return self.server.base_url

    def started(self) -> VLLMServer:
        """The server itself once it answers ``/health`` (for a planned server with no ``env``)."""
        self.url()
        assert self.server is not None, f"{self.env} names a running server: there is no process here"
        return self.server

    def stop(self) -> None:
        if self.server is not None:
            self.server.stop()
        self.server, self.startup_seconds = None, None
