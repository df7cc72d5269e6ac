"""A stand-in engine for client-process tests, in a module of its own so that the spawned
workers import nothing else: answers each text with (pid, text, requests in flight); its
process exits at once on the text ``DIE_ON``."""

from __future__ import annotations

import os
from typing import Any

DIE_ON = "die"


class EchoEngine:
    def __init__(self, **settings: Any) -> None:
        self.settings = settings

    async def aclassify(self, texts: list[str], *, max_concurrency: int) -> list[Any]:
        if DIE_ON in texts:
            os._exit(3)
        return [(os.getpid(), text, max_concurrency) for text in texts]

    async def aprepare(self) -> None:
        return None
