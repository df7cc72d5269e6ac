"""Many concurrent HTTP clients, each sending one text at a time: to ``qwen-fast api`` (the
micro-batching service, in a process of its own) and straight to vLLM, one request per text
(the published design), beside ``QwenClassifier.abatch`` on the same texts. Rows of
``qwen-fast bench --service``. The clients share one aiohttp session (``bench`` extra), one
event loop keeping every client's connection open."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from typing import Any

from langchain_qwen_fast.bench.measure import PathResult, RunContext, ready_classifier, timed
from langchain_qwen_fast.bench.sampling import cores_between, server_cpu_seconds
from langchain_qwen_fast.errors import ServerStartError


def load_test(
    run: RunContext, name: str, texts: list[str], clients: int, send: Callable[[Any, str], Awaitable[Any]]
) -> PathResult:
    """``clients`` concurrent clients, each sending one text at a time until ``texts`` are
    done, through one aiohttp session; every request's latency is kept, and the cores the
    run's servers kept busy."""
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

    before = server_cpu_seconds(run.server_pids)
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
        server_cores=cores_between(before, server_cpu_seconds(run.server_pids), t1 - t0),
    )


def _wait_healthy(url: str, service: Any, timeout: float = 60.0) -> None:
    """Wait for ``url`` to answer 200 while the process ``service`` runs."""
    import httpx

    deadline = time.monotonic() + timeout
    while True:
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or service.poll() is not None:
            raise ServerStartError(f"qwen-fast api did not answer {url} within {timeout:.0f} s")
        time.sleep(0.2)


def run_service(
    run: RunContext, base_url: str, model: str, tokenizer: str | None, texts: list[str], clients: int = 256
) -> tuple[list[PathResult], dict[str, float]]:
    """``clients`` concurrent HTTP clients each sending one text: straight to vLLM one request
    per text with the classifier's exact request, and to ``qwen-fast api`` (started here on a
    free port for the classifier's saved settings); then ``QwenClassifier.abatch`` on the same
    texts. Returns the rows and the service's rate over vLLM's."""
    import subprocess
    import sys
    import tempfile

    from langchain_qwen_fast._core import vllm_api
    from langchain_qwen_fast.serving import free_port

    classifier = ready_classifier(base_url, model, tokenizer, warm_ups=0)
    plan = classifier.prepare()
    completions = base_url.rstrip("/") + "/completions"

    async def to_vllm(session: Any, text: str) -> Any:
        body = vllm_api.completions_body(plan, model, 0, [plan.render(text)])
        async with session.post(completions, json=body) as response:
            return (await response.json())["choices"][0]

    results = [load_test(run, f"{clients} clients -> vLLM, one request per text", texts, clients, to_vllm)]
    port = free_port()
    with tempfile.TemporaryDirectory() as saved:
        classifier.save(saved)
        command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", saved, "--port", str(port)]
        service = subprocess.Popen(command)
        try:
            _wait_healthy(f"http://127.0.0.1:{port}/health", service)
            classify_url = f"http://127.0.0.1:{port}/v1/classify"

            async def to_service(session: Any, text: str) -> Any:
                async with session.post(classify_url, json={"input": text}) as response:
                    return (await response.json())["result"]

            name = f"{clients} clients -> qwen-fast api (micro-batched)"
            results.append(load_test(run, name, texts, clients, to_service))
        finally:
            service.terminate()
            service.wait(10)
    results.append(
        timed(
            "QwenClassifier.abatch, same texts",
            len(texts),
            lambda: asyncio.run(classifier.abatch(texts)),
            run.server_pids,
        )
    )
    checks = {"qwen-fast api / vLLM one request per text (req/s)": round(results[1].rps / results[0].rps, 2)}
    return results, checks


__all__ = ["load_test", "run_service"]
