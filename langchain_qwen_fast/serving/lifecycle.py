"""What every server this package starts shares: its start and stop as one.

:class:`ManagedServer` is a server, or a group of them, that this process starts and stops: a
context manager (``with VLLMServer(...) as server:``) whose failed or interrupted start stops
what it had started before the error goes on (:meth:`ManagedServer.stopped_on_failure`), so
that nothing is left holding a port or a GPU. :class:`ChildProcessServer` is one such server in
a child process of its own process group (:mod:`~langchain_qwen_fast.serving.process_group`):
:class:`~langchain_qwen_fast.serving.VLLMServer` and :class:`~langchain_qwen_fast.serving.Router`.
"""

from __future__ import annotations

import contextlib
import subprocess
from abc import ABC, abstractmethod
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, ClassVar

from langchain_qwen_fast.serving.process_group import http_base, stop_group, wait_until_answering

if TYPE_CHECKING:
    from typing import Self

#: Seconds a server interrupted during its start-up gets to exit before it is killed: it has
#: served nothing, so there is nothing to finish.
INTERRUPTED_STOP_TIMEOUT = 5.0


class ManagedServer(ABC):
    """A server (or group of servers) this process starts and stops; a context manager."""

    #: seconds :meth:`stop` gives a server to exit before it is killed, unless told otherwise
    stop_timeout: ClassVar[float] = 30.0

    @abstractmethod
    def start(self) -> Self:
        """Start and wait until ready; on a failure or an interrupt, stop and raise."""

    @abstractmethod
    def stop(self, timeout: float | None = None) -> None:
        """Stop (killing after ``timeout`` seconds, default :attr:`stop_timeout`); idempotent."""

    @contextlib.contextmanager
    def stopped_on_failure(self) -> Iterator[None]:
        """Stop everything started so far when the block raises, then let the error go on: at
        once after an interrupt (Ctrl-C), with the usual wait after any other error."""
        try:
            yield
        except KeyboardInterrupt:
            self.stop(INTERRUPTED_STOP_TIMEOUT)
            raise
        except BaseException:
            self.stop()
            raise

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


class ChildProcessServer(ManagedServer):
    """A server in a child process of its own process group, bound to ``host:port``, its output
    in ``log_path``. A subclass spawns it (``_process``, from ``_spawned_at``) and waits with
    :meth:`_wait_until_answering`."""

    #: how the server is named in messages
    name: ClassVar[str] = "server"
    host: str
    port: int
    log_path: Path
    #: seconds from the spawn until it must be ready
    startup_timeout: float
    _process: subprocess.Popen[bytes] | None = None
    #: when the process was spawned (``time.monotonic``)
    _spawned_at: float = 0.0

    @property
    def pid(self) -> int | None:
        """The server's process (and process group) id, or None."""
        return self._process.pid if self._process else None

    @property
    def running(self) -> bool:
        """True while the server process is alive."""
        return self._process is not None and self._process.poll() is None

    def _wait_until_answering(
        self, *, interval: float, model: str | None, api_key: str | None, health_path: str | None = "/health"
    ) -> None:
        """Wait until the spawned server on the port is this child, ready
        (:func:`~langchain_qwen_fast.serving.process_group.wait_until_answering`); on a failure
        or an interrupt, stop it and raise."""
        assert self._process is not None, "spawn the process first"
        with self.stopped_on_failure():
            wait_until_answering(
                self._process,
                http_base(self.host, self.port),
                name=self.name,
                log_path=self.log_path,
                started=self._spawned_at,
                timeout=self.startup_timeout,
                interval=interval,
                model=model,
                api_key=api_key,
                health_path=health_path,
            )

    def stop(self, timeout: float | None = None) -> None:
        """Stop the server and every process in its group (SIGKILL after ``timeout`` seconds,
        default :attr:`stop_timeout`); idempotent."""
        if self._process is not None:
            stop_group(self._process, self.stop_timeout if timeout is None else timeout)
            self._process = None
