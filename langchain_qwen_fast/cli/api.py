"""``qwen-fast api``: a saved classifier served over HTTP (``POST /v1/classify``,
``POST /v1/decisions``, ``/health``, ``/ready``, ``/metrics``), in the foreground."""

from __future__ import annotations

import argparse
import dataclasses
import os
from pathlib import Path

from langchain_qwen_fast.cli.options import defaults, options_from
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving.service.options import ServiceOptions

#: The environment variable the key is read from by default.
API_KEY_ENV = "QWEN_FAST_API_KEY"

DESCRIPTION = f"""\
Serve a saved classifier over HTTP, for clients in any language:

    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1 --port 8080
    curl -s localhost:8080/v1/classify -H 'content-type: application/json' -d '{{"input": "Stocks rally"}}'

POST /v1/classify takes {{"input": "one text"}} or {{"input": ["a", "b", ...]}} and answers each
text's labels, probabilities and abstention; a list keeps each bad item's error in its place.
POST /v1/decisions answers questions about an input in OpenAI's Decisions wire format (the
openai client's decisions.create, langchain-openai's OpenAIClassifier), from the same server.
Single texts are grouped: while every group slot is busy, arriving texts queue and go together
as the next group, in one request to vLLM.

Limits, declared in the OpenAPI document and checked before any work: the body's bytes (413),
the texts in a list and the characters in a text (422), the texts waiting over all requests
(429 with Retry-After), and a deadline a request (504). GET /health is liveness (it never calls
vLLM), GET /ready readiness (the set-up is done and vLLM answers), GET /metrics Prometheus, and
OpenAPI docs at /docs.

The API key: put it in the environment ({API_KEY_ENV}, or the variable --api-key-env names) or
in a file (--api-key-file), never on the command line, where other users of the machine can
read it. With a key, /v1/classify, /v1/decisions and /metrics need "Authorization: Bearer
<key>". Needs the 'api' extra (FastAPI, uvicorn, prometheus-client)."""


def add_arguments(p: argparse.ArgumentParser) -> None:
    """``api``'s options: one flag for each field of :class:`ServiceOptions` but the key, named
    after it and with its default."""
    p.add_argument("config", help="a saved classifier (QwenClassifier.save's file or directory)")
    p.add_argument("--base-url", help="the vLLM server(s), overriding the saved ones", nargs="+")
    p.add_argument("--model", help="the served model name, overriding the saved one")
    p.add_argument(
        "--host", help="address to bind (default: %(default)s; another address without a key is warned about)"
    )
    p.add_argument("--port", type=int, help="port (default: %(default)s)")
    p.add_argument(
        "--api-key-env",
        default=API_KEY_ENV,
        help="environment variable holding the key clients must send (default: %(default)s; unset: no key; "
        "set but empty: refused)",
    )
    p.add_argument(
        "--api-key-file",
        type=Path,
        help="a file holding the key (its first line; surrounding whitespace dropped); "
        "overrides the environment variable",
    )
    p.add_argument(
        "--max-wait-ms",
        type=float,
        help="how long a group's first text waits for company (default: %(default)s: it goes at once "
        "when a group slot is free)",
    )
    p.add_argument(
        "--max-group",
        type=int,
        help="most texts grouped into one call, single texts and lists' alike (default: %(default)s)",
    )
    p.add_argument(
        "--groups-in-flight",
        type=int,
        help="groups sent to vLLM at once; texts arriving while all are busy form the next group "
        "(default: 2 a vLLM server, shared among the workers, at least 1 each)",
    )
    p.add_argument(
        "--workers",
        type=int,
        help="processes serving the port, each with its own grouping: more requests a second than one "
        "process's HTTP and JSON work allows (default: %(default)s)",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        help="largest request body in bytes; a larger one is answered 413 unread (default: %(default)s)",
    )
    p.add_argument("--max-texts", type=int, help="most texts in one request; more: 422 (default: %(default)s)")
    p.add_argument("--max-text-chars", type=int, help="most characters in one text; more: 422 (default: %(default)s)")
    p.add_argument(
        "--max-queued-texts",
        type=int,
        help="most texts waiting or in flight over all requests, a worker; a request that would pass it "
        "is answered 429 with Retry-After (default: %(default)s)",
    )
    p.add_argument(
        "--request-timeout",
        type=float,
        help="seconds from a request's arrival to its answer; past it, 504 (default: %(default)s)",
    )
    p.add_argument(
        "--ready-timeout", type=float, help="most seconds GET /ready takes to find out (default: %(default)s)"
    )
    p.add_argument(
        "--max-questions",
        type=int,
        help="POST /v1/decisions: most questions in one request, each one prompt counted against "
        "--max-queued-texts; more: 422 (default: %(default)s)",
    )
    p.add_argument(
        "--max-choices",
        type=int,
        help="POST /v1/decisions: most choices of a choice question or levels of a score; more: 422 "
        "(default: %(default)s)",
    )
    p.set_defaults(**defaults(ServiceOptions))


def api_key_from(env: str, file: Path | None) -> str | None:
    """The key from ``file`` if given, else from the variable ``env`` (None when unset). An
    empty key, or one that cannot be read, is a :class:`ConfigurationError`: a service that was
    meant to have a key never starts without one."""
    if file is not None:
        try:
            lines = file.read_text(encoding="utf-8").strip().splitlines()
        except OSError as exc:
            raise ConfigurationError(f"--api-key-file {file}: cannot read it ({exc.strerror})") from None
        if not lines or not lines[0].strip():
            raise ConfigurationError(f"--api-key-file {file} is empty")
        return lines[0].strip()
    value = os.environ.get(env)
    if value is None:
        return None
    if not value.strip():
        raise ConfigurationError(f"{env} is set but empty: set the key, or unset it for a service without one")
    return value.strip()


def options_of(args: argparse.Namespace) -> ServiceOptions:
    """The service's options from the parsed arguments, the key read as :func:`api_key_from` says."""
    return dataclasses.replace(
        options_from(ServiceOptions, args), api_key=api_key_from(args.api_key_env, args.api_key_file)
    )


def run(args: argparse.Namespace) -> int:
    """Serve until interrupted."""
    from langchain_qwen_fast.serving.service import serve_api

    base_url: list[str] | None = args.base_url
    serve_api(
        args.config,
        options_of(args),
        base_url=base_url[0] if base_url and len(base_url) == 1 else base_url,
        model=args.model or None,
    )
    return 0
