"""``qwen-fast bench``: latency and throughput side by side against one server in one run.

The paths (:mod:`~langchain_qwen_fast.bench.paths`) on the same texts, one-at-a-time paths
interleaved item by item so drift on a noisy machine hits all of them alike. Reports
requests/s, p50/p95/p99 latency, client CPU per request and the ratio to the fastest path,
and writes JSON and a PNG chart. :func:`run_compare` takes :class:`CompareOptions`; the
command's options and their help are in :mod:`langchain_qwen_fast.cli.bench`. The steps are
public (:func:`served`, :func:`measure_paths`, :func:`summarize`, :func:`write_report`) so
that a longer measurement can add rows of its own to the same run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast.bench.measure import (
    PathResult,
    PathRow,
    RunContext,
    p50_gap,
    require,
    run_one_at_a_time,
)
from langchain_qwen_fast.bench.report import Header, header, plot, render_table, write_json
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName


@dataclass(frozen=True)
class CompareOptions:
    """What one ``qwen-fast bench`` run measures, and against which server: a running one
    (``base_url``) or one it starts (``start_server``: a model directory or hub id, with
    ``profile``, ``server_args`` and ``model`` as its served name). ``tokenizer``: the one
    token-id paths use (None: no token-id paths). The command's ``--help`` says each in full."""

    base_url: str | None = None
    start_server: str | None = None
    profile: ProfileName = "auto"
    server_args: list[str] = field(default_factory=list)
    model: str = "qwen3"
    tokenizer: str | None = None
    items: int = 512
    chat_items: int | None = None  # None: items
    invoke_items: int = 200
    concurrency: int | None = None  # None: each batch path's own
    out: Path = Path("out/benchmark")
    label: str = ""

    def __post_init__(self) -> None:
        if (self.base_url is None) == (self.start_server is None):
            raise ConfigurationError("give either base_url (a running server) or start_server (a model to serve)")
        if min(self.items, self.invoke_items, self.chat_texts) < 1:
            raise ConfigurationError("items, chat_items and invoke_items are at least 1")

    @property
    def chat_texts(self) -> int:
        """Texts the ChatOpenAI batch paths classify."""
        return self.items if self.chat_items is None else self.chat_items


@dataclass
class PromptTokens:
    """Token counts of the classifier's rendered prompts, from the server's own tokeniser."""

    mean: float
    min: int
    max: int


@dataclass
class Checks:
    """The comparison's headline ratios (rates) and gaps (p50 latency, ms)."""

    classifier_batch_over_chat_batch: float
    best_classifier_batch_over_chat_batch: float
    classifier_invoke_p50_minus_raw_http_ms: float | None
    lcel_p50_minus_chat_invoke_ms: float | None
    llm_chain_p50_minus_chat_invoke_ms: float | None


@dataclass
class CompareReport:
    """What ``qwen-fast bench`` writes to ``results.json``."""

    header: Header
    url: str
    server_args: list[str]
    items: int
    chat_items: int
    invoke_items: int
    prompt_tokens: PromptTokens
    rows: list[PathRow]
    checks: Checks
    latencies_ms: dict[str, list[float]]


@contextlib.contextmanager
def served(
    options: CompareOptions,
    run: RunContext,
    name: str = "server",
    extra: Sequence[str] = (),
    profile: ProfileName | None = None,
    quantization: str | None = None,
) -> Iterator[str]:
    """The base URL to measure: ``options.base_url``, or a server started for ``options`` (with
    ``extra`` flags, its log ``name``.log in ``options.out``) whose pid ``run`` measures while
    it runs."""
    if options.start_server is None:
        assert options.base_url is not None  # CompareOptions has one or the other
        yield options.base_url
        return
    from langchain_qwen_fast.serving import VLLMServer

    options.out.mkdir(parents=True, exist_ok=True)
    with VLLMServer(
        options.start_server,
        profile=profile or options.profile,
        served_model_name=options.model,
        log_path=options.out / f"{name}.log",
        extra_args=[*options.server_args, *extra],
        quantization=quantization,
    ) as server:
        print(f"{name} ready in {server.startup_seconds:.0f} s at {server.base_url}", flush=True)
        assert server.pid is not None
        run.server_pids.append(server.pid)
        try:
            yield server.base_url
        finally:
            run.server_pids.remove(server.pid)


def prompt_tokens(classifier: Any, root_url: str, texts: list[str]) -> PromptTokens:
    """Token counts of the classifier's rendered prompts, from the server's ``/tokenize``."""
    import httpx

    plan, model = classifier.prepare(), classifier.model
    counts = []
    for text in texts:
        body = {"model": model, "prompt": plan.render(text), "add_special_tokens": False}
        counts.append(len(httpx.post(f"{root_url}/tokenize", json=body, timeout=30).json()["tokens"]))
    return PromptTokens(mean=round(sum(counts) / len(counts), 1), min=min(counts), max=max(counts))


def measure_paths(run: RunContext, url: str, options: CompareOptions) -> tuple[list[PathResult], PromptTokens]:
    """Every path on the server at ``url``: one at a time, then in batches; and the token
    counts of the classifier's prompts."""
    from langchain_qwen_fast.bench.paths import build_paths, run_batches

    one_paths, objects = build_paths(url, options.model, options.tokenizer)
    tokens = prompt_tokens(objects.classifier, url.rstrip("/").removesuffix("/v1"), news_items(64))
    results = run_one_at_a_time(run, one_paths, options.invoke_items)
    texts, chat_texts = news_items(options.items), news_items(options.chat_texts)
    results += run_batches(objects, texts, chat_texts, options.concurrency, run.server_pids)
    return results, tokens


def checks(results: list[PathResult]) -> Checks:
    """The comparison's headline ratios and gaps, from its rows."""
    by_name = {r.name: r for r in results}
    chat_batch = by_name["ChatOpenAI.batch (default config)"].rps
    chat_invoke = by_name["ChatOpenAI.invoke"]
    best_batch = max(r.rps for r in results if r.name.startswith("QwenClassifier.") and "batch" in r.name)
    return Checks(
        classifier_batch_over_chat_batch=round(by_name["QwenClassifier.batch"].rps / chat_batch, 2),
        best_classifier_batch_over_chat_batch=round(best_batch / chat_batch, 2),
        classifier_invoke_p50_minus_raw_http_ms=p50_gap(
            by_name["QwenClassifier.invoke"], by_name["raw HTTP (httpx), same request"]
        ),
        lcel_p50_minus_chat_invoke_ms=p50_gap(by_name["LCEL prompt | ChatOpenAI"], chat_invoke),
        llm_chain_p50_minus_chat_invoke_ms=p50_gap(by_name["LLMChain(ChatOpenAI)"], chat_invoke),
    )


def summarize(options: CompareOptions, url: str, results: list[PathResult], tokens: PromptTokens) -> CompareReport:
    """The report of ``results`` (the paths' and any rows added to them)."""
    fastest = max(r.rps for r in results)
    return CompareReport(
        header=header(options.label),
        url=url,
        server_args=list(options.server_args),
        items=options.items,
        chat_items=options.chat_texts,
        invoke_items=options.invoke_items,
        prompt_tokens=tokens,
        rows=[r.summary(fastest) for r in results],
        checks=checks(results),
        latencies_ms={r.name: r.latencies_ms for r in results if r.latencies_ms},
    )


def write_report(report: CompareReport, out: Path, whole: object | None = None) -> None:
    """``results.json`` (``whole``, a report that holds ``report``, where given) and
    ``chart.png`` in ``out``; the table and the checks printed."""
    write_json(out / "results.json", whole if whole is not None else report)
    title = f"{report.header.label or report.url}  ({report.header.date})"
    plot(report.rows, out / "chart.png", title)
    print()
    print(render_table(report.rows))
    print()
    for key, value in vars(report.checks).items():
        print(f"{key}: {value}")
    print(f"\nwrote {out / 'results.json'} and {out / 'chart.png'}")


def run_compare(options: CompareOptions) -> CompareReport:
    """The comparison: measured, written to ``options.out`` (``results.json`` and
    ``chart.png``) and printed; returns the report."""
    require("tqdm", "langchain_classic", "matplotlib")
    options.out.mkdir(parents=True, exist_ok=True)
    run = RunContext()
    with served(options, run) as url:
        results, tokens = measure_paths(run, url, options)
    report = summarize(options, url, results, tokens)
    write_report(report, options.out)
    return report


__all__ = [
    "Checks",
    "CompareOptions",
    "CompareReport",
    "PromptTokens",
    "checks",
    "measure_paths",
    "prompt_tokens",
    "run_compare",
    "served",
    "summarize",
    "write_report",
]
