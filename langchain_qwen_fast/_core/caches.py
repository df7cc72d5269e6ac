"""Caches of finished classifications, so repeated texts never touch the network.

A cache maps a key to a classification's JSON. The classifier makes the key from everything
that decides a result (server, model, the full prompt layout with labels, descriptions,
instructions and examples, the scoring steps, the thresholds) and the text, hashed together,
so a changed configuration can never hit an old entry. Off by default:
``QwenClassifier(..., cache=InMemoryCache())`` or ``cache=SQLiteCache("labels.db")``.
"""

from __future__ import annotations

import abc
import json
import sqlite3
import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError


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
    """A persistent cache in an SQLite file (shared by processes that open the same file).

    Args:
        path: the database file; created with its table if missing.
    """

    def __init__(self, path: str | Path) -> None:
        super().__init__()
        self.path = Path(path)
        self._connection = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
        self._connection.execute("PRAGMA journal_mode=WAL")
        self._connection.execute("CREATE TABLE IF NOT EXISTS classifications (key TEXT PRIMARY KEY, value TEXT)")

    def __len__(self) -> int:
        with self._lock:
            return int(self._connection.execute("SELECT COUNT(*) FROM classifications").fetchone()[0])

    def _get(self, keys: Sequence[str]) -> dict[str, dict[str, Any]]:
        found: dict[str, dict[str, Any]] = {}
        with self._lock:
            for start in range(0, len(keys), 500):  # SQLite caps the parameters of one query
                part = list(keys[start : start + 500])
                marks = ",".join("?" * len(part))
                rows = self._connection.execute(
                    f"SELECT key, value FROM classifications WHERE key IN ({marks})", part
                ).fetchall()
                found.update({key: json.loads(value) for key, value in rows})
        return found

    def _put(self, values: Mapping[str, dict[str, Any]]) -> None:
        with self._lock:
            self._connection.executemany(
                "INSERT OR REPLACE INTO classifications (key, value) VALUES (?, ?)",
                [(key, json.dumps(value)) for key, value in values.items()],
            )

    def _clear(self) -> None:
        with self._lock:
            self._connection.execute("DELETE FROM classifications")

    def close(self) -> None:
        """Close the database connection."""
        self._connection.close()
