"""Latency and throughput comparison, side by side against one server in one run.

    python -m langchain_qwen_fast.benchmark --base-url http://127.0.0.1:8000/v1
    python -m langchain_qwen_fast.benchmark --start-server .models/qwen3-tiny

Paths, all on the same texts: raw HTTP (httpx) with QwenClassifier's exact request, the
``openai`` SDK, ``ChatOpenAI.invoke/.batch/.abatch``, LCEL ``prompt | ChatOpenAI``,
``LLMChain`` (langchain-classic) and ``QwenClassifier.invoke/.batch/.abatch``. One-at-a-time
paths are interleaved item by item, so drift on a noisy machine hits all of them alike.
Reports requests/s, p50/p95/p99 latency, client CPU ms per request and the ratio to the
fastest path; writes JSON and a PNG chart. Needs the ``test`` extra (tqdm, matplotlib,
langchain-classic).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import platform
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_qwen_fast._prompting import DEFAULT_INSTRUCTIONS

LABELS = ["World", "Sports", "Business", "Sci/Tech"]
# The chat paths get the same instructions and label list as QwenClassifier's prompt.
SYSTEM = f"{DEFAULT_INSTRUCTIONS}\nLabels: {', '.join(LABELS)}"
_SUBJECTS = ["Stocks", "The striker", "Parliament", "A new chip", "Oil prices", "The coach", "Rebels", "NASA"]
_VERBS = ["rally after", "fall before", "surprise analysts with", "shrug off", "react to", "win"]
_OBJECTS = ["the rate decision", "a late goal", "the ceasefire talks", "quarterly results", "a launch"]


def news_items(n: int) -> list[str]:
    """``n`` distinct short news-like texts (no two alike, so the prefix cache gets no free hits)."""
    base = [f"{s} {v} {o}" for s in _SUBJECTS for v in _VERBS for o in _OBJECTS]
    return [f"{base[i % len(base)]}, report {i}" for i in range(n)]


class GpuSampler:
    """Samples GPU utilisation and memory with ``nvidia-smi`` every 200 ms in the background."""

    def __init__(self) -> None:
        import subprocess
        import threading

        self.samples: list[tuple[float, float, float]] = []  # (time, util %, memory MiB)
        query = ["nvidia-smi", "--query-gpu=utilization.gpu,memory.used", "--format=csv,noheader,nounits"]
        self._proc = subprocess.Popen([*query, "-lms", "200"], stdout=subprocess.PIPE, text=True)
        self._thread = threading.Thread(target=self._read, daemon=True)
        self._thread.start()

    def _read(self) -> None:
        assert self._proc.stdout is not None
        for line in self._proc.stdout:
            with contextlib.suppress(ValueError):
                util, mem = (float(x) for x in line.split(",")[:2])
                self.samples.append((time.perf_counter(), util, mem))

    def window(self, start: float, end: float) -> dict[str, float | None]:
        inside = [(u, m) for t, u, m in self.samples if start <= t <= end]
        if not inside:
            return {"gpu_util_mean_pct": None, "gpu_mem_max_mib": None}
        return {
            "gpu_util_mean_pct": round(sum(u for u, _ in inside) / len(inside), 1),
            "gpu_mem_max_mib": max(m for _, m in inside),
        }

    def stop(self) -> None:
        self._proc.terminate()


@dataclass
class PathResult:
    name: str
    kind: str  # "one-at-a-time" or "batch"
    items: int
    seconds: float
    cpu_seconds: float
    latencies_ms: list[float] = field(default_factory=list, repr=False)
    window: tuple[float, float] = (0.0, 0.0)
    gpu: dict[str, float | None] = field(default_factory=dict)

    @property
    def rps(self) -> float:
        return self.items / self.seconds

    def percentile(self, q: float) -> float | None:
        if not self.latencies_ms:
            return None
        ordered = sorted(self.latencies_ms)
        return ordered[min(len(ordered) - 1, round(q / 100 * (len(ordered) - 1)))]

    def summary(self, fastest_rps: float) -> dict[str, Any]:
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
        }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 2)


def _chat_messages(text: str) -> list[dict[str, str]]:
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": text}]


def build_paths(base_url: str, model: str) -> tuple[dict[str, Callable[[str], Any]], dict[str, Any]]:
    """The one-at-a-time callables and the objects the batch paths use."""
    import httpx
    from langchain_classic.chains import LLMChain
    from langchain_core.prompts import ChatPromptTemplate
    from langchain_openai import ChatOpenAI
    from openai import OpenAI

    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=LABELS, base_url=base_url, model=model)
    classifier.invoke("warm-up")
    plan = classifier._plan
    assert plan is not None
    http = httpx.Client(timeout=30)
    completions_url = base_url.rstrip("/") + "/completions"

    def raw_http(text: str) -> Any:
        # QwenClassifier's exact request, with nothing else around it.
        body = plan.request_body(model, [plan.render(text)])
        return http.post(completions_url, json=body).json()["choices"][0]

    thinking_off = {"chat_template_kwargs": {"enable_thinking": False}}
    sdk = OpenAI(base_url=base_url, api_key="EMPTY")

    def openai_sdk(text: str) -> Any:
        return sdk.chat.completions.create(
            model=model, messages=_chat_messages(text), max_tokens=1, temperature=0, extra_body=thinking_off
        )

    chat = ChatOpenAI(
        base_url=base_url, api_key="EMPTY", model=model, temperature=0, max_tokens=1, extra_body=thinking_off
    )
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
    return one_at_a_time, {"chat": chat, "classifier": classifier}


def run_one_at_a_time(paths: dict[str, Callable[[str], Any]], texts: list[str]) -> list[PathResult]:
    from tqdm import tqdm

    latencies: dict[str, list[float]] = {name: [] for name in paths}
    cpu: dict[str, float] = dict.fromkeys(paths, 0.0)
    names = list(paths)
    for fn in paths.values():  # warm every client's connection
        fn("warm-up")
    start = time.perf_counter()
    for i, text in enumerate(tqdm(texts, desc="one at a time", unit="item")):
        rotation = names[i % len(names) :] + names[: i % len(names)]
        for name in rotation:
            c0, t0 = time.process_time(), time.perf_counter()
            paths[name](text)
            latencies[name].append((time.perf_counter() - t0) * 1000)
            cpu[name] += time.process_time() - c0
    window = (start, time.perf_counter())  # interleaved: all share one window
    return [
        PathResult(name, "one-at-a-time", len(texts), sum(latencies[name]) / 1000, cpu[name], latencies[name], window)
        for name in names
    ]


def _timed(name: str, items: int, fn: Callable[[], Any]) -> PathResult:
    c0, t0 = time.process_time(), time.perf_counter()
    fn()
    t1 = time.perf_counter()
    return PathResult(name, "batch", items, t1 - t0, time.process_time() - c0, window=(t0, t1))


def run_batches(objects: dict[str, Any], texts: list[str], concurrency: int | None) -> list[PathResult]:
    from tqdm import tqdm

    chat, classifier = objects["chat"], objects["classifier"]
    messages = [_chat_messages(t) for t in texts]
    config = {"max_concurrency": concurrency} if concurrency else None
    runs: list[tuple[str, Callable[[], Any]]] = [
        ("ChatOpenAI.batch (default config)", lambda: chat.batch(messages)),
        ("ChatOpenAI.abatch", lambda: asyncio.run(chat.abatch(messages, config=config))),
        ("QwenClassifier.batch", lambda: classifier.batch(texts, config=config)),
        ("QwenClassifier.abatch", lambda: asyncio.run(classifier.abatch(texts, config=config))),
    ]
    results = []
    for name, fn in tqdm(runs, desc="batch paths", unit="path"):
        results.append(_timed(name, len(texts), fn))
    return results


def render_table(rows: list[dict[str, Any]]) -> str:
    head = (
        f"| {'path':<36} | {'req/s':>8} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} "
        f"| {'CPU ms/req':>10} | {'× fastest':>9} |"
    )
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:

        def f(v: float | None) -> str:
            return "" if v is None else f"{v:.2f}"

        lines.append(
            f"| {r['path']:<36} | {r['requests_per_s']:>8.1f} | {f(r['p50_ms']):>7} | {f(r['p95_ms']):>7} | "
            f"{f(r['p99_ms']):>7} | {r['client_cpu_ms_per_request']:>10.3f} | {r['ratio_to_fastest']:>9.3f} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
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


def sweep(base_url: str, model: str, items: int, sizes: list[int], concurrencies: list[int]) -> list[dict[str, Any]]:
    """QwenClassifier.abatch throughput for each (prompts per request, requests in flight)."""
    from langchain_qwen_fast import QwenClassifier

    texts = news_items(items)
    rows = []
    for size in sizes:
        for concurrency in concurrencies:
            classifier = QwenClassifier(
                labels=LABELS, base_url=base_url, model=model, batch_size=size, max_concurrency=concurrency
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

    from langchain_qwen_fast._prompting import PROMPT_SUFFIX, LabelSet

    prefix = LabelSet.build(LABELS).render_prefix("label_tokens")
    prompts = [prefix + t + PROMPT_SUFFIX for t in news_items(items)]
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
def _server(args: argparse.Namespace) -> Iterator[str]:
    if args.base_url:
        yield args.base_url
        return
    from server.launcher import VLLMServer

    Path(args.out).mkdir(parents=True, exist_ok=True)
    log = Path(args.out) / "server.log"
    with VLLMServer(
        args.start_server,
        profile=args.profile,
        served_model_name=args.model,
        log_path=log,
        extra_args=args.server_arg,
    ) as server:
        print(f"server ready in {server.startup_seconds:.0f} s at {server.base_url}")
        yield server.base_url


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    where = parser.add_mutually_exclusive_group(required=True)
    where.add_argument("--base-url", help="a running vLLM server (…/v1)")
    where.add_argument("--start-server", metavar="MODEL", help="start a local server for MODEL (dir or hub id)")
    parser.add_argument("--profile", default="auto", choices=["auto", "cpu", "gpu"])
    parser.add_argument(
        "--server-arg", action="append", default=[], help="extra vLLM flag for --start-server (repeatable)"
    )
    parser.add_argument("--model", default="qwen3", help="served model name")
    parser.add_argument("--items", type=int, default=512, help="items for the batch paths")
    parser.add_argument("--invoke-items", type=int, default=200, help="items for each one-at-a-time path")
    parser.add_argument("--concurrency", type=int, help="max_concurrency for abatch/batch (default: each's own)")
    parser.add_argument("--out", default="out/benchmark", help="folder for results.json and chart.png")
    parser.add_argument("--label", default="", help="free text naming the machine/model, kept in the JSON")
    parser.add_argument("--sweep", action="store_true", help="also sweep batch_size × max_concurrency")
    parser.add_argument("--gpu-sample", action="store_true", help="sample GPU utilisation and memory per path")
    parser.add_argument(
        "--offline-ceiling", action="store_true", help="also run vLLM's offline engine (needs --start-server)"
    )
    args = parser.parse_args(argv)
    sampler = GpuSampler() if args.gpu_sample else None
    swept: list[dict[str, Any]] = []

    with _server(args) as url:
        one_paths, objects = build_paths(url, args.model)
        results = run_one_at_a_time(one_paths, news_items(args.invoke_items))
        results += run_batches(objects, news_items(args.items), args.concurrency)
        if args.sweep:
            swept = sweep(url, args.model, args.items, [16, 32, 64, 128, 256], [2, 4, 8, 16, 32])
    if args.offline_ceiling:
        results += offline_ceiling(args.start_server, args.items)
    if sampler is not None:
        sampler.stop()
        for r in results:
            r.gpu = sampler.window(*r.window)

    fastest = max(r.rps for r in results)
    rows = [r.summary(fastest) for r in results]
    by_name = {r.name: r for r in results}
    raw, ours = by_name["raw HTTP (httpx), same request"], by_name["QwenClassifier.invoke"]
    checks = {
        "QwenClassifier.batch / ChatOpenAI.batch": round(
            by_name["QwenClassifier.batch"].rps / by_name["ChatOpenAI.batch (default config)"].rps, 2
        ),
        "QwenClassifier.invoke p50 - raw HTTP p50 (ms)": round(ours.percentile(50) - raw.percentile(50), 3),
        "LCEL p50 - ChatOpenAI.invoke p50 (ms)": round(
            by_name["LCEL prompt | ChatOpenAI"].percentile(50) - by_name["ChatOpenAI.invoke"].percentile(50), 3
        ),
        "LLMChain p50 - ChatOpenAI.invoke p50 (ms)": round(
            by_name["LLMChain(ChatOpenAI)"].percentile(50) - by_name["ChatOpenAI.invoke"].percentile(50), 3
        ),
    }
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "label": args.label,
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
        "items": args.items,
        "invoke_items": args.invoke_items,
        "rows": rows,
        "checks": checks,
        "sweep": swept,
        "latencies_ms": {r.name: r.latencies_ms for r in results if r.latencies_ms},
    }
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    (out / "results.json").write_text(json.dumps(report, indent=1))
    plot(rows, out / "chart.png", f"{args.label or url}  ({report['date']})")
    print()
    print(render_table(rows))
    print()
    for key, value in checks.items():
        print(f"{key}: {value}")
    print(f"\nwrote {out / 'results.json'} and {out / 'chart.png'}")
    return report


if __name__ == "__main__":
    main()


__all__ = ["PathResult", "main", "news_items"]
