"""``qwen-fast api``'s own CPU a request, against the repository's canned vLLM.

    REQUESTS=4000 CLIENTS=64 ROUNDS=2 .venv/bin/python server/service_cpu.py default 1 2 8 32

The canned vLLM (``tests/support/fake_vllm.py``) answers over a real socket from a process of
its own, at once, so what is counted is the service's work alone: HTTP, JSON, grouping, the
classifier's prompts and parsing. Each row starts ``qwen-fast api`` with one of the arguments
as ``--groups-in-flight`` (``default``: the flag left out), sends ``REQUESTS`` single texts
(default 4000) from ``CLIENTS`` concurrent clients (default 64) and reads the service process's
CPU seconds (psutil) and its ``qwen_fast_group_size`` histogram; ``ROUNDS`` (default 2) repeats
the rows, interleaved. Each row is printed as a line of JSON. Run it from a checkout with the
``benchmarks`` extra (the load comes from :mod:`benchmarks.service`); ``PYTHONPATH`` chooses
which tree's service runs.
"""

from __future__ import annotations

import json
import multiprocessing
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def serve_canned(port: int, takes_prompt_lists: bool = True, tokenizer_json: str | None = None) -> None:
    """The canned vLLM over HTTP on ``port`` until killed; ``takes_prompt_lists=False`` refuses
    lists as vLLM's Rust frontend does, and ``tokenizer_json`` (a ``tokenizer.json``) makes its
    ``/tokenize`` that tokenizer's, so that a client may send token ids made with it."""
    import httpx
    from aiohttp import web

    from tests.support import fake_vllm
    from tests.support.fake_vllm import FakeVLLM

    if tokenizer_json is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(tokenizer_json)
        fake_vllm.toy_tokenize = lambda text: tokenizer.encode(text, add_special_tokens=False).ids
    fake = FakeVLLM(takes_prompt_lists=takes_prompt_lists)

    async def answer(request: web.Request) -> web.Response:
        fake.requests.clear()  # it records every request; nothing here reads them
        headers = {"content-type": request.headers.get("content-type", "application/json")}
        url = f"http://vllm.test{request.path_qs}"
        canned = fake(httpx.Request(request.method, url, content=await request.read(), headers=headers))
        return web.Response(body=canned.content, status=canned.status_code, content_type="application/json")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", answer)
    web.run_app(app, host="127.0.0.1", port=port, print=None)


def prepare_when_up(classifier: Any, tries: int = 200) -> None:
    """``classifier.prepare()`` once the canned server answers (it starts in a process of its own)."""
    for _ in range(tries - 1):
        try:
            classifier.prepare()
            return
        except Exception:  # the canned server is still starting
            time.sleep(0.1)
    classifier.prepare()


def group_totals(url: str) -> tuple[float, float]:
    import httpx

    text = httpx.get(f"{url}/metrics").text
    total = re.search(r"^qwen_fast_group_size_sum (\S+)$", text, re.M)
    count = re.search(r"^qwen_fast_group_size_count (\S+)$", text, re.M)
    return (float(total.group(1)) if total else 0.0), (float(count.group(1)) if count else 0.0)


def measure(saved: str, groups: str, requests: int, clients: int) -> dict[str, object]:
    from benchmarks.service import load_test
    from langchain_qwen_fast.bench.measure import FreshTexts, RunContext
    from langchain_qwen_fast.serving import free_port

    port = free_port()
    command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", saved, "--port", str(port)]
    if groups != "default":
        command += ["--groups-in-flight", groups]
    service = subprocess.Popen(command, env=os.environ)
    url = f"http://127.0.0.1:{port}"
    try:
        import httpx

        for _ in range(300):
            try:
                if httpx.get(f"{url}/health").status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        texts = FreshTexts()
        warm = [(f"{url}/v1/classify", {"input": t}) for t in texts(min(500, requests))]
        load_test(RunContext(), "warm-up", warm, clients)
        before = group_totals(url)
        timed = [(f"{url}/v1/classify", {"input": t}) for t in texts(requests)]
        row = load_test(RunContext(), f"groups in flight {groups}", timed, clients, service_pid=service.pid)
        after = group_totals(url)
    finally:
        service.terminate()
        service.wait(30)
    cores = row.server_cores["qwen_fast_api"]
    return {
        "groups_in_flight": groups,
        "requests_per_s": round(row.rps, 1),
        "p50_ms": round(row.percentile(50) or 0.0, 2),
        "service_cpu_ms_per_request": round(cores * row.seconds / row.items * 1000, 3),
        "mean_group": round((after[0] - before[0]) / max(1.0, after[1] - before[1]), 1),
    }


def main(variants: list[str]) -> None:
    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.serving import free_port
    from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS

    requests, clients = int(os.environ.get("REQUESTS", 4000)), int(os.environ.get("CLIENTS", 64))
    port = free_port()
    canned = multiprocessing.get_context("spawn").Process(target=serve_canned, args=(port,), daemon=True)
    canned.start()
    try:
        with tempfile.TemporaryDirectory() as saved:
            classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=f"http://127.0.0.1:{port}/v1")
            prepare_when_up(classifier)
            classifier.save(saved)
            for round_number in range(int(os.environ.get("ROUNDS", 2))):
                for groups in variants or ["default"]:
                    row = measure(saved, groups, requests, clients)
                    print(json.dumps({"round": round_number + 1, **row}), flush=True)
    finally:
        canned.kill()


if __name__ == "__main__":
    main(sys.argv[1:])
