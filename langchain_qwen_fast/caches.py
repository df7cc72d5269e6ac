"""Caches of finished classifications, so repeated texts never touch the network.

Off by default: ``QwenClassifier(..., cache=InMemoryCache())`` or
``cache=SQLiteCache("labels.db")``. A cache of your own subclasses
:class:`ClassificationCache` and defines ``_get``, ``_put`` and ``_clear``.
"""

from langchain_qwen_fast._core.caches import ClassificationCache, InMemoryCache, SQLiteCache

__all__ = ["ClassificationCache", "InMemoryCache", "SQLiteCache"]
