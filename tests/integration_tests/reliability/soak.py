"""Load and crash measurements against a real vLLM server, at CI sizes or full sizes.

    python -m tests.reliability.soak                    # full sizes: starts its own server
    python -m tests.reliability.soak --items 20000 --concurrent 1000 --kill-items 2000

Prints one JSON object: items sent, answered, failed (by error type), resident memory
growth, open file descriptors before/after, the event loop's longest stall, and times.
The pytest suite in this folder calls the same functions with smaller sizes.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import gc
import json
import os
import signal
import time
from pathlib import Path
from typing import Any

from langchain_qwen_fast import Classification, QwenClassifier
from langchain_qwen_fast.serving.launcher import VLLMServer, free_port
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from langchain_qwen_fast.testing.tiny_model import build_test_model

LABELS = list(AG_NEWS_LABELS)
ROOT = Path(__file__).resolve().parents[3]


def texts(n: int, tag: str = "") -> list[str]:
    return [f"{h} {tag}{i}" for i, h in enumerate(headlines(n))]


def rss_mib() -> float:
    """This process's resident memory, MiB (Linux)."""
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


def open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def tally(results: list[Any], labels: list[str]) -> dict[str, Any]:
    """Answered / failed-by-type counts; checks every slot holds exactly one outcome."""
    errors: collections.Counter[str] = collections.Counter()
    answered = 0
    for result in results:
        if isinstance(result, Classification):
            assert result.label in labels, result
            answered += 1
        elif isinstance(result, Exception):
            errors[type(result).__name__] += 1
        else:
            raise AssertionError(f"slot holds neither a result nor an error: {result!r}")
    return {"sent": len(results), "answered": answered, "failed": dict(errors)}


class LoopLag:
    """Longest gap between a 10 ms ticker's wake-ups beyond its period: how long the event
    loop was blocked by synchronous work."""

    def __init__(self, period: float = 0.01) -> None:
        self.period = period
        self.worst = 0.0
        self._task: asyncio.Task[None] | None = None

    async def _tick(self) -> None:
        last = time.perf_counter()
        while True:
            await asyncio.sleep(self.period)
            now = time.perf_counter()
            self.worst = max(self.worst, now - last - self.period)
            last = now

    def __enter__(self) -> LoopLag:
        self._task = asyncio.get_running_loop().create_task(self._tick())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


async def load(base_url: str, api_key: str | None, items: int, concurrent: int) -> dict[str, Any]:
    """``items`` through one ``abatch``, then ``concurrent`` simultaneous ``ainvoke`` calls."""
    classifier = QwenClassifier(labels=LABELS, base_url=base_url, api_key=api_key)
    await classifier.ainvoke("warm up")
    classifier.invoke("warm up")
    gc.collect()
    fds_before, rss_before = open_fds(), rss_mib()
    with LoopLag() as batch_lag:
        start = time.perf_counter()
        batch = await classifier.abatch(texts(items, "b"), return_exceptions=True)
        batch_s = time.perf_counter() - start
    # All calls start in the same instant: their set-up (run bookkeeping, request building,
    # ~0.5 ms each) runs back to back before any awaits the network.
    with LoopLag() as burst_lag:
        start = time.perf_counter()
        singles = await asyncio.gather(*(classifier.ainvoke(t) for t in texts(concurrent, "c")), return_exceptions=True)
        singles_s = time.perf_counter() - start
    rss_peak = rss_mib()
    await classifier.aclose()
    classifier.close()
    report = {
        "abatch": {
            **tally(batch, LABELS),
            "seconds": round(batch_s, 2),
            "per_s": round(items / batch_s, 1),
            "max_loop_stall_ms": round(batch_lag.worst * 1000, 1),
        },
        "ainvoke_concurrent": {
            **tally(singles, LABELS),
            "seconds": round(singles_s, 2),
            "max_loop_stall_ms": round(burst_lag.worst * 1000, 1),
        },
    }
    del batch, singles, classifier
    gc.collect()
    report |= {
        "rss_mib_before": round(rss_before, 1),
        "rss_mib_peak": round(rss_peak, 1),
        "rss_mib_after": round(rss_mib(), 1),
        "fds_before": fds_before,
        "fds_after": open_fds(),
    }
    return report


async def kill_mid_batch(server: VLLMServer, api_key: str | None, items: int, after: float = 1.0) -> dict[str, Any]:
    """Kill the server (SIGKILL, its whole process group) ``after`` seconds into an ``abatch``
    of ``items``; then restart it on the same port and classify again with the same object."""
    classifier = QwenClassifier(labels=LABELS, base_url=server.base_url, api_key=api_key, max_retries=2, timeout=10)
    await classifier.ainvoke("warm up")
    start = time.perf_counter()
    task = asyncio.create_task(classifier.abatch(texts(items, "k"), return_exceptions=True))
    await asyncio.sleep(after)
    os.killpg(server.pid, signal.SIGKILL)  # a crash, not a clean stop
    results = await asyncio.wait_for(task, timeout=300)  # hang guard, far above the retry budget
    seconds = time.perf_counter() - start
    server.stop()
    report = {**tally(results, LABELS), "seconds": round(seconds, 2)}
    restarted = VLLMServer(
        server.model, profile=server.profile.name, port=server.port, api_key=api_key, log_path=server.log_path
    )
    restarted.start()
    report["restart_s"] = round(restarted.startup_seconds or 0, 1)
    after_restart = await classifier.abatch(texts(50, "r"), return_exceptions=True)
    report["after_restart"] = tally(after_restart, LABELS)
    report["server"] = restarted
    return report


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--items", type=int, default=20000)
    parser.add_argument("--concurrent", type=int, default=1000)
    parser.add_argument("--kill-items", type=int, default=4000)
    args = parser.parse_args()
    model = build_test_model(ROOT / ".models" / "qwen3-tiny", "tiny")
    key = "sk-soak-" + os.urandom(6).hex()
    log = ROOT / "out" / "soak-server.log"
    log.parent.mkdir(exist_ok=True)
    server = VLLMServer(model, profile="cpu", port=free_port(), api_key=key, log_path=log).start()
    try:
        report = {"load": asyncio.run(load(server.base_url, key, args.items, args.concurrent))}
        crash = asyncio.run(kill_mid_batch(server, key, args.kill_items))
        server = crash.pop("server")
        report["kill_mid_batch"] = crash
    finally:
        server.stop()
    print(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
