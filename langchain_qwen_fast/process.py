"""What a process does with Python's cyclic garbage collector: the choice of whoever owns it.

The library never changes the collector, never freezes objects and never forks behind its
caller's back. The applications (``qwen-fast`` commands, the service's worker processes, the
job's table process, the Ray stage's actors) own their processes and make these choices
here, in one place; a program of its own may make the same ones.

**Pausing the collector over a batch.** A large batch makes many containers at a time that
live for a moment (each reply's decoded JSON, each layer of a result on its way to the
caller). A collection that runs while they are alive moves them to an older generation, and
enough of them there set off full collections, each a walk over the whole heap: a large part
of the client's CPU a text. With automatic collection paused over the batch, the collector
never sees what dies within it (reference counting frees that as ever) and sees what survives
once, when the pause ends. Cyclic garbage made meanwhile waits for that moment, so a pause
belongs around bounded work, not around a long-running server.
"""

from __future__ import annotations

import contextlib
import gc
import threading
from collections.abc import Iterator

_lock = threading.Lock()
#: how many pauses are held now, on every thread together
_holders = 0
#: the thresholds found when the first holder entered, and the ones the pause set
_found: tuple[int, ...] = ()
_set: tuple[int, ...] = ()


@contextlib.contextmanager
def collector_paused() -> Iterator[None]:
    """No automatic cyclic garbage collection while any thread holds this pause.

    Safe to hold from several threads and to nest: automatic collection stops when the first
    holder enters and comes back when the last one leaves, as it was found then. The pause
    sets the first collection threshold to zero (:func:`gc.set_threshold`) and never calls
    :func:`gc.enable` or :func:`gc.disable`, so an application's own ``gc.enable()`` or
    ``gc.disable()``, made before or during a pause, stands. A threshold the application sets
    while a pause is held also stands: the last holder restores the thresholds it found only
    where they are still the ones the pause set. Explicit :func:`gc.collect` calls still run.
    """
    global _holders, _found, _set
    with _lock:
        if _holders == 0:
            _found = gc.get_threshold()
            gc.set_threshold(0, *_found[1:])
            _set = gc.get_threshold()
        _holders += 1
    try:
        yield
    finally:
        with _lock:
            _holders -= 1
            if _holders == 0 and gc.get_threshold() == _set:
                gc.set_threshold(*_found)


def freeze_start_up() -> None:
    """Move every object of this process out of the collector's sight (:func:`gc.freeze`),
    after one full collection (what is garbage already is not kept): for a process the caller
    owns, once its long-lived objects are made (a service worker's classifier and tokenizer).
    Full collections then walk only what is made later. Never undone: the objects live as long
    as the process."""
    gc.collect()
    gc.freeze()


def resume_after_fork() -> None:
    """In a forked child the caller owns, end a pause inherited from the parent: the thread that
    held it is not in the child, so nothing would end it, and the child would never collect
    cyclic garbage. Automatic collection comes back as the pause found it; without a pause
    held at the fork, nothing changes."""
    global _holders
    with _lock:
        if _holders and gc.get_threshold() == _set:
            gc.set_threshold(*_found)
        _holders = 0


def freeze_after_fork() -> None:
    """In a forked child the caller owns, move what it shares with its parent out of the
    collector's sight, with no collection first: a collection writes to every object it walks,
    and each page written is copied out of the parent's. Never undone."""
    gc.freeze()


class ForeignFreeze:
    """The objects a third party's start-up freezes (vLLM's app calls :func:`gc.freeze`, as in
    its server), unfrozen again by :meth:`undo` once it is done, so that a process that starts
    engines in turn does not keep every one of them. Made before that start-up: where the
    process had objects frozen already, nothing is unfrozen, since :func:`gc.unfreeze` would
    also release what the host froze."""

    def __init__(self) -> None:
        self._none_frozen_before = gc.get_freeze_count() == 0

    def undo(self) -> None:
        """Unfreeze, unless objects were frozen before this was made."""
        if self._none_frozen_before:
            gc.unfreeze()


__all__ = ["ForeignFreeze", "collector_paused", "freeze_after_fork", "freeze_start_up", "resume_after_fork"]
