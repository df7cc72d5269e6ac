"""Latency and throughput comparison, side by side against one server in one run.

    qwen-fast bench --base-url http://127.0.0.1:8000/v1
    qwen-fast bench --start-server .models/qwen3-tiny

Paths, all on the same texts: raw HTTP (httpx) with QwenClassifier's exact request, the
``openai`` SDK, ``ChatOpenAI.invoke/.batch/.abatch``, LCEL ``prompt | ChatOpenAI``,
``LLMChain`` (langchain-classic) and ``QwenClassifier.invoke/.batch/.abatch``. One-at-a-time
paths are interleaved item by item, so drift on a noisy machine hits all of them alike.
Reports requests/s, p50/p95/p99 latency, client CPU ms per request and the ratio to the
fastest path; writes JSON and a PNG chart. Needs the ``bench`` extra (tqdm, matplotlib,
langchain-classic, psutil). Uses only the package's public API.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.prompting import DEFAULT_INSTRUCTIONS
from langchain_qwen_fast._core.stats import percentile
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, news_items

LABELS = list(AG_NEWS_LABELS)
# The chat paths get the same instructions and label list as QwenClassifier's prompt.
SYSTEM = f"{DEFAULT_INSTRUCTIONS}\nLabels: {', '.join(LABELS)}"


class GpuSampler:
    """Samples each GPU's utilisation and memory with ``nvidia-smi`` every 200 ms in the background."""

    def __init__(self) -> None:
        import subprocess
        import threading

        self.samples: list[tuple[float, int, float, float]] = []  # (time, GPU index, util %, memory MiB)
        query = ["nvidia-smi", "--query-gpu=index,utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        self._proc = subprocess.Popen([*query, "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                index, util, mem = line.split(",")[:3]
                self.samples.append((time.perf_counter(), int(index), float(util), float(mem)))

    def window(self, start: float, end: float) -> dict[str, Any]:
        """See :func:`gpu_window`."""
        return gpu_window(self.samples, start, end)

    def stop(self) -> None:
        """Stop sampling."""
        self._proc.terminate()


def gpu_window(samples: Sequence[tuple[float, int, float, float]], start: float, end: float) -> dict[str, Any]:
    """From ``(time, GPU index, util %, memory MiB)`` samples between ``start`` and ``end``
    (perf_counter seconds): the mean utilisation over all GPUs and each GPU's own (an idle GPU
    halves the mean of two), and the peak memory of any GPU."""
    inside = [(g, u, m) for t, g, u, m in samples if start <= t <= end]
    if not inside:
        return {"gpu_util_mean_pct": None, "gpu_util_mean_pct_by_gpu": None, "gpu_mem_max_mib": None}
    by_gpu: dict[int, list[float]] = {}
    for g, u, _ in inside:
        by_gpu.setdefault(g, []).append(u)
    return {
        "gpu_util_mean_pct": round(sum(u for _, u, _ in inside) / len(inside), 1),
        "gpu_util_mean_pct_by_gpu": [round(sum(v) / len(v), 1) for _, v in sorted(by_gpu.items())],
        "gpu_mem_max_mib": max(m for _, _, m in inside),
    }


def busy_and_clock(before: Sequence[Any], after: Sequence[Any], mhz: Sequence[float]) -> tuple[float, float | None]:
    """Cores kept busy between two ``psutil.cpu_times(percpu=True)`` readings, and the mean
    clock (MHz) of those cores weighted by how busy each was (None without one clock a core)."""
    shares = []
    for a, b in zip(before, after, strict=True):
        total = sum(b) - sum(a)
        idle = (b.idle - a.idle) + (getattr(b, "iowait", 0.0) - getattr(a, "iowait", 0.0))
        shares.append(max(0.0, min(1.0, (total - idle) / total)) if total > 0 else 0.0)
    busy = sum(shares)
    if len(mhz) != len(shares) or busy == 0:
        return busy, None
    return busy, sum(s * m for s, m in zip(shares, mhz, strict=True)) / busy


class HostCpuSampler:
    """Samples the whole host's busy cores and their clock (psutil) every ``interval`` seconds
    in the background: servers and client share the host's cores, and a CPU's clock falls as
    more of its cores work, so the same work takes longer on a busier host."""

    def __init__(self, interval: float = 0.25) -> None:
        import threading

        import psutil

        self._psutil = psutil
        self.samples: list[tuple[float, float | None]] = []  # (busy cores, busy-weighted MHz)
        self._done = threading.Event()
        self._interval = interval
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def _run(self) -> None:
        before = self._psutil.cpu_times(percpu=True)
        while not self._done.wait(self._interval):
            after = self._psutil.cpu_times(percpu=True)
            clocks = [f.current for f in self._psutil.cpu_freq(percpu=True) or []]
            self.samples.append(busy_and_clock(before, after, clocks))
            before = after

    def stop(self) -> dict[str, float | None]:
        """Stop sampling; the mean busy cores and busy-weighted MHz over the samples."""
        self._done.set()
        self._thread.join()
        clocks = [m for _, m in self.samples if m is not None]
        return {
            "host_cores_busy": round(sum(b for b, _ in self.samples) / len(self.samples), 2) if self.samples else None,
            "busy_core_mhz": round(sum(clocks) / len(clocks)) if clocks else None,
        }


@dataclass
class PathResult:
    """One path's measurement: items, wall and client CPU seconds, latencies, GPU and server CPU."""

    name: str
    kind: str  # "one-at-a-time" or "batch"
    items: int
    seconds: float
    cpu_seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    window: tuple[float, float] = (0.0, 0.0)
    gpu: dict[str, float | None] = field(default_factory=dict)
    #: cores the servers' processes kept busy during the path, by role (see server_cpu_seconds)
    server_cores: dict[str, float] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        """Items per second."""
        return self.items / self.seconds

    def percentile(self, q: float) -> float | None:
        """The ``q``-th latency percentile in ms (nearest rank), None without latencies."""
        return percentile(self.latencies_ms, q)

    def summary(self, fastest_rps: float) -> dict[str, Any]:
        """The row reported for this path, with its ratio to ``fastest_rps``."""
        return {
            "path": self.name,
            "kind": self.kind,
            "items": self.items,
            "requests_per_s": round(self.rps, 1),
            "p50_ms": _round(self.percentile(50)),
            "p95_ms": _round(self.percentile(95)),
            "p99_ms": _round(self.percentile(99)),
            "client_cpu_ms_per_request": round(self.cpu_seconds / self.items * 1000, 3),
            "ratio_to_fastest": round(self.rps / fastest_rps, 3),
            **self.gpu,
            **(
                {"cores_busy": {"client": round(self.cpu_seconds / self.seconds, 2), **self.server_cores}}
                if self.server_cores
                else {}
            ),
        }


#: pids of the servers this run started (their API processes); their process trees are measured.
_SERVER_PIDS: list[int] = []


def server_cpu_seconds(pids: Sequence[int] | None = None) -> dict[str, float]:
    """CPU seconds used so far by servers' processes (``pids``: their API processes; default:
    the servers this run started), by role: the API process, the engine core (vLLM titles it
    ``VLLM::EngineCore``) and any other. Empty without psutil or servers."""
    try:
        import psutil
    except ImportError:
        return {}
    pids = _SERVER_PIDS if pids is None else pids
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


def _cores(before: dict[str, float], after: dict[str, float], seconds: float) -> dict[str, float]:
    return {role: round((after[role] - before[role]) / seconds, 2) for role in after if role in before}


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _chat_messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def build_paths(
    base_url: str, model: str, tokenizer: str | None
) -> tuple[dict[str, Callable[[str], Any]], dict[str, Any]]:
    """The one-at-a-time callables and the objects the batch paths use."""
    import httpx
    from langchain_classic.chains import LLMChain
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI
    from openai import OpenAI

    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=LABELS, base_url=base_url, model=model)
    plan = classifier.prepare()
    classifier.invoke("warm-up")
    http = httpx.Client(timeout=30)
    completions_url = base_url.rstrip("/") + "/completions"

    def raw_http(text: str) -> Any:
        # QwenClassifier's exact request, with nothing else around it.
        body = vllm_api.completions_body(plan, model, 0, [plan.render(text)])
        return http.post(completions_url, json=body).json()["choices"][0]

    thinking_off = {"chat_template_kwargs": {"enable_thinking": False}}
    sdk = OpenAI(base_url=base_url, api_key="EMPTY")

    def openai_sdk(text: str) -> Any:
        messages: Any = _chat_messages(text)
        return sdk.chat.completions.create(
            model=model, messages=messages, max_tokens=1, temperature=0, extra_body=thinking_off
        )

    # The usual LangChain set-up, as users write it (hence keyword names as ChatOpenAI documents them).
    chat_settings: dict[str, Any] = {
        "base_url": base_url,
        "api_key": "EMPTY",
        "model": model,
        "temperature": 0,
        "max_tokens": 1,
        "extra_body": thinking_off,
    }
    chat = ChatOpenAI(**chat_settings)
    prompt = ChatPromptTemplate.from_messages([("system", SYSTEM), ("human", "{text}")])
    lcel = prompt | chat
    llm_chain = LLMChain(llm=chat, prompt=prompt)

    one_at_a_time: dict[str, Callable[[str], Any]] = {
        "raw HTTP (httpx), same request": raw_http,
        "openai SDK chat.completions": openai_sdk,
        "ChatOpenAI.invoke": lambda t: chat.invoke(_chat_messages(t)),
        "LCEL prompt | ChatOpenAI": lambda t: lcel.invoke({"text": t}),
        "LLMChain(ChatOpenAI)": lambda t: llm_chain.invoke({"text": t}),
        "QwenClassifier.invoke": classifier.invoke,
    }
    objects = {"chat": chat, "classifier": classifier}
    if tokenizer:
        with_ids = QwenClassifier(labels=LABELS, base_url=base_url, model=model, tokenizer_path=tokenizer)
        with_ids.invoke("warm-up")
        one_at_a_time[f"QwenClassifier.invoke{IDS}"] = with_ids.invoke
        objects["classifier_ids"] = with_ids
    return one_at_a_time, objects


IDS = ", token ids"  # suffix of the paths that send token-id prompts (tokenizer_path)


def build_head_paths(
    base_url: str, model: str, tokenizer: str | None
) -> tuple[dict[str, Callable[[str], Any]], dict[str, Any]]:
    """:func:`build_paths` for a classification-head model (``/classify``): raw HTTP with the
    classifier's exact request, and the classifier (text and token-id inputs)."""
    import httpx

    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=LABELS, base_url=base_url, model=model, mode="head")
    plan = classifier.prepare()
    classifier.invoke("warm-up")
    http = httpx.Client(timeout=30)
    root = base_url.rstrip("/").removesuffix("/v1")

    def raw_http(text: str) -> Any:
        _, path, body = vllm_api.classify_call(plan, model, 0, [plan.render(text)])
        return http.post(root + path, json=body).json()["data"][0]

    one_at_a_time: dict[str, Callable[[str], Any]] = {
        "raw HTTP (httpx), same request": raw_http,
        "QwenClassifier.invoke": classifier.invoke,
    }
    objects: dict[str, Any] = {"classifier": classifier}
    if tokenizer:
        with_ids = QwenClassifier(labels=LABELS, base_url=base_url, model=model, mode="head", tokenizer_path=tokenizer)
        with_ids.invoke("warm-up")
        one_at_a_time[f"QwenClassifier.invoke{IDS}"] = with_ids.invoke
        objects["classifier_ids"] = with_ids
    return one_at_a_time, objects


class _FreshTexts:
    """News-like texts that no earlier call returned: a text sent again finds its whole prompt
    in the server's prefix cache, and one at a time that is ~1 ms faster on an H200 than a new
    text (the batch runs' texts start at 0; a cache holds a few hundred prompts)."""

    def __init__(self, start: int) -> None:
        self.start = start

    def __call__(self, n: int) -> list[str]:
        texts = news_items(n, self.start)
        self.start += n
        return texts


#: texts for the one-at-a-time paths, each new to the server
fresh_texts = _FreshTexts(10_000_000)


def run_one_at_a_time(paths: dict[str, Callable[[str], Any]], items: int) -> list[PathResult]:
    """Time each one-at-a-time path over ``items`` texts, interleaved item by item so drift
    hits all alike; every request a text new to the server (:data:`fresh_texts`)."""
    from tqdm import tqdm

    latencies: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
    names = list(paths)
    texts = fresh_texts(items * len(names))
    for fn in paths.values():  # warm every client's connection
        fn("warm-up")
    cpu_before = server_cpu_seconds()
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
    cores = _cores(cpu_before, server_cpu_seconds(), window[1] - window[0])
    return [
        PathResult(
            name,
            "one-at-a-time",
            items,
            sum(latencies[name]) / 1000,
            cpu[name],
            latencies[name],
            window,
            {},
            cores,
        )
        for name in names
    ]


def _timed(name: str, items: int, fn: Callable[[], Any], pids: Sequence[int] | None = None) -> PathResult:
    before = server_cpu_seconds(pids)
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    t1 = time.perf_counter()
    cores = _cores(before, server_cpu_seconds(pids), t1 - t0)
    return PathResult(name, "batch", items, t1 - t0, time.process_time() - c0, window=(t0, t1), server_cores=cores)


def run_batches(
    objects: dict[str, Any], texts: list[str], chat_texts: list[str], concurrency: int | None
) -> list[PathResult]:
    """Time the batch paths: ChatOpenAI.batch/abatch and the classifier's batch/abatch."""
    from tqdm import tqdm

    chat = objects["chat"]
    messages = [_chat_messages(t) for t in chat_texts]
    config = {"max_concurrency": concurrency} if concurrency else None
    runs: list[tuple[str, int, Callable[[], Any]]] = [
        ("ChatOpenAI.batch (default config)", len(messages), lambda: chat.batch(messages)),
        ("ChatOpenAI.abatch", len(messages), lambda: asyncio.run(chat.abatch(messages, config=config))),
    ]
    runs += _all_classifier_runs(objects, texts, config)
    return [_timed(name, n, fn) for name, n, fn in tqdm(runs, desc="batch paths", unit="path")]


def _all_classifier_runs(
    objects: dict[str, Any], texts: list[str], config: Any
) -> list[tuple[str, int, Callable[[], Any]]]:
    """The batch runs of the text classifier and, with a tokenizer, the token-id one."""
    runs = _classifier_runs("", objects["classifier"], texts, config)
    if "classifier_ids" in objects:
        runs += _classifier_runs(IDS, objects["classifier_ids"], texts, config)
    return runs


def _classifier_runs(
    suffix: str, classifier: Any, texts: list[str], config: Any
) -> list[tuple[str, int, Callable[[], Any]]]:
    # Without return_exceptions a failed item raises: a run of failures cannot pass as fast.
    return [
        (f"QwenClassifier.batch{suffix}", len(texts), lambda: classifier.batch(texts, config=config)),
        (f"QwenClassifier.abatch{suffix}", len(texts), lambda: asyncio.run(classifier.abatch(texts, config=config))),
    ]


#: The capability rows of :func:`run_capabilities`, the zero-shot baseline first.
CAPABILITY_ROWS = (
    "zero-shot, 4 labels",
    "multi-label, 4 labels",
    "8 static examples",
    "example selector (k=2)",
    "40 labels (label sequences)",
)


def run_capabilities(
    base_url: str | list[str],
    model: str,
    tokenizer: str | None,
    texts: list[str],
    rounds: int = 2,
    rows: Sequence[str] = CAPABILITY_ROWS,
    pids: Sequence[int] | None = None,
) -> tuple[list[PathResult], dict[str, float]]:
    """``QwenClassifier.abatch`` with each capability against zero-shot single-label, on the same
    server and texts: multi-label with 4 labels, 8 static examples, an example selector (a
    semantic-similarity selector over the 8 examples, k=2), 40 labels scored as sequences
    (``rows``: those of :data:`CAPABILITY_ROWS` to run; zero-shot always runs). Paths alternate
    over ``rounds`` and each keeps its best round; each row carries the cores the servers
    ``pids`` kept busy (default: the servers this run started). Returns the rows and the
    ratios of each path's time to the zero-shot one's."""
    unknown = sorted(set(rows) - set(CAPABILITY_ROWS))
    if unknown:
        raise ValueError(f"unknown capability rows {unknown}; known: {list(CAPABILITY_ROWS)}")
    from langchain_core.embeddings import DeterministicFakeEmbedding
    from langchain_core.example_selectors import SemanticSimilarityExampleSelector
    from langchain_core.vectorstores import InMemoryVectorStore

    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.testing.samples import SAMPLE_EXAMPLES

    selector = SemanticSimilarityExampleSelector.from_examples(
        [{"text": t, "label": label} for t, label in SAMPLE_EXAMPLES],
        DeterministicFakeEmbedding(size=64),
        InMemoryVectorStore,
        k=2,
    )
    common: dict[str, Any] = {"base_url": base_url, "model": model, "tokenizer_path": tokenizer}
    build: dict[str, Callable[[], Any]] = {
        "zero-shot, 4 labels": lambda: QwenClassifier(labels=LABELS, **common),
        "multi-label, 4 labels": lambda: QwenClassifier(labels=LABELS, multi_label=True, **common),
        "8 static examples": lambda: QwenClassifier(labels=LABELS, examples=list(SAMPLE_EXAMPLES), **common),
        "example selector (k=2)": lambda: QwenClassifier(labels=LABELS, example_selector=selector, **common),
        "40 labels (label sequences)": lambda: QwenClassifier(labels=[f"Topic {i}" for i in range(40)], **common),
    }
    wanted = {CAPABILITY_ROWS[0], *rows}
    variants = {name: make() for name, make in build.items() if name in wanted}
    best: dict[str, PathResult] = {}
    for classifier in variants.values():
        classifier.invoke("warm-up")
    for _ in range(rounds):
        for name, classifier in variants.items():

            def run(c: Any = classifier) -> Any:
                return asyncio.run(c.abatch(texts))

            result = _timed(f"QwenClassifier.abatch, {name}", len(texts), run, pids)
            if name not in best or result.seconds < best[name].seconds:
                best[name] = result
    base = best["zero-shot, 4 labels"].seconds
    ratios = {f"{name} / zero-shot (time)": round(r.seconds / base, 3) for name, r in best.items()}
    return list(best.values()), ratios


def _load_test(name: str, texts: list[str], clients: int, send: Callable[[Any, str], Any]) -> PathResult:
    """``clients`` concurrent clients, each sending one text at a time until ``texts`` are
    done, through one aiohttp session; every request's latency is kept."""
    import aiohttp

    async def main() -> list[float]:
        latencies: list[float] = []
        queue = list(reversed(texts))
        connector = aiohttp.TCPConnector(limit=clients)
        async with aiohttp.ClientSession(connector=connector) as session:

            async def client() -> None:
                while queue:
                    text = queue.pop()
                    t0 = time.perf_counter()
                    await send(session, text)
                    latencies.append((time.perf_counter() - t0) * 1000)

            await asyncio.gather(*(client() for _ in range(clients)))
        return latencies

    before = server_cpu_seconds()
    c0, t0 = time.process_time(), time.perf_counter()
    latencies = asyncio.run(main())
    t1 = time.perf_counter()
    return PathResult(
        name,
        "concurrent clients",
        len(texts),
        t1 - t0,
        time.process_time() - c0,
        latencies,
        (t0, t1),
        server_cores=_cores(before, server_cpu_seconds(), t1 - t0),
    )


def run_service(
    base_url: str, model: str, tokenizer: str | None, texts: list[str], clients: int = 256
) -> tuple[list[PathResult], dict[str, float]]:
    """``clients`` concurrent HTTP clients each sending one text: to ``qwen-fast api``
    (micro-batched, in a process of its own) and, the published design, straight to vLLM one
    request per text with the classifier's exact request; beside ``QwenClassifier.abatch`` on
    the same texts."""
    import subprocess
    import sys
    import tempfile

    import httpx

    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.serving import free_port

    classifier = QwenClassifier(labels=LABELS, base_url=base_url, model=model, tokenizer_path=tokenizer)
    plan = classifier.prepare()
    completions = base_url.rstrip("/") + "/completions"

    async def to_vllm(session: Any, text: str) -> Any:
        body = vllm_api.completions_body(plan, model, 0, [plan.render(text)])
        async with session.post(completions, json=body) as response:
            return (await response.json())["choices"][0]

    results = [_load_test(f"{clients} clients -> vLLM, one request per text", texts, clients, to_vllm)]
    port = free_port()
    with tempfile.TemporaryDirectory() as saved:
        classifier.save(saved)
        command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", saved, "--port", str(port)]
        service = subprocess.Popen(command)
        try:
            deadline = time.monotonic() + 60
            while True:
                try:
                    if httpx.get(f"http://127.0.0.1:{port}/health", timeout=2).status_code == 200:
                        break
                except httpx.HTTPError:
                    pass
                if time.monotonic() > deadline or service.poll() is not None:
                    raise RuntimeError("qwen-fast api did not start")
                time.sleep(0.2)
            classify_url = f"http://127.0.0.1:{port}/v1/classify"

            async def to_service(session: Any, text: str) -> Any:
                async with session.post(classify_url, json={"input": text}) as response:
                    return (await response.json())["result"]

            name = f"{clients} clients -> qwen-fast api (micro-batched)"
            results.append(_load_test(name, texts, clients, to_service))
        finally:
            service.terminate()
            service.wait(10)
    results.append(
        _timed("QwenClassifier.abatch, same texts", len(texts), lambda: asyncio.run(classifier.abatch(texts)))
    )
    checks = {"qwen-fast api / vLLM one request per text (req/s)": round(results[1].rps / results[0].rps, 2)}
    return results, checks


def compare_quantized(
    base_url: str, quantized_url: str, model: str, tokenizer: str | None, texts: list[str], invoke_items: int
) -> tuple[list[PathResult], dict[str, Any]]:
    """The same classifier against a bf16 and a quantised server: throughput, one-at-a-time
    latency, and what quantisation does to the answers (argmax agreement, mean absolute
    difference of the label probabilities)."""
    from langchain_qwen_fast import QwenClassifier

    results: list[PathResult] = []
    answers = {}
    for name, url in (("bf16", base_url), ("fp8", quantized_url)):
        classifier = QwenClassifier(labels=LABELS, base_url=url, model=model, tokenizer_path=tokenizer)
        classifier.invoke("warm-up")
        answers[name] = classifier.batch(texts)

        def run(c: Any = classifier) -> Any:
            return asyncio.run(c.abatch(texts))

        results.append(_timed(f"QwenClassifier.abatch, token ids, {name}", len(texts), run))
        results += run_one_at_a_time({f"QwenClassifier.invoke, token ids, {name}": classifier.invoke}, invoke_items)
    agree = sum(a.label == b.label for a, b in zip(answers["bf16"], answers["fp8"], strict=True)) / len(texts)
    diffs = [
        abs(a.scores[k] - b.scores[k])
        for a, b in zip(answers["bf16"], answers["fp8"], strict=True)
        if a.scores and b.scores
        for k in a.scores
    ]
    checks = {
        "fp8 vs bf16 argmax agreement": round(agree, 4),
        "fp8 vs bf16 mean |probability difference|": round(sum(diffs) / len(diffs), 5),
    }
    return results, checks


def transformers_baseline(model_dir: str, texts: list[str]) -> list[PathResult]:
    """Hugging Face transformers on the same prompts, as the published figures were taken:
    ``generate`` (one new token, greedy) at batch 1 and 16, and a linear head's forward pass
    (``AutoModelForSequenceClassification``, 4 classes, a new random head) at batch 1 and 16."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX, USER_OPEN, LabelSet

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    head = LabelSet.build(LABELS).render_head()
    prompts = [head + USER_OPEN + t + PROMPT_SUFFIX for t in texts]
    results = []

    def timed(name: str, n: int, batch: int, step: Callable[[list[str]], Any]) -> PathResult:
        step(prompts[:batch])  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()
        latencies = []
        c0, t0 = time.process_time(), time.perf_counter()
        for start in range(0, n, batch):
            s0 = time.perf_counter()
            step(prompts[start : start + batch])
            if device == "cuda":
                torch.cuda.synchronize()
            latencies.append((time.perf_counter() - s0) * 1000)
        t1 = time.perf_counter()
        return PathResult(name, "batch", n, t1 - t0, time.process_time() - c0, latencies if batch == 1 else [])

    models: dict[str, Any] = {"causal": AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)}
    models["causal"] = models["causal"].to(device).eval()

    def generate(batch: list[str]) -> Any:
        encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.inference_mode():
            return models["causal"].generate(
                **encoded, max_new_tokens=1, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )

    for batch, n in ((1, min(len(texts), 256)), (16, len(texts))):
        results.append(timed(f"transformers generate, batch {batch}", n, batch, generate))
    del models["causal"]
    models["head"] = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=4, dtype=dtype)
    models["head"] = models["head"].to(device).eval()
    models["head"].config.pad_token_id = tokenizer.pad_token_id

    def forward(batch: list[str]) -> Any:
        encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.inference_mode():
            return models["head"](**encoded).logits.softmax(-1)

    for batch, n in ((1, min(len(texts), 256)), (16, len(texts))):
        results.append(timed(f"transformers linear head, batch {batch}", n, batch, forward))
    return results


def run_replicas(
    urls: list[str], model: str, tokenizer: str | None, texts: list[str], invoke_items: int
) -> list[PathResult]:
    """QwenClassifier spread over several servers (replicas sharing the GPU)."""
    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=LABELS, base_url=urls, model=model, tokenizer_path=tokenizer)
    for _ in urls:
        classifier.invoke("warm-up")
    suffix = f"{IDS if tokenizer else ''}, {len(urls)} replicas"
    results = [_timed(name, n, fn) for name, n, fn in _classifier_runs(suffix, classifier, texts, None)]
    results += run_one_at_a_time({f"QwenClassifier.invoke{suffix}": classifier.invoke}, invoke_items)
    return results


def render_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    head = (
        f"| {'path':<46} | {'req/s':>8} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} "
        f"| {'CPU ms/req':>10} | {'× fastest':>9} | {'cores: client/API/engine':>24} |"
    )
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:

        def f(v: float | None) -> str:
            return "" if v is None else f"{v:.2f}"

        busy = r.get("cores_busy")
        cores = f"{busy['client']:.2f}/{busy['api_server']:.2f}/{busy['engine_core']:.2f}" if busy else ""
        lines.append(
            f"| {r['path']:<46} | {r['requests_per_s']:>8.1f} | {f(r['p50_ms']):>7} | {f(r['p95_ms']):>7} | "
            f"{f(r['p99_ms']):>7} | {r['client_cpu_ms_per_request']:>10.3f} | {r['ratio_to_fastest']:>9.3f} "
            f"| {cores:>24} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """A bar chart of each path's requests/s, written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["path"] for r in rows][::-1]
    values = [r["requests_per_s"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    ax.barh(names, values, color=["#2a7" if n.startswith("QwenClassifier") else "#888" for n in names])
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
    ax.set_xlabel("classifications per second (higher is better)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def sweep(
    base_url: str | list[str],
    model: str,
    tokenizer: str | None,
    items: int,
    sizes: list[int],
    concurrencies: list[int],
) -> list[dict[str, Any]]:
    """QwenClassifier.abatch throughput for each (prompts per request, requests in flight)."""
    from langchain_qwen_fast import QwenClassifier

    texts = news_items(items)
    rows = []
    for size in sizes:
        for concurrency in concurrencies:
            classifier = QwenClassifier(
                labels=LABELS,
                base_url=base_url,
                model=model,
                batch_size=size,
                max_concurrency=concurrency,
                tokenizer_path=tokenizer,
            )
            classifier.invoke("warm-up")
            t0 = time.perf_counter()
            asyncio.run(classifier.abatch(texts))
            rps = items / (time.perf_counter() - t0)
            rows.append({"batch_size": size, "max_concurrency": concurrency, "requests_per_s": round(rps, 1)})
            print(f"batch_size {size:>4}  in flight {concurrency:>3}: {rps:8.1f}/s", flush=True)
    return rows


def offline_ceiling(model_dir: str, items: int) -> list[PathResult]:
    """vLLM's offline engine on the same prompts (QwenClassifier's rendering), one output token:
    the ceiling no server path can pass. Token-id prompts and text prompts."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX, USER_OPEN, LabelSet

    head = LabelSet.build(LABELS).render_head()
    prompts = [head + USER_OPEN + t + PROMPT_SUFFIX for t in news_items(items)]
    llm = LLM(model=model_dir, max_model_len=512, gpu_memory_utilization=0.3, enable_prefix_caching=True)
    tokenizer = llm.get_tokenizer()
    ids = [TokensPrompt(prompt_token_ids=tokenizer.encode(p, add_special_tokens=False)) for p in prompts]
    params = SamplingParams(max_tokens=1, temperature=0)
    llm.generate(ids[:256], params, use_tqdm=False)  # warm-up
    results = []
    for name, batch in (("vLLM offline LLM.generate, token ids", ids), ("vLLM offline LLM.generate, text", prompts)):
        c0, t0 = time.process_time(), time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        t1 = time.perf_counter()
        results.append(PathResult(name, "batch", items, t1 - t0, time.process_time() - c0, window=(t0, t1)))
    return results


@contextlib.contextmanager
def _server(
    args: argparse.Namespace,
    name: str = "server",
    extra: list[str] | None = None,
    profile: str | None = None,
    quantization: str | None = None,
) -> Iterator[str]:
    if args.base_url:
        yield args.base_url
        return
    from langchain_qwen_fast.serving.launcher import VLLMServer

    Path(args.out).mkdir(parents=True, exist_ok=True)
    with VLLMServer(
        args.start_server,
        profile=profile or args.profile,  # type: ignore[arg-type]
        served_model_name=args.model,
        log_path=Path(args.out) / f"{name}.log",
        extra_args=[*args.server_arg, *(extra or [])],
        quantization=quantization,
    ) as server:
        print(f"{name} ready in {server.startup_seconds:.0f} s at {server.base_url}", flush=True)
        assert server.pid is not None
        _SERVER_PIDS.append(server.pid)
        try:
            yield server.base_url
        finally:
            _SERVER_PIDS.remove(server.pid)


# vLLM's own request histograms (present unless --disable-log-stats): where a request's time goes.
_STAGES = {
    "server_e2e": "vllm:e2e_request_latency_seconds",
    "queue": "vllm:request_queue_time_seconds",
    "prefill": "vllm:request_prefill_time_seconds",
    "ttft": "vllm:time_to_first_token_seconds",
}


def histogram_totals(root_url: str) -> dict[str, tuple[float, float]]:
    """(sum, count) of each stage's histogram from ``/metrics``; empty when stats are off."""
    import httpx

    text = httpx.get(f"{root_url}/metrics", timeout=10).text
    totals: dict[str, tuple[float, float]] = {}
    for stage, metric in _STAGES.items():
        values: dict[str, float] = {}
        for line in text.splitlines():
            for part in ("_sum", "_count"):
                if line.startswith(metric + part):
                    values[part] = values.get(part, 0.0) + float(line.rsplit(" ", 1)[1])
        if len(values) == 2:
            totals[stage] = (values["_sum"], values["_count"])
    return totals


def stage_means(before: dict[str, tuple[float, float]], after: dict[str, tuple[float, float]]) -> dict[str, float]:
    """Mean ms of each stage between two :func:`histogram_totals` readings."""
    return {
        stage: round((after[stage][0] - before[stage][0]) / (after[stage][1] - before[stage][1]) * 1000, 3)
        for stage in after
        if stage in before and after[stage][1] > before[stage][1]
    }


def measure_flags(url: str, args: argparse.Namespace, sampler: GpuSampler | None) -> dict[str, Any]:
    """A short measurement of one server configuration: one-at-a-time latency (raw HTTP and
    QwenClassifier with token ids, with vLLM's own per-stage means when it keeps stats) and
    QwenClassifier.abatch throughput with text and token-id prompts."""
    build = build_head_paths if args.mode == "head" else build_paths
    paths, objects = build(url, args.model, args.tokenizer)
    keep = [name for name in paths if name.startswith(("raw HTTP", "QwenClassifier.invoke"))]
    root = url.rstrip("/").removesuffix("/v1")
    before = histogram_totals(root)
    results = run_one_at_a_time({k: paths[k] for k in keep}, args.invoke_items)
    after = histogram_totals(root)
    runs = _all_classifier_runs(objects, news_items(args.items), None)
    results += [_timed(name, n, fn) for name, n, fn in runs if ".abatch" in name]
    row: dict[str, Any] = {}
    for r in results:
        gpu = sampler.window(*r.window) if sampler else {}
        summary = r.summary(r.rps)
        row[r.name] = {k: summary[k] for k in ("requests_per_s", "p50_ms", "cores_busy") if k in summary} | gpu
    stages = stage_means(before, after)
    if stages:
        row["server_stage_mean_ms (one at a time)"] = stages
    return row


def add_parser(sub: Any) -> None:
    """Add the ``bench`` subcommand to the ``qwen-fast`` parser."""
    parser = sub.add_parser(
        "bench",
        help="latency/throughput comparison against ChatOpenAI, LCEL and LLMChain",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="a running vLLM server (…/v1)")
    where.add_argument("--start-server", metavar="MODEL", help="start a local server for MODEL (dir or hub id)")
    parser.add_argument("--profile", default="auto", choices=["auto", "cpu", "gpu", "default"])
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra vLLM flag for --start-server (repeatable)"
    )
    parser.add_argument("--model", default="qwen3", help="served model name")
    parser.add_argument(
        "--tokenizer",
        help="the model's tokenizer (dir or tokenizer.json): adds the token-id prompt paths "
        "(default: MODEL of --start-server when it has a tokenizer.json; 'none' turns them off)",
    )
    parser.add_argument("--items", type=int, default=512, help="items for the batch paths")
    parser.add_argument("--chat-items", type=int, help="items for ChatOpenAI.batch/.abatch (default: --items)")
    parser.add_argument("--invoke-items", type=int, default=200, help="items for each one-at-a-time path")
    parser.add_argument("--concurrency", type=int, help="max_concurrency for abatch/batch (default: each's own)")
    parser.add_argument(
        "--replicas",
        type=int,
        default=1,
        help="with --start-server: then start more servers on the same GPU "
        "and measure QwenClassifier spread over all of them",
    )
    parser.add_argument(
        "--compare-flags",
        metavar="JSON",
        help='instead of the comparison: {"name": ["--vllm-flag", ...], ...}; starts a server per entry '
        "(profile + flags) and measures latency, throughput, GPU memory and vLLM's stage times",
    )
    parser.add_argument(
        "--mode",
        choices=["generate", "head"],
        default="generate",
        help="with --compare-flags: the served model is a chat model (generate) or a classification head",
    )
    parser.add_argument("--out", default="out/benchmark", help="folder for results.json and chart.png")
    parser.add_argument("--label", default="", help="free text naming the machine/model, kept in the JSON")
    parser.add_argument("--sweep", action="store_true", help="also sweep batch_size × max_concurrency")
    parser.add_argument(
        "--service", action="store_true", help="also run 256 concurrent HTTP clients against qwen-fast api and vLLM"
    )
    parser.add_argument(
        "--compare-quantization",
        metavar="METHOD",
        help="with --start-server: also start a server with --quantization METHOD (e.g. fp8) and compare",
    )
    parser.add_argument(
        "--transformers-baseline",
        action="store_true",
        help="with --start-server: also time Hugging Face transformers (generate, linear head) on the same prompts",
    )
    parser.add_argument(
        "--capabilities",
        action="store_true",
        help="also time multi-label, few-shot examples, an example selector and 40 labels against zero-shot",
    )
    parser.add_argument("--gpu-sample", action="store_true", help="sample GPU utilisation and memory per path")
    parser.add_argument(
        "--offline-ceiling", action="store_true", help="also run vLLM's offline engine (needs --start-server)"
    )
    parser.set_defaults(run=run)


def run(args: argparse.Namespace) -> int:
    """Run ``qwen-fast bench``."""
    measure(args)
    return 0


def measure(args: argparse.Namespace) -> dict[str, Any]:
    """The comparison (or, with ``--compare-flags``, the flag comparison); returns the report."""
    if args.tokenizer is None and args.start_server and (Path(args.start_server) / "tokenizer.json").is_file():
        args.tokenizer = args.start_server
    if args.tokenizer == "none":
        args.tokenizer = None
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    sampler = GpuSampler() if args.gpu_sample else None
    if args.compare_flags:
        return _compare_flags(args, sampler, out)

    swept: list[dict[str, Any]] = []
    with contextlib.ExitStack() as servers:
        url = servers.enter_context(_server(args))
        one_paths, objects = build_paths(url, args.model, args.tokenizer)
        prompt_tokens = _prompt_tokens(objects["classifier"], url.rstrip("/").removesuffix("/v1"), news_items(64))
        results = run_one_at_a_time(one_paths, args.invoke_items)
        results += run_batches(
            objects, news_items(args.items), news_items(args.chat_items or args.items), args.concurrency
        )
        capability_ratios: dict[str, float] = {}
        if args.capabilities:
            capability_rows, capability_ratios = run_capabilities(
                url, args.model, args.tokenizer, news_items(args.items)
            )
            results += capability_rows
        if args.service:
            service_rows, service_checks = run_service(url, args.model, args.tokenizer, news_items(args.items))
            results += service_rows
            capability_ratios.update(service_checks)
        if args.compare_quantization and args.start_server:
            quantized = servers.enter_context(_server(args, "server-quantized", quantization=args.compare_quantization))
            rows_q, checks_q = compare_quantized(
                url, quantized, args.model, args.tokenizer, news_items(args.items), args.invoke_items
            )
            results += rows_q
            capability_ratios.update(checks_q)
        urls = [url]
        if args.replicas > 1 and args.start_server:
            urls += [servers.enter_context(_server(args, f"server-{k}")) for k in range(1, args.replicas)]
            results += run_replicas(urls, args.model, args.tokenizer, news_items(args.items), args.invoke_items)
        if args.sweep:
            in_flight = [n * len(urls) for n in (4, 8, 16)]
            swept = sweep(
                urls if len(urls) > 1 else url, args.model, args.tokenizer, args.items, [64, 128, 256], in_flight
            )
    if args.offline_ceiling:
        results += offline_ceiling(args.start_server, args.items)
    if args.transformers_baseline and args.start_server:
        results += transformers_baseline(args.start_server, news_items(min(args.items, 2048)))
    if sampler is not None:
        sampler.stop()
        for r in results:
            r.gpu = sampler.window(*r.window)

    fastest = max(r.rps for r in results)
    rows = [r.summary(fastest) for r in results]
    by_name = {r.name: r for r in results}
    raw, ours = by_name["raw HTTP (httpx), same request"], by_name["QwenClassifier.invoke"]
    chat_batch = by_name["ChatOpenAI.batch (default config)"].rps
    chat_invoke = by_name["ChatOpenAI.invoke"]
    checks = {
        "QwenClassifier.batch / ChatOpenAI.batch": round(by_name["QwenClassifier.batch"].rps / chat_batch, 2),
        "best QwenClassifier batch path / ChatOpenAI.batch": round(
            max(r.rps for r in results if r.name.startswith("QwenClassifier.") and "batch" in r.name) / chat_batch, 2
        ),
        "QwenClassifier.invoke p50 - raw HTTP p50 (ms)": _p50_gap(ours, raw),
        "LCEL p50 - ChatOpenAI.invoke p50 (ms)": _p50_gap(by_name["LCEL prompt | ChatOpenAI"], chat_invoke),
        "LLMChain p50 - ChatOpenAI.invoke p50 (ms)": _p50_gap(by_name["LLMChain(ChatOpenAI)"], chat_invoke),
        **capability_ratios,
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "label": args.label,
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
        "server_args": args.server_arg,
        "replicas": len(urls),
        "items": args.items,
        "chat_items": args.chat_items or args.items,
        "invoke_items": args.invoke_items,
        "prompt_tokens": prompt_tokens,
        "rows": rows,
        "checks": checks,
        "sweep": swept,
        "latencies_ms": {r.name: r.latencies_ms for r in results if r.latencies_ms},
    }
    (out / "results.json").write_text(json.dumps(report, indent=1))
    plot(rows, out / "chart.png", f"{args.label or url}  ({report['date']})")
    print()
    print(render_table(rows))
    print()
    for key, value in checks.items():
        print(f"{key}: {value}")
    print(f"\nwrote {out / 'results.json'} and {out / 'chart.png'}")
    return report


def _p50_gap(path: PathResult, reference: PathResult) -> float | None:
    """``path``'s p50 minus ``reference``'s, in ms."""
    ours, theirs = path.percentile(50), reference.percentile(50)
    return None if ours is None or theirs is None else round(ours - theirs, 3)


def _prompt_tokens(classifier: Any, root_url: str, texts: list[str]) -> dict[str, float]:
    """Token counts of the rendered prompts, from the server's own tokeniser."""
    import httpx

    plan = classifier.prepare()
    counts = []
    for text in texts:
        method, path, body = vllm_api.tokenize_call(classifier.model, plan.render(text))
        reply = httpx.request(method, root_url + path, json=body, timeout=30).json()
        counts.append(len(vllm_api.parse_tokenize(reply)))
    return {"mean": round(sum(counts) / len(counts), 1), "min": min(counts), "max": max(counts)}


def _compare_flags(args: argparse.Namespace, sampler: GpuSampler | None, out: Path) -> dict[str, Any]:
    """Each entry of the JSON file: ``{"profile": "gpu", "drop": [...], "flags": [...]}``: the
    profile's flags without those in ``drop`` (and their values), then ``flags``."""
    from langchain_qwen_fast.serving.launcher import PROFILES, drop_flags

    configs: dict[str, dict[str, Any]] = json.loads(Path(args.compare_flags).read_text())
    runs: dict[str, Any] = {}
    report: dict[str, Any] = {"date": time.strftime("%Y-%m-%d %H:%M:%S"), "label": args.label, "runs": runs}
    for n, (name, config) in enumerate(configs.items()):
        profile, flags = config.get("profile", args.profile), list(config.get("flags", []))
        if config.get("drop"):
            flags = drop_flags(PROFILES[profile].args, config["drop"]) + flags
            profile = "default"
        t0 = time.perf_counter()
        try:
            with _server(args, f"flags-{n}", flags, profile) as url:
                started = time.perf_counter() - t0
                runs[name] = {"profile": profile, "flags": flags, "startup_s": round(started, 1)}
                runs[name].update(measure_flags(url, args, sampler))
        except Exception as exc:  # one configuration that does not start must not lose the others
            runs[name] = {"profile": profile, "flags": flags, "error": f"{type(exc).__name__}: {str(exc)[-2000:]}"}
        (out / "flags.json").write_text(json.dumps(report, indent=1))
        print(name, json.dumps(runs[name], indent=1), flush=True)
    if args.offline_ceiling:
        offline = offline_ceiling(args.start_server, args.items)
        report["offline"] = {
            r.name: {"requests_per_s": round(r.rps, 1), **(sampler.window(*r.window) if sampler else {})}
            for r in offline
        }
        (out / "flags.json").write_text(json.dumps(report, indent=1))
        print(json.dumps(report["offline"], indent=1), flush=True)
    if sampler is not None:
        sampler.stop()
    return report


__all__ = [
    "HostCpuSampler",
    "PathResult",
    "add_parser",
    "busy_and_clock",
    "gpu_window",
    "histogram_totals",
    "measure",
    "run",
    "stage_means",
]
