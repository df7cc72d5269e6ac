"""HTTP client libraries side by side on the request a server that takes one prompt a request
gets from the classifier: many single-prompt ``/v1/completions`` requests in flight at once,
each client path through one pooled client (see :data:`LIBRARIES`): ``httpx.AsyncClient``,
``aiohttp``, ``httpx2`` where it is installed (the openai SDK's fork of httpx), httpx split
over many small clients, httpx's sync client with a thread per request in flight, and the
classifier's own transport on aiohttp. The rounds rotate the order and every
request carries a text new to the server, so drift and the prefix cache hit all alike; the
client's CPU per request is the figure a busy machine disturbs least.

Run it against a server: ``python -m benchmarks.client_libraries --base-url
http://127.0.0.1:8000/v1`` prints the rows and the ratios as JSON (the served model is the
first one ``/v1/models`` lists unless ``--model`` names one).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import importlib.util
import itertools
import statistics
import sys
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from langchain_qwen_fast.bench.measure import LABELS, FreshTexts
from langchain_qwen_fast.bench.paths import request_body
from langchain_qwen_fast.bench.report import as_json
from langchain_qwen_fast.errors import ConfigurationError, QwenFastError

#: The client paths compared, the first one the reference of the ratios (the classifier's
#: async path on a server that takes prompt lists); ``httpx-threads`` is its sync path there,
#: a thread per request in flight; ``transport`` is the classifier's own transport as it sends
#: to a server that takes one prompt a request (aiohttp, with its retries and replica choice).
LIBRARIES = ("httpx", "aiohttp", "httpx2", "httpx-sharded", "httpx-threads", "transport")

#: ``httpx-sharded``: connections per client. httpx's pool does work for every connection it
#: holds on each request, so many small clients may do better than one large one.
SHARD_CONNECTIONS = 16

#: One POST of JSON bytes, answered with (status, decoded JSON).
Post = Callable[[bytes], Awaitable[tuple[int, Any]]]


@contextlib.asynccontextmanager
async def _poster(library: str, url: str, headers: dict[str, str], in_flight: int) -> AsyncIterator[Post]:
    """A pooled client of ``library`` with room for ``in_flight`` connections, as one POST."""
    if library == "aiohttp":
        import aiohttp

        connector = aiohttp.TCPConnector(limit=in_flight)
        async with aiohttp.ClientSession(connector=connector, headers=headers) as session:

            async def post(content: bytes) -> tuple[int, Any]:
                async with session.post(url, data=content) as response:
                    return response.status, orjson.loads(await response.read())

            yield post
        return
    module: Any = __import__(library.split("-")[0])
    shards = -(-in_flight // SHARD_CONNECTIONS) if library == "httpx-sharded" else 1
    # Requests go to the shards in turn, so one may briefly hold more than its share.
    room = in_flight if shards == 1 else 2 * SHARD_CONNECTIONS
    limits = module.Limits(max_connections=room, max_keepalive_connections=room)
    async with contextlib.AsyncExitStack() as stack:
        clients = [
            await stack.enter_async_context(module.AsyncClient(headers=headers, limits=limits, timeout=120.0))
            for _ in range(shards)
        ]
        turn = itertools.cycle(clients)

        async def post(content: bytes) -> tuple[int, Any]:
            response = await next(turn).post(url, content=content)
            return response.status_code, orjson.loads(response.content)

        yield post


@dataclasses.dataclass
class Round:
    """One library's share of one round: requests sent, wall and client CPU seconds, failures."""

    library: str
    requests: int
    seconds: float
    cpu_seconds: float
    failures: int


@dataclasses.dataclass
class LibraryRow:
    """One library over its rounds: requests/s, client CPU ms a request and failed requests,
    each round's, and the medians of the first two."""

    requests_per_s: list[float]
    client_cpu_ms_per_request: list[float]
    failed_requests: list[int]
    median_requests_per_s: float
    median_client_cpu_ms_per_request: float

    @classmethod
    def of(cls, done: Sequence[Round]) -> LibraryRow:
        """The row of a library's rounds."""
        return cls(
            requests_per_s=[round(d.requests / d.seconds, 1) for d in done],
            client_cpu_ms_per_request=[round(d.cpu_seconds / d.requests * 1000, 3) for d in done],
            failed_requests=[d.failures for d in done],
            median_requests_per_s=round(statistics.median(d.requests / d.seconds for d in done), 1),
            median_client_cpu_ms_per_request=round(
                statistics.median(d.cpu_seconds / d.requests * 1000 for d in done), 3
            ),
        )


@dataclasses.dataclass
class LibraryRatio:
    """A library's medians over the reference library's."""

    requests_per_s: float
    client_cpu_per_request: float


@dataclasses.dataclass
class LibrarySettings:
    """What every library sent: timed requests a round, requests at once, rounds, and whether
    the prompts were token ids or text."""

    requests: int
    in_flight: int
    rounds: int
    prompts: str


@dataclasses.dataclass
class LibrariesReport:
    """The comparison: its settings, each library's row, and each library's ratios to the first."""

    settings: LibrarySettings
    libraries: dict[str, LibraryRow]
    ratios: dict[str, LibraryRatio]


def _one_round(library: str, url: str, headers: dict[str, str], bodies: Sequence[bytes], in_flight: int) -> Round:
    """Send ``bodies`` through ``library`` with ``in_flight`` requests at once. The first
    ``in_flight`` are untimed (they open the connections); the rest are timed."""
    warm, timed = bodies[:in_flight], bodies[in_flight:]
    if library == "httpx-threads":
        return _threads_round(url, headers, warm, timed, in_flight)
    if library == "transport":
        return _transport_round(url, headers, warm, timed, in_flight)

    async def run(post: Post, queue: list[bytes]) -> int:
        failures = 0

        async def worker() -> None:
            nonlocal failures
            while queue:
                try:
                    status, reply = await post(queue.pop())
                except Exception:  # a connection the server dropped, say: counted, not retried
                    failures += 1
                    continue
                failures += status != 200 or not reply.get("choices")

        await asyncio.gather(*(worker() for _ in range(in_flight)))
        return failures

    async def main() -> Round:
        async with _poster(library, url, headers, in_flight) as post:
            await run(post, list(warm))
            c0, t0 = time.process_time(), time.perf_counter()
            failures = await run(post, list(timed))
            return Round(library, len(timed), time.perf_counter() - t0, time.process_time() - c0, failures)

    return asyncio.run(main())


def _threads_round(
    url: str, headers: dict[str, str], warm: Sequence[bytes], timed: Sequence[bytes], in_flight: int
) -> Round:
    """:func:`_one_round` through one ``httpx.Client`` and a thread per request in flight."""
    import httpx

    limits = httpx.Limits(max_connections=in_flight, max_keepalive_connections=in_flight)
    with httpx.Client(headers=headers, limits=limits, timeout=120.0) as client:

        def post(content: bytes) -> bool:
            try:
                response = client.post(url, content=content)
            except Exception:
                return True
            return response.status_code != 200 or not orjson.loads(response.content).get("choices")

        with ThreadPoolExecutor(in_flight) as pool:
            list(pool.map(post, warm))
            c0, t0 = time.process_time(), time.perf_counter()
            failures = sum(pool.map(post, timed))
            return Round("httpx-threads", len(timed), time.perf_counter() - t0, time.process_time() - c0, failures)


def classifier_transport(base_url: str, api_key: str | None, in_flight: int) -> Any:
    """The classifier's own transport (retries, replica choice, typed errors) on aiohttp, as
    it sends to a server that takes one prompt a request. The one place this folder builds
    an object of the client's core."""
    from langchain_qwen_fast._core.http_stacks import AiohttpStack
    from langchain_qwen_fast._core.transport import RetryPolicy, Transport

    transport = Transport(base_url, api_key=api_key, timeout=120.0, retry=RetryPolicy(), pool_size=in_flight)
    transport.use_stack(AiohttpStack(transport.wire, transport.httpx))
    return transport


def _transport_round(
    url: str, headers: dict[str, str], warm: Sequence[bytes], timed: Sequence[bytes], in_flight: int
) -> Round:
    """:func:`_one_round` through :func:`classifier_transport`."""
    key = headers.get("authorization", "").removeprefix("Bearer ") or None
    transport = classifier_transport(url.removesuffix("/completions"), key, in_flight)

    async def main() -> Round:
        await transport.arequest_all([("POST", "completions", orjson.loads(b)) for b in warm], in_flight)
        calls = [("POST", "completions", orjson.loads(b)) for b in timed]
        c0, t0 = time.process_time(), time.perf_counter()
        replies = await transport.arequest_all(calls, in_flight)
        seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
        failures = sum(isinstance(r, Exception) or not r.get("choices") for r in replies)
        return Round("transport", len(timed), seconds, cpu, failures)

    try:
        return asyncio.run(main())
    finally:
        transport.close()


def compare_client_libraries(
    base_url: str,
    model: str,
    *,
    requests: int = 2048,
    in_flight: int = 256,
    rounds: int = 3,
    libraries: Sequence[str] | None = None,
    tokenizer: str | None = None,
    api_key: str | None = None,
) -> LibrariesReport:
    """Each library (default: those of :data:`LIBRARIES` installed) sends ``requests``
    single-prompt classification requests with ``in_flight`` at once, for ``rounds`` rounds,
    the order rotating each round. The bodies are the classifier's own (its set-up run first
    against the server; token ids with ``tokenizer``), serialised before the clock starts.
    Returns each library's rounds (with the requests that failed: an error answer or an
    exception, neither retried), its median requests/s and client CPU per request, and the
    ratios of each library's to the first one's (``httpx``)."""
    from langchain_qwen_fast import QwenClassifier

    installed = [n for n in LIBRARIES if n == "transport" or importlib.util.find_spec(n.split("-")[0])]
    chosen = list(libraries or installed)
    unknown = sorted(set(chosen) - set(LIBRARIES))
    if unknown or not chosen:
        raise ConfigurationError(f"unknown client libraries {unknown}; known: {list(LIBRARIES)}")
    if requests <= in_flight:
        raise ConfigurationError(f"requests ({requests}) must be more than in_flight ({in_flight})")
    key: dict[str, Any] = {"api_key": api_key} if api_key else {}
    classifier = QwenClassifier(labels=LABELS, base_url=base_url, model=model, tokenizer_path=tokenizer, **key)
    plan = dataclasses.replace(classifier.prepare(), takes_prompt_lists=False)
    url = f"{base_url.rstrip('/')}/completions"
    headers = {"content-type": "application/json", **({"authorization": f"Bearer {api_key}"} if api_key else {})}
    fresh = FreshTexts()
    by_library: dict[str, list[Round]] = {name: [] for name in chosen}
    for r in range(rounds):
        for library in chosen[r % len(chosen) :] + chosen[: r % len(chosen)]:
            texts = fresh(requests + in_flight)
            prompts = plan.encode(texts) if plan.tokenizer is not None else [plan.render(t) for t in texts]
            bodies = [orjson.dumps(request_body(plan, model, [p])) for p in prompts]
            by_library[library].append(_one_round(library, url, headers, bodies, in_flight))
    rows = {name: LibraryRow.of(done) for name, done in by_library.items()}
    first = rows[chosen[0]]
    ratios = {
        f"{name} / {chosen[0]}": LibraryRatio(
            requests_per_s=round(row.median_requests_per_s / first.median_requests_per_s, 2),
            client_cpu_per_request=round(
                row.median_client_cpu_ms_per_request / first.median_client_cpu_ms_per_request, 2
            ),
        )
        for name, row in rows.items()
        if name != chosen[0]
    }
    settings = LibrarySettings(requests, in_flight, rounds, "token ids" if plan.tokenizer is not None else "text")
    return LibrariesReport(settings=settings, libraries=rows, ratios=ratios)


def build_parser() -> argparse.ArgumentParser:
    """``python -m benchmarks.client_libraries``'s options."""
    parser = argparse.ArgumentParser(
        prog="python -m benchmarks.client_libraries",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--base-url", required=True, help="a running vLLM server (…/v1)")
    parser.add_argument("--model", help="served model name (default: the first one the server lists)")
    parser.add_argument("--requests", type=int, default=2048, help="timed requests a round (default: %(default)s)")
    parser.add_argument("--in-flight", type=int, default=256, help="requests at once (default: %(default)s)")
    parser.add_argument("--rounds", type=int, default=3, help="default: %(default)s")
    parser.add_argument(
        "--library", dest="libraries", action="append", choices=LIBRARIES, help="repeatable (default: all installed)"
    )
    parser.add_argument("--tokenizer", help="the model's tokenizer: token-id prompts (default: text prompts)")
    parser.add_argument("--api-key", help="the server's API key, if it has one")
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Compare the libraries and print the JSON; the exit code."""
    import httpx

    args = build_parser().parse_args(argv)
    base_url = args.base_url.rstrip("/")
    model = args.model or httpx.get(f"{base_url}/models", timeout=30).json()["data"][0]["id"]
    try:
        report = compare_client_libraries(
            base_url,
            model,
            requests=args.requests,
            in_flight=args.in_flight,
            rounds=args.rounds,
            libraries=args.libraries,
            tokenizer=args.tokenizer,
            api_key=args.api_key,
        )
    except QwenFastError as exc:
        print(f"benchmarks.client_libraries: {exc}", file=sys.stderr)
        return 1
    print(as_json(report))
    return 0


if __name__ == "__main__":
    sys.exit(main())


__all__ = [
    "LIBRARIES",
    "LibrariesReport",
    "LibraryRatio",
    "LibraryRow",
    "Round",
    "build_parser",
    "classifier_transport",
    "compare_client_libraries",
    "main",
]
