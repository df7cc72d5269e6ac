"""Caches of finished classifications, so repeated texts never touch the network.

A cache maps a key to a classification's JSON. The classifier makes the key from everything
that decides a result (server, model, the served weights as ``/v1/models`` reports them, this
release, the full prompt layout with labels, descriptions, instructions and examples, the
scoring steps, the thresholds) and the text, hashed together, so a changed configuration or
redeployed weights can never hit an old entry. A cache that fails (a locked or corrupt
database) costs no results: the classifier logs it and asks the server. Off by default:
``QwenClassifier(..., cache=InMemoryCache())`` or ``cache=SQLiteCache("labels.db")``.
"""

from __future__ import annotations

import abc
import json
import logging
import queue
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError

_log = logging.getLogger("langchain_qwen_fast")


class ClassificationCache(abc.ABC):
    """Base class: ``lookup`` and ``update`` by key, with hit and miss counts. A cache of its
    own defines ``_get``, ``_put`` and ``_clear``."""

    def __init__(self) -> None:
        self.hits = 0
        """Keys found by :meth:`lookup` so far."""
        self.misses = 0
        """Keys not found by :meth:`lookup` so far."""
        self._lock = threading.Lock()

    def lookup(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The cached values of those ``keys`` that are cached."""
        found = self._get(keys)
        with self._lock:
            self.hits += len(found)
            self.misses += len(keys) - len(found)
        return found

    def update(self, values: Mapping[str, dict[str, Any]]) -> None:
        """Store ``values`` by key."""
        if values:
            self._put(values)

    def clear(self) -> None:
        """Drop every entry and reset the counts."""
        with self._lock:
            self.hits = self.misses = 0
        self._clear()

    def __repr__(self) -> str:
        return f"{type(self).__name__}(hits={self.hits}, misses={self.misses})"

    @abc.abstractmethod
    def _get(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        """The stored values of those ``keys`` that are stored."""

    @abc.abstractmethod
    def _put(self, values: Mapping[str, dict[str, Any]]) -> None:
        """Store ``values`` by key."""

    @abc.abstractmethod
    def _clear(self) -> None:
        """Drop every entry."""


class InMemoryCache(ClassificationCache):
    """A least-recently-used cache in this process's memory.

    Args:
        maxsize: most entries kept; the least recently used go first.
    """

    def __init__(self, maxsize: int = 100_000) -> None:
        super().__init__()
        if maxsize < 1:
            raise ConfigurationError("maxsize must be at least 1")
        self.maxsize = maxsize
        self._entries: OrderedDict[str, dict[str, Any]] = OrderedDict()

    def __len__(self) -> int:
        return len(self._entries)

    def _get(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        with self._lock:
            found = {}
            for key in keys:
                if key in self._entries:
                    self._entries.move_to_end(key)
                    found[key] = self._entries[key]
            return found

    def _put(self, values: Mapping[str, dict[str, Any]]) -> None:
        with self._lock:
            for key, value in values.items():
                self._entries[key] = value
                self._entries.move_to_end(key)
            while len(self._entries) > self.maxsize:
                self._entries.popitem(last=False)

    def _clear(self) -> None:
        with self._lock:
            self._entries.clear()


class SQLiteCache(ClassificationCache):
    """A persistent cache in an SQLite file, shared by the processes that open the same file.

    Writes never wait on the caller's thread (an event loop's, say): :meth:`update` hands its
    batch to the cache's writer thread, which writes each batch in one transaction; entries
    waiting to be written are already found by :meth:`lookup`. At most ``max_pending`` batches
    wait: past that a batch is not kept (a cache only saves work), with a warning. The file is
    in WAL mode with a busy timeout, so several processes read and write it at once.

    Args:
        path: the database file; created with its table if missing.
        max_pending: batches waiting for the writer, at most.
        busy_timeout: seconds a write waits for another process's transaction.
    """

    def __init__(self, path: str | Path, *, max_pending: int = 1024, busy_timeout: float = 5.0) -> None:
        super().__init__()
        self.path = Path(path)
        self._busy_ms = int(busy_timeout * 1000)
        self._connection = self._connect()
        self._pending: dict[str, dict[str, Any]] = {}
        self._queue: queue.Queue[dict[str, dict[str, Any]] | None] = queue.Queue(maxsize=max_pending)
        self._writer = threading.Thread(target=self._write_batches, name="qwen-fast-cache", daemon=True)
        self._writer.start()

    def _connect(self) -> sqlite3.Connection:
        connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        connection.execute(f"PRAGMA busy_timeout={self._busy_ms}")
        connection.execute("PRAGMA journal_mode=WAL")
        connection.execute("CREATE TABLE IF NOT EXISTS classifications (key TEXT PRIMARY KEY, value TEXT)")
        return connection

    def __len__(self) -> int:
        self.flush()
        with self._lock:
            return int(self._connection.execute("SELECT COUNT(*) FROM classifications").fetchone()[0])

    def _get(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            found.update({key: self._pending[key] for key in keys if key in self._pending})
            rest = [key for key in keys if key not in found]
            for start in range(0, len(rest), 500):  # SQLite caps the parameters of one query
                part = rest[start : start + 500]
                marks = ",".join("?" * len(part))
                rows = self._connection.execute(
                    f"SELECT key, value FROM classifications WHERE key IN ({marks})", part
                ).fetchall()
                found.update({key: json.loads(value) for key, value in rows})
        return found

    def _put(self, values: Mapping[str, dict[str, Any]]) -> None:
        batch = dict(values)
        with self._lock:
            self._pending.update(batch)
        try:
            self._queue.put_nowait(batch)
        except queue.Full:
            with self._lock:
                for key in batch:
                    self._pending.pop(key, None)
            _log.warning(
                "SQLiteCache: %d batches already wait to be written; %d results not kept",
                self._queue.maxsize,
                len(batch),
            )

    def _write_batches(self) -> None:
        writer = self._connect()
        try:
            while (batch := self._queue.get()) is not None:
                try:
                    with writer:  # one transaction for the whole batch
                        writer.execute("BEGIN IMMEDIATE")
                        writer.executemany(
                            "INSERT OR REPLACE INTO classifications (key, value) VALUES (?, ?)",
                            [(key, json.dumps(value)) for key, value in batch.items()],
                        )
                except sqlite3.Error as exc:
                    _log.warning("SQLiteCache: writing %d results failed: %s", len(batch), exc)
                finally:
                    with self._lock:
                        for key, value in batch.items():
                            if self._pending.get(key) is value:
                                del self._pending[key]
                    self._queue.task_done()
            self._queue.task_done()
        finally:
            writer.close()

    def flush(self) -> None:
        """Wait until every batch handed to :meth:`update` so far is written."""
        if self._writer.is_alive():
            self._queue.join()

    def _clear(self) -> None:
        self.flush()
        with self._lock:
            self._connection.execute("DELETE FROM classifications")

    def close(self) -> None:
        """Write what waits, stop the writer and close the database."""
        if self._writer.is_alive():
            self._queue.put(None)
            self._writer.join()
        self._connection.close()
