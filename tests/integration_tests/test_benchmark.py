"""The benchmark's own helpers (the full benchmark runs in test_examples)."""

from __future__ import annotations

from langchain_qwen_fast.benchmark import _drop_flags, news_items
from langchain_qwen_fast.server.launcher import PROFILES


def test_drop_flags_removes_flags_with_their_values() -> None:
    gpu = list(PROFILES["gpu"].args)
    kept = _drop_flags(gpu, ["--compilation-config", "--disable-log-stats"])
    assert "--compilation-config" not in kept and "--disable-log-stats" not in kept
    assert not any("cudagraph_mode" in a for a in kept)
    assert kept[kept.index("--kv-cache-memory-bytes") + 1] == "2G"
    assert len(kept) == len(gpu) - 3


def test_news_items_are_distinct() -> None:
    items = news_items(500)
    assert len(set(items)) == 500
