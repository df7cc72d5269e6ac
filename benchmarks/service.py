"""Many concurrent HTTP clients, each sending one text at a time: to ``qwen-fast api`` (the
micro-batching service, in processes of its own) and straight to vLLM, one request per text
(the published design), beside ``QwenClassifier.abatch`` on the same texts. Rows of
``python -m benchmarks.compare --service`` and ``python -m benchmarks.scale --service-workers``;
``server/service_cpu.py`` uses :func:`load_test`. The clients run in one or more processes
(aiohttp), each an event loop keeping its clients' connections open: at high request rates
one such process is the limit."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from typing import Any

from langchain_qwen_fast.bench.measure import (
    PathResult,
    RunContext,
    cores_between,
    ready_classifier,
    server_cpu_seconds,
    timed,
)
from langchain_qwen_fast.bench.paths import request_body
from langchain_qwen_fast.errors import MeasurementError, ServerStartError

#: A request: the URL and the JSON body.
Request = tuple[str, dict[str, Any]]

#: Prompts a request in the last row (a server that takes prompt lists): set here rather
#: than left to the classifier, so that the prompts in flight are known.
PROMPTS_A_REQUEST = 128


def load_processes() -> int:
    """Client processes for a load test on this host: one per four cores, one to eight."""
    import os

    return max(1, min(8, (os.cpu_count() or 1) // 4))


def _clients(requests: list[Request], clients: int, start_at: float) -> tuple[list[float], int, float, float, float]:
    """One client process: ``clients`` concurrent clients through one aiohttp session, each
    sending one request at a time from ``requests`` from ``start_at`` (a wall-clock time) on.
    Each request's latency in ms, the count answered other than 200, the first send's and
    last answer's wall-clock times, and the CPU seconds the clients took."""
    import aiohttp

    async def main() -> tuple[list[float], int]:
        latencies: list[float] = []
        failed = 0
        queue = list(reversed(requests))
        async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=clients)) as session:

            async def client() -> None:
                nonlocal failed
                while queue:
                    url, body = queue.pop()
                    t0 = time.perf_counter()
                    async with session.post(url, json=body) as response:
                        await response.read()
                        failed += response.status != 200
                    latencies.append((time.perf_counter() - t0) * 1000)

            await asyncio.gather(*(client() for _ in range(clients)))
        return latencies, failed

    time.sleep(max(0.0, start_at - time.time()))
    began, cpu = time.time(), time.process_time()
    latencies, failed = asyncio.run(main())
    return latencies, failed, began, time.time(), time.process_time() - cpu


def load_test(
    run: RunContext,
    name: str,
    requests: list[Request],
    clients: int,
    pids: Sequence[int] = (),
    processes: int = 1,
    service_pid: int | None = None,
) -> PathResult:
    """``clients`` concurrent clients, each sending one request at a time until ``requests``
    are done, spread over ``processes`` client processes that start together; every request's
    latency is kept, the cores the clients took (every client process), the cores the servers
    (``pids``) kept busy and, with ``service_pid``, the cores of that process and its children
    (``qwen-fast api`` and its workers). A request answered other than 200 fails the row
    (:class:`MeasurementError`): a rate of errors measures nothing."""
    before = server_cpu_seconds(pids)
    service_before = server_cpu_seconds([service_pid] if service_pid else [])
    c0 = time.process_time()
    client_cpu = 0.0
    if processes == 1:
        latencies, failed, t0, t1, _ = _clients(requests, clients, 0.0)
    else:
        import multiprocessing
        from concurrent.futures import ProcessPoolExecutor

        context = multiprocessing.get_context("spawn")
        with ProcessPoolExecutor(processes, mp_context=context) as pool:
            list(pool.map(time.sleep, [0.0] * processes))  # every process started and importing done
            start_at = time.time() + 1.0
            shares = [requests[k::processes] for k in range(processes)]
            done = list(pool.map(_clients, shares, [max(1, clients // processes)] * processes, [start_at] * processes))
        latencies = [ms for part in done for ms in part[0]]
        failed = sum(part[1] for part in done)
        t0, t1 = min(part[2] for part in done), max(part[3] for part in done)
        client_cpu = sum(part[4] for part in done)
    if failed:
        raise MeasurementError(f"{name}: {failed} of {len(requests)} requests answered other than 200")
    window = (time.perf_counter() - (time.time() - t0), time.perf_counter() - (time.time() - t1))
    cores = cores_between(before, server_cpu_seconds(pids), t1 - t0)
    if service_pid:
        service_after = server_cpu_seconds([service_pid])
        busy = sum(service_after.values()) - sum(service_before.values())
        cores["qwen_fast_api"] = round(busy / (t1 - t0), 2)
    return PathResult(
        name,
        "concurrent clients",
        len(requests),
        t1 - t0,
        time.process_time() - c0 + client_cpu,
        latencies,
        window,
        server_cores=cores,
    )


def wait_healthy(url: str, service: Any, timeout: float = 60.0) -> None:
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
    run: RunContext,
    base_urls: Sequence[str],
    model: str,
    tokenizer: str | None,
    texts: list[str],
    clients: int = 256,
    workers: Sequence[int] = (1,),
    groups_in_flight: Sequence[int | None] = (None,),
) -> tuple[list[PathResult], dict[str, float]]:
    """``clients`` concurrent HTTP clients each sending one text: straight to vLLM one request
    per text with the classifier's exact request (the texts dealt round the servers), and to
    ``qwen-fast api`` over the same servers with each count of ``workers`` processes and each
    of ``groups_in_flight`` (None: the service's default), started here on a free port for the
    classifier's saved settings; then ``QwenClassifier.abatch``, at its defaults and with no
    more prompts in flight than there are clients (at least one request of
    :data:`PROMPTS_A_REQUEST`). Every row has as many texts as ``texts``, new to the servers.
    Returns the rows and each service's rate over vLLM's."""
    import subprocess
    import sys
    import tempfile

    from langchain_qwen_fast.serving import free_port

    classifier = ready_classifier(list(base_urls), model, tokenizer, warm_ups=0)
    plan = classifier.prepare()
    pids = run.server_pids
    processes = load_processes()
    straight = [
        (
            base_urls[k % len(base_urls)].rstrip("/") + "/completions",
            request_body(plan, model, [plan.render(t)]),
        )
        for k, t in enumerate(texts)
    ]
    servers = f"{len(base_urls)} server{'s' if len(base_urls) > 1 else ''}"
    results = [load_test(run, f"{clients} clients -> vLLM ({servers}), one request per text", straight, clients, pids,
                         processes)]  # fmt: skip
    checks: dict[str, float] = {}
    with tempfile.TemporaryDirectory() as saved:
        classifier.save(saved)
        for count in workers:
            for groups in groups_in_flight:
                port = free_port()
                command = [sys.executable, "-m", "langchain_qwen_fast.cli", "api", saved, "--port", str(port),
                           "--workers", str(count)]  # fmt: skip
                if groups is not None:
                    command += ["--groups-in-flight", str(groups)]
                service = subprocess.Popen(command)
                shown = f"{count} worker{'s' if count > 1 else ''}" + (f", {groups} groups in flight" if groups else "")
                try:
                    wait_healthy(f"http://127.0.0.1:{port}/health", service)
                    fresh = run.fresh_texts(len(texts))  # none in the servers' prefix caches yet
                    requests = [(f"http://127.0.0.1:{port}/v1/classify", {"input": t}) for t in fresh]
                    name = f"{clients} clients -> qwen-fast api, {shown} ({servers})"
                    results.append(load_test(run, name, requests, clients, pids, processes, service.pid))
                finally:
                    service.terminate()
                    service.wait(30)
                key = f"qwen-fast api, {shown} / vLLM one request per text (req/s)"
                checks[key] = round(results[-1].rps / results[0].rps, 2)
    batch = run.fresh_texts(len(texts))
    results.append(timed("QwenClassifier.abatch", len(batch), lambda: asyncio.run(classifier.abatch(batch)), pids))
    # No more prompts in flight than the clients keep: what the servers give at the clients'
    # depth, whatever a service in front of them groups. A server that takes one prompt a
    # request gets that many requests.
    prompts_a_request = PROMPTS_A_REQUEST if plan.takes_prompt_lists else 1
    requests_in_flight = max(1, clients // prompts_a_request)
    shallow = ready_classifier(list(base_urls), model, tokenizer, warm_ups=0, batch_size=prompts_a_request)
    shallow.prepare()  # its set-up is not part of the row
    last = run.fresh_texts(len(texts))
    results.append(
        timed(
            f"QwenClassifier.abatch, at most {requests_in_flight * prompts_a_request} prompts in flight",
            len(last),
            lambda: asyncio.run(shallow.abatch(last, {"max_concurrency": requests_in_flight})),
            pids,
        )
    )
    return results, checks


__all__ = ["PROMPTS_A_REQUEST", "Request", "load_processes", "load_test", "run_service"]
