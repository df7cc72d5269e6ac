"""``qwen-fast api``: a saved classifier served over HTTP (``POST /v1/classify``, ``/health``,
``/metrics``), in the foreground."""

from __future__ import annotations

import argparse
import os

DESCRIPTION = """\
Serve a saved classifier over HTTP, for clients in any language:

    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1 --port 8080
    curl -s localhost:8080/v1/classify -H 'content-type: application/json' -d '{"input": "Stocks rally"}'

POST /v1/classify takes {"input": "one text"} or {"input": ["a", "b", ...]} and answers each
text's labels, probabilities and abstention; a list keeps each bad item's error in its place.
Single texts are grouped: while every group slot is busy, arriving texts queue and go together
as the next group, in one request to vLLM. GET /health, GET /metrics (Prometheus) and OpenAPI
docs at /docs. With an API key, /v1/classify and /metrics
need "Authorization: Bearer <key>". Needs the 'api' extra (FastAPI, uvicorn, prometheus-client)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``api``'s options."""
    p.add_argument("config", help="a saved classifier (QwenClassifier.save's file or directory)")
    p.add_argument("--base-url", help="the vLLM server(s), overriding the saved ones", nargs="+")
    p.add_argument("--model", help="the served model name, overriding the saved one")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (default: %(default)s)")
    p.add_argument("--port", type=int, default=8080, help="port (default: %(default)s)")
    p.add_argument(
        "--api-key-env",
        default="QWEN_FAST_API_KEY",
        help="environment variable holding the key clients must send (default: %(default)s; unset: no key)",
    )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        default=0.0,
        help="how long a group's first text waits for company (default: %(default)s: it goes at once "
        "when a group slot is free)",
    )
    p.add_argument("--max-group", type=int, default=256, help="most single texts grouped into one call")
    p.add_argument(
        "--groups-in-flight",
        type=int,
        default=None,
        help="groups sent to vLLM at once; texts arriving while all are busy form the next group "
        "(default: 2 a vLLM server, shared among the workers, at least 1 each)",
    )
    p.add_argument(
        "--workers",
        type=int,
        default=1,
        help="processes serving the port, each with its own grouping: more requests a second than one "
        "process's HTTP and JSON work allows (default: %(default)s)",
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from langchain_qwen_fast.serving.api import serve_api

    base_url: list[str] | None = args.base_url
    serve_api(
        args.config,
        base_url=base_url[0] if base_url and len(base_url) == 1 else base_url,
        model=args.model or None,
        host=args.host,
        port=args.port,
        api_key=os.environ.get(args.api_key_env) or None,
        max_wait_ms=args.max_wait_ms,
        max_group=args.max_group,
        groups_in_flight=args.groups_in_flight,
        workers=args.workers,
    )
    return 0
