"""An ASGI app served by uvicorn on a loopback port in a thread, for tests and benchmarks of
the HTTP service (``api`` extra)."""

from __future__ import annotations

import threading
import time
from typing import Any

from langchain_qwen_fast.errors import ServerStartError
from langchain_qwen_fast.serving.launcher import free_port
from langchain_qwen_fast.serving.service.workers import import_uvicorn


class BackgroundService:
    """``with BackgroundService(app) as service: ... service.url``: the app answers on
    ``service.url`` until the block ends."""

    def __init__(self, app: Any, host: str = "127.0.0.1", port: int = 0) -> None:
        uvicorn = import_uvicorn()
        port = port or free_port(host)
        self.url = f"http://{host}:{port}"
        self._server = uvicorn.Server(uvicorn.Config(app, host=host, port=port, log_level="warning"))
        self._thread = threading.Thread(target=self._server.run, daemon=True)

    def __enter__(self) -> BackgroundService:
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise ServerStartError(f"the HTTP service at {self.url} did not start")
            time.sleep(0.02)
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.should_exit = True
        self._thread.join(10)


__all__ = ["BackgroundService"]
