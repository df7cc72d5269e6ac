"""A stand-in classifier for client-process tests, in a module of its own so that the spawned
workers import nothing else: answers each text with (pid, text, in flight); its process exits
at once on the text ``DIE_ON``."""

from __future__ import annotations

import os
from typing import Any

DIE_ON = "die"


class EchoClassifier:
    def __init__(self, **config: Any) -> None:
        self.config = config

    async def abatch(self, texts: list[str], config: dict[str, Any], return_exceptions: bool) -> list[Any]:
        if DIE_ON in texts:
            os._exit(3)
        return [(os.getpid(), text, config["max_concurrency"]) for text in texts]

    async def aprepare(self) -> None:
        return None
