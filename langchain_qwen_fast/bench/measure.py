"""The measuring library of ``qwen-fast bench``: what one run owns (:class:`RunContext`: the
servers it measures and texts new to them), the timing loops (one request at a time,
interleaved; one timed call), a path's result and its summary row, the CPU the servers'
processes spent, and the classifiers the benchmark times, set up and warm.

Importing this module imports nothing heavy: LangChain, the classifier, psutil and tqdm are
imported where used, so the command module may read its names at parse time.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast._extras import require_extra
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, news_items

#: The labels every benchmark classifies into.
LABELS = list(AG_NEWS_LABELS)

#: Where a run's fresh texts start in :func:`news_items`: far past the batch runs' texts (they
#: start at 0), so a one-at-a-time text is never one a batch run sent.
FRESH_TEXTS_START = 10_000_000


def require(*modules: str, extra: str = "bench") -> None:
    """The benchmark's extra check, before a run starts servers: see :func:`require_extra`."""
    require_extra(extra, *modules, what="the benchmark")


class FreshTexts:
    """News-like texts that no earlier call of this object returned. A text sent again finds
    its whole prompt in the server's prefix cache, and one at a time that is measurably faster
    than a new text, which is not what a user's new texts see."""

    def __init__(self, start: int = FRESH_TEXTS_START) -> None:
        self.start = start

    def __call__(self, n: int) -> list[str]:
        texts = news_items(n, self.start)
        self.start += n
        return texts


@dataclass
class RunContext:
    """What one benchmark run shares between its measurements, created per run and passed to
    each: the API processes' pids of the servers the run started (their process trees' CPU is
    measured; a server's pid is added while it runs) and the run's source of texts new to
    those servers."""

    server_pids: list[int] = field(default_factory=list)
    fresh_texts: FreshTexts = field(default_factory=FreshTexts)

    def for_servers(self, pids: Sequence[int]) -> RunContext:
        """The same run measuring only the servers ``pids`` (the fresh texts stay shared)."""
        return replace(self, server_pids=list(pids))


def server_cpu_seconds(pids: Sequence[int]) -> dict[str, float]:
    """CPU seconds used so far by the servers whose API processes are ``pids`` and their
    children, by role: the API process, the engine core (vLLM titles it ``VLLM::EngineCore``)
    and any other. Empty without psutil or servers."""
    try:
        import psutil
    except ImportError:
        return {}
    totals = {"api_server": 0.0, "engine_core": 0.0, "other": 0.0}
    for pid in pids:
        try:
            root = psutil.Process(pid)
            procs = [root, *root.children(recursive=True)]
        except psutil.Error:
            continue
        for proc in procs:
            try:
                times, name = proc.cpu_times(), proc.name()
            except psutil.Error:
                continue
            role = "engine_core" if "EngineCor" in name else "api_server" if proc.pid == pid else "other"
            totals[role] += times.user + times.system
    return totals if pids else {}


def cores_between(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    """Cores each role kept busy between two :func:`server_cpu_seconds` readings ``seconds`` apart."""
    return {role: round((after[role] - before[role]) / seconds, 2) for role in after if role in before}


def rounded(value: float | None, digits: int = 2) -> float | None:
    """``value`` rounded, None kept."""
    return None if value is None else round(value, digits)


@dataclass
class PathRow:
    """The row reported for one path: its rate, latency percentiles (one-at-a-time paths), the
    client's CPU a request, its rate over the fastest path's, and the cores the client and the
    servers' processes kept busy (None where no server was measured)."""

    path: str
    kind: str
    items: int
    requests_per_s: float
    p50_ms: float | None
    p95_ms: float | None
    p99_ms: float | None
    client_cpu_ms_per_request: float
    ratio_to_fastest: float
    cores_busy: dict[str, float] | None = None


@dataclass
class PathResult:
    """One path's measurement: items, wall and client CPU seconds, latencies, and the cores
    the servers' processes kept busy by role (see :func:`server_cpu_seconds`)."""

    name: str
    kind: str  # "one-at-a-time", "batch" or "concurrent clients"
    items: int
    seconds: float
    cpu_seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    window: tuple[float, float] = (0.0, 0.0)
    server_cores: dict[str, float] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        """Items per second."""
        return self.items / self.seconds

    def percentile(self, q: float) -> float | None:
        """The ``q``-th latency percentile in ms (nearest rank), None without latencies."""
        return percentile(self.latencies_ms, q)

    def summary(self, fastest_rps: float) -> PathRow:
        """The row reported for this path, with its ratio to ``fastest_rps``."""
        busy = {"client": round(self.cpu_seconds / self.seconds, 2), **self.server_cores} if self.server_cores else None
        return PathRow(
            path=self.name,
            kind=self.kind,
            items=self.items,
            requests_per_s=round(self.rps, 1),
            p50_ms=rounded(self.percentile(50)),
            p95_ms=rounded(self.percentile(95)),
            p99_ms=rounded(self.percentile(99)),
            client_cpu_ms_per_request=round(self.cpu_seconds / self.items * 1000, 3),
            ratio_to_fastest=round(self.rps / fastest_rps, 3),
            cores_busy=busy,
        )


def p50_gap(path: PathResult, reference: PathResult) -> float | None:
    """``path``'s p50 minus ``reference``'s, in ms."""
    ours, theirs = path.percentile(50), reference.percentile(50)
    return None if ours is None or theirs is None else round(ours - theirs, 3)


def run_one_at_a_time(run: RunContext, paths: dict[str, Callable[[str], Any]], items: int) -> list[PathResult]:
    """Time each one-at-a-time path over ``items`` texts, interleaved item by item so drift
    hits all alike; every request a text new to the server (``run.fresh_texts``)."""
    from tqdm import tqdm

    latencies: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
    names = list(paths)
    texts = run.fresh_texts(items * len(names))
    for fn in paths.values():  # warm every client's connection
        fn("warm-up")
    cpu_before = server_cpu_seconds(run.server_pids)
    start = time.perf_counter()
    for i in tqdm(range(items), desc="one at a time", unit="item"):
        rotation = names[i % len(names) :] + names[: i % len(names)]
        for j, name in enumerate(rotation):
            text = texts[i * len(names) + j]
            c0, t0 = time.process_time(), time.perf_counter()
            paths[name](text)
            latencies[name].append((time.perf_counter() - t0) * 1000)
            cpu[name] += time.process_time() - c0
    window = (start, time.perf_counter())  # interleaved: all share one window (and server CPU figures)
    cores = cores_between(cpu_before, server_cpu_seconds(run.server_pids), window[1] - window[0])
    return [
        PathResult(name, "one-at-a-time", items, sum(latencies[name]) / 1000, cpu[name], latencies[name], window, cores)
        for name in names
    ]


def timed(name: str, items: int, fn: Callable[[], Any], pids: Sequence[int] = ()) -> PathResult:
    """One call of ``fn`` (a batch of ``items``), with the cores the servers ``pids`` kept busy."""
    before = server_cpu_seconds(pids)
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    t1 = time.perf_counter()
    cores = cores_between(before, server_cpu_seconds(pids), t1 - t0)
    return PathResult(name, "batch", items, t1 - t0, time.process_time() - c0, window=(t0, t1), server_cores=cores)


def own_tokenizer(model: str | None) -> str | None:
    """``model`` when it is a directory with a ``tokenizer.json`` (token-id prompts can then be
    sent with the model's own tokenizer), else None."""
    return model if model and (Path(model) / "tokenizer.json").is_file() else None


def ready_classifier(
    base_url: str | list[str], model: str, tokenizer: str | None = None, *, warm_ups: int = 1, **settings: Any
) -> Any:
    """A ``QwenClassifier`` over ``base_url`` with ``settings``, after ``warm_ups`` single
    requests (its set-up done and a connection open: the first request pays for both)."""
    from langchain_qwen_fast.classifiers import QwenClassifier

    settings.setdefault("labels", LABELS)
    classifier = QwenClassifier(base_url=base_url, model=model, tokenizer_path=tokenizer, **settings)
    for _ in range(warm_ups):
        classifier.invoke("warm-up")
    return classifier


__all__ = [
    "FRESH_TEXTS_START",
    "LABELS",
    "FreshTexts",
    "PathResult",
    "PathRow",
    "RunContext",
    "cores_between",
    "own_tokenizer",
    "p50_gap",
    "percentile",
    "ready_classifier",
    "require",
    "rounded",
    "run_one_at_a_time",
    "server_cpu_seconds",
    "timed",
]
