"""The cyclic garbage collector, paused where a batch makes many short-lived containers.

A batch makes thousands of containers at a time that live for a moment: a reply's decoded
JSON, each layer of a result on its way to the caller. A collection that runs while they are
alive moves them to an older generation, and enough of them there sets off full collections,
each a walk over the whole heap; per text, that was a large part of the client's CPU. Paused
around such a stretch, the collector never sees what dies within it (reference counting frees
that as ever), and sees what survives once, when it runs again. Only synchronous stretches are
paused: never across an ``await``, where other work of the process runs.
"""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator


@contextlib.contextmanager
def paused() -> Iterator[None]:
    """No cyclic garbage collection inside the block; left alone where the collector is
    already off (the application's choice, which is never undone here)."""
    if not gc.isenabled():
        yield
        return
    gc.disable()
    try:
        yield
    finally:
        gc.enable()


__all__ = ["paused"]
