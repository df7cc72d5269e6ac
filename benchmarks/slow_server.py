"""Slow servers side by side: what each tree of the package answers, and how fast, when the
server is slower than its defaults assume, and against faults of a proxy in front of it.

    python -m benchmarks.slow_server --base-url http://127.0.0.1:8000/v1 --model smollm2 \\
        --tree before=/tmp/before --tree after=. --cases decisions classifier job \\
        --fixed before:decisions:16x2 --fixed before:job:200x1

``--tree NAME=PATH`` names a checkout of the package (``git worktree add /tmp/before REF``);
each run is a fresh client process of its own with ``PYTHONPATH`` the tree, so that both are
measured on the same server in one run. The cases (:data:`CASES`), each on prompts new to the
server (its prefix cache would answer them faster):

* ``decisions``: ``QwenDecisionModel.abatch`` of ``--states`` states x 3 questions;
* ``classifier``: ``QwenClassifier.abatch`` of ``--texts`` texts;
* ``job``: ``qwen-fast classify --questions`` (3 questions) of ``--rows`` rows;
* ``drop``, ``stall``, ``silent``, ``replica``: through a proxy in front of the server
  (``tests/support/proxy.py``; the server should be fast, the tiny model), paced at ``--pace``
  prompts a second: its capacity dropped tenfold once a third of the batch is forwarded; a
  stall of ``--stall`` seconds then; a server that never answers; two replicas, one of them
  slowed tenfold then, with the share each got after it.

Each run is done at the tree's defaults, with a fault's timeout of ``--timeout`` (``drop``,
``stall``) and what ``--set TREE:CASE:NAME=VALUE`` sets (``--set after:silent:deadline=10``);
``--fixed TREE:CASE:BxC`` adds a run of the case by the tree with ``batch_size=B`` and
``max_concurrency=C`` (for the job: ``--chunk-rows B --chunks-in-flight C``), the fixed
chunking found by hand to compare the defaults with. A row is: the items answered and failed
(by error type), the seconds, and items a second. Writes slow-server.json.
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from langchain_qwen_fast.bench.report import Header, header, write_json

#: What each run measures (see the module docstring).
CASES = ("decisions", "classifier", "job", "drop", "stall", "silent", "replica")
_LABELS = ["World", "Sports", "Business", "Sci/Tech"]
_QUESTIONS: dict[str, dict[str, Any]] = {
    "desk": {
        "type": "choice",
        "instructions": "Which desk handles this story?",
        "criteria": {"world": "World news.", "sports": "Sport.", "business": "Money and companies."},
    },
    "breaking": {"type": "noul", "instructions": "Is this breaking news?"},
    "tone": {
        "type": "score",
        "instructions": "How negative is it?",
        "criteria": ["Neutral.", "Somewhat negative.", "Very negative."],
    },
}


@dataclass
class Run:
    """One case of one tree: what came back, and how fast."""

    tree: str
    case: str
    settings: dict[str, Any]
    items: int
    answered: int = 0
    errors: dict[str, int] = field(default_factory=dict)
    seconds: float = 0.0
    per_s: float = 0.0
    #: the proxy's counts (prompts forwarded, clients that hung up, each replica's share)
    proxy: dict[str, Any] = field(default_factory=dict)


@dataclass
class Report:
    header: Header
    base_url: str
    model: str
    trees: dict[str, str]
    runs: list[Run] = field(default_factory=list)


def _fresh(count: int) -> list[str]:
    from langchain_qwen_fast.testing.samples import headlines

    run = uuid.uuid4().hex[:8]
    return [f"[{run}-{i}] {text}" for i, text in enumerate(headlines(count))]


def _outcome(results: list[Any], seconds: float) -> dict[str, Any]:
    errors: dict[str, int] = {}
    for r in results:
        if isinstance(r, Exception):
            errors[type(r).__name__] = errors.get(type(r).__name__, 0) + 1
    return {"answered": len(results) - sum(errors.values()), "errors": errors, "seconds": seconds}


def _client(spec: dict[str, Any]) -> dict[str, Any]:
    """One run, in this process (the package from ``PYTHONPATH``)."""
    settings = dict(spec["settings"])
    url, model, count = spec["url"], spec["model"], spec["items"]
    start = time.perf_counter()
    if spec["case"] == "decisions":
        from langchain_core.decisions import Choice, Noul, Score

        from langchain_qwen_fast import QwenDecisionModel

        kinds = {"choice": Choice, "noul": Noul, "score": Score}
        questions = {
            name: kinds[q["type"]](**{k: v for k, v in q.items() if k != "type"}) for name, q in _QUESTIONS.items()
        }
        decisions = QwenDecisionModel(base_url=url, model=model, **settings)
        states: list[Any] = [{"state": s, "questions": questions} for s in _fresh(count)]
        start = time.perf_counter()
        answers: list[Any] = asyncio.run(decisions.abatch(states, return_exceptions=True))
        return _outcome(answers, time.perf_counter() - start)
    from langchain_qwen_fast import QwenClassifier

    classifier = QwenClassifier(labels=_LABELS, base_url=url, model=model, **settings)
    classifier.prepare()
    start = time.perf_counter()
    results: list[Any] = asyncio.run(classifier.abatch(_fresh(count), return_exceptions=True))
    return _outcome(results, time.perf_counter() - start)


def _job(tree: str, url: str, model: str, rows: int, settings: dict[str, Any]) -> dict[str, Any]:
    """``qwen-fast classify --questions`` of ``rows`` rows, as the tree's command runs it."""
    with tempfile.TemporaryDirectory(prefix="slow-server-job-") as work:
        source, questions, out = Path(work, "rows.csv"), Path(work, "questions.json"), Path(work, "out.csv")
        with source.open("w", newline="") as f:
            writer = csv.writer(f)
            writer.writerow(["id", "text"])
            writer.writerows(enumerate(_fresh(rows)))
        questions.write_text(json.dumps(_QUESTIONS))
        command = [sys.executable, "-m", "langchain_qwen_fast.cli", "classify", str(source), "--questions"]
        command += [str(questions), "--out", str(out), "--base-url", url, "--model", model, "--no-progress"]
        if settings:
            command += [
                "--chunk-rows",
                str(settings["batch_size"]),
                "--chunks-in-flight",
                str(settings["max_concurrency"]),
            ]
        env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
        start = time.perf_counter()
        done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
        seconds = time.perf_counter() - start
        if done.returncode:
            return {"answered": 0, "errors": {f"exit {done.returncode}": rows}, "seconds": seconds,
                    "stderr": done.stderr.strip().splitlines()[-1:]}  # fmt: skip
        with out.open(newline="") as f:
            written = list(csv.DictReader(f))
        failed = sum(1 for r in written if r["error"])
        return {
            "answered": len(written) - failed,
            "errors": {"row error": failed} if failed else {},
            "seconds": seconds,
        }


def _run_client(tree: str, spec: dict[str, Any]) -> dict[str, Any]:
    # Run as a script, so that the package comes from the tree (``PYTHONPATH``) alone.
    command = [sys.executable, str(Path(__file__).resolve()), "--client", json.dumps(spec)]
    env = {**os.environ, "PYTHONPATH": str(Path(tree).resolve())}
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=3600)
    if done.returncode:
        raise SystemExit(f"client {spec['case']} of {tree} failed:\n{done.stderr[-3000:]}")
    result: dict[str, Any] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def _prompts(proxy: Any) -> int:
    total = 0
    for r in proxy.calls("/v1/completions"):
        prompt = r.body["prompt"]
        total += len(prompt) if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else 1
    return total


def _faulted(tree: str, case: str, spec: dict[str, Any], options: argparse.Namespace) -> dict[str, Any]:
    """A run through the proxy (or two), the fault set as the case says while it runs."""
    from tests.support.proxy import Fault, FaultProxy

    root = options.base_url.removesuffix("/v1")
    with FaultProxy(root) as proxy, FaultProxy(root) as other:
        urls = [proxy.base_url, other.base_url] if case == "replica" else [proxy.base_url]
        spec = {**spec, "url": urls if len(urls) > 1 else urls[0]}
        # paced, so that the batch is still out when the fault comes (its set-up done before)
        for p in (proxy, other):
            p.pace(options.pace)
        result: dict[str, Any] = {}
        runner = threading.Thread(target=lambda: result.update(_run_client(tree, spec)))
        runner.start()
        while runner.is_alive() and _prompts(proxy) + _prompts(other) < spec["items"] // 3:
            time.sleep(0.05)
        seen = (_prompts(proxy), _prompts(other))
        if case == "drop":
            proxy.pace(options.pace / 10)
        elif case in ("stall", "silent"):
            proxy.standing(Fault.stall(3600), seconds=options.stall if case == "stall" else 3600)
        elif case == "replica":
            other.pace(options.pace / 10)
        runner.join()
        counts: dict[str, Any] = {
            "prompts": _prompts(proxy) + _prompts(other),
            "hung_up": proxy.hung_up + other.hung_up,
        }
        if case == "replica":
            counts["after_slowdown"] = {"fast": _prompts(proxy) - seen[0], "slow": _prompts(other) - seen[1]}
        return {**result, "proxy": counts}


def run(options: argparse.Namespace) -> Report:
    trees = dict(t.split("=", 1) for t in options.tree)
    report = Report(header(options.label), options.base_url, options.model, trees)
    sizes = {"decisions": options.states, "classifier": options.texts, "job": options.rows}
    plans: list[tuple[str, str, dict[str, Any]]] = []
    for case in options.cases:
        for name in trees:
            plans.append((name, case, {}))
        for fixed in options.fixed:
            name, fixed_case, shape = fixed.split(":")
            b, _, c = shape.partition("x")
            if fixed_case == case:
                plans.append((name, case, {"batch_size": int(b), "max_concurrency": int(c)}))
    out = Path(options.out)
    for name, case, settings in plans:
        tree = trees[name]
        items = sizes.get(case, options.fault_texts)
        fault_settings = {"timeout": options.timeout} if case in ("drop", "stall") else {}
        given = {k: v for t, c, k, v in options.set if t == name and c == case}
        spec = {"case": case, "url": options.base_url, "model": options.model, "items": items,
                "settings": {**fault_settings, **given, **settings}}  # fmt: skip
        if case == "job":
            outcome = _job(tree, options.base_url, options.model, items, settings)
        elif case in sizes:
            outcome = _run_client(tree, spec)
        else:
            spec["case"] = "classifier"
            outcome = _faulted(tree, case, spec, options)
        row = Run(name, case, spec["settings"], items, outcome["answered"], outcome["errors"], outcome["seconds"])
        row.per_s = round(row.answered / row.seconds, 2) if row.seconds else 0.0
        row.seconds = round(row.seconds, 1)
        row.proxy = outcome.get("proxy", {})
        report.runs.append(row)
        print(f"{name:>8} {case:<10} {json.dumps(row.settings):<44} answered {row.answered:>5}/{items:<5} "
              f"errors {json.dumps(row.errors):<40} {row.seconds:>7.1f} s {row.per_s:>7.2f}/s {json.dumps(row.proxy)}",
              flush=True)  # fmt: skip
        write_json(out / "slow-server.json", report)
    return report


def _setting(text: str) -> tuple[str, str, str, Any]:
    """``TREE:CASE:NAME=VALUE`` as its parts, the value read as JSON where it is."""
    tree, case, pair = text.split(":", 2)
    name, _, value = pair.partition("=")
    try:
        return tree, case, name, json.loads(value)
    except ValueError:
        return tree, case, name, value


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--base-url", help="the server (the slow one for decisions, classifier, job)")
    parser.add_argument("--model", default="qwen3")
    parser.add_argument("--tree", action="append", default=[], help="NAME=PATH, a checkout of the package")
    parser.add_argument("--cases", nargs="+", choices=CASES, default=["decisions", "classifier", "job"])
    parser.add_argument("--fixed", action="append", default=[], help="TREE:CASE:BxC, a fixed chunking run too")
    parser.add_argument(
        "--set", action="append", default=[], type=_setting, help="TREE:CASE:NAME=VALUE, a setting of the runs"
    )
    parser.add_argument("--states", type=int, default=2048)
    parser.add_argument("--texts", type=int, default=8192)
    parser.add_argument("--rows", type=int, default=2000)
    parser.add_argument("--fault-texts", type=int, default=300, help="texts of a faulted run")
    parser.add_argument("--pace", type=float, default=100.0, help="prompts a second the proxy lets through")
    parser.add_argument("--stall", type=float, default=20.0, help="seconds a stall lasts")
    parser.add_argument("--timeout", type=float, default=6.0, help="the timeout of the drop and stall runs")
    parser.add_argument("--label", default="")
    parser.add_argument("--out", default="out/slow-server")
    parser.add_argument("--client", help=argparse.SUPPRESS)
    options = parser.parse_args(argv)
    if options.client:
        print(json.dumps(_client(json.loads(options.client))))
        return
    if not options.base_url:
        parser.error("--base-url is required")
    if not options.tree:
        options.tree = ["this=."]
    run(options)


if __name__ == "__main__":
    main()
