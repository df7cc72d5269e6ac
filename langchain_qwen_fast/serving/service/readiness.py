"""``GET /ready``: whether the service can classify now, found out within a short timeout.

Ready means the classifier's set-up with the vLLM server is done and at least one of its vLLM
servers answers ``/v1/models``. The probe of each server goes through the engine's own
transport (:meth:`~langchain_qwen_fast._core.transport.Transport.aprobe`): one request, no
retry, the classifier's key and ``http_transport``; a server that answers slowly is not ready.
"""

from __future__ import annotations

import asyncio
import logging
from typing import TYPE_CHECKING, Any, NamedTuple

if TYPE_CHECKING:
    from langchain_qwen_fast._core.engine import Engine
    from langchain_qwen_fast.serving.service.micro_batcher import MicroBatcher

logger = logging.getLogger(__name__)

#: Seconds a readiness answer is reused: probes from many balancers cost vLLM one call a second.
READY_REUSE_SECONDS = 1.0


class ReadyState(NamedTuple):
    """What a readiness check found."""

    ready: bool
    #: why not, in words ("" when ready)
    why_not: str
    #: the vLLM servers that answered
    answering: int


class Readiness:
    """The readiness check of one service. One check runs at a time and its answer is reused
    for :data:`READY_REUSE_SECONDS`; a set-up that takes longer than ``timeout`` goes on in the
    background and a later check sees it."""

    def __init__(self, engine: Engine, batcher: MicroBatcher, timeout: float) -> None:
        self._engine = engine
        self._batcher = batcher
        self._timeout = timeout
        self._set_up = False
        self._setup_task: asyncio.Task[Any] | None = None
        self._check_task: asyncio.Task[ReadyState] | None = None
        self._known: tuple[float, ReadyState] | None = None

    @property
    def replicas(self) -> int:
        """The vLLM servers the classifier spreads its requests over."""
        return len(self._engine.settings.base_urls)

    async def state(self) -> ReadyState:
        """What the last check found, if recent; else what a new one finds within the timeout."""
        loop = asyncio.get_running_loop()
        if self._known is not None and loop.time() - self._known[0] < READY_REUSE_SECONDS:
            return self._known[1]
        if self._check_task is None or self._check_task.done():
            self._check_task = loop.create_task(self._check())
        try:
            # Shielded: a probe that gives up leaves the check (and the set-up) to go on.
            state = await asyncio.wait_for(asyncio.shield(self._check_task), self._timeout)
        except TimeoutError:
            state = ReadyState(False, f"the vLLM server did not answer within {self._timeout:g} s", 0)
        self._known = (loop.time(), state)
        return state

    async def _check(self) -> ReadyState:
        if not (self._set_up or self._batcher.prepared):
            if self._setup_task is None or self._setup_task.done():
                self._setup_task = asyncio.create_task(self._engine.aprepare())
            try:
                await asyncio.shield(self._setup_task)
            except Exception as exc:
                logger.warning("readiness: the set-up failed: %s: %s", type(exc).__name__, exc)
                return ReadyState(False, "the set-up with the vLLM server failed", 0)
            self._set_up = True
        answering = sum(await self._engine.transport.aprobe("models", self._timeout))
        if not answering:
            return ReadyState(False, "no vLLM server answers", 0)
        return ReadyState(True, "", answering)


__all__ = ["READY_REUSE_SECONDS", "Readiness", "ReadyState"]
