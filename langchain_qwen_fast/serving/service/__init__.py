"""``qwen-fast api``: an HTTP classification service over a classifier, for any language.

    qwen-fast api models/news --base-url http://127.0.0.1:8000/v1 --port 8080
    curl -s localhost:8080/v1/classify -H 'content-type: application/json' -d '{"input": "Stocks rally"}'

* ``POST /v1/classify`` takes ``{"input": "one text"}`` or ``{"input": ["a", "b", ...]}`` and
  answers each text's labels, probabilities and abstention. A list answers 200 with each bad
  item's error in its place; a single text that fails answers with the error's status (422
  when the text cannot be classified, 502/504 when the vLLM server failed, 429/503 with the
  server's ``Retry-After`` when it asked for time: :mod:`.answers`).
* Declared limits, checked before any work (:class:`ServiceOptions`): the body's bytes (413,
  from ``Content-Length`` and again while the body streams in, never read past the limit), the
  texts in a list and the characters in a text (422). With an API key (:mod:`.auth`), the key
  is checked before the body is read (:mod:`.fast_path`).
* Backpressure and deadlines: single texts and lists' texts wait in one bounded line
  (:mod:`.micro_batcher`); a request that would overfill it is answered 429 with
  ``Retry-After``. Each request has a deadline (504 when it passes; its texts leave the line,
  its results are dropped).
* Every error answer is ``{"error": {"type", "message"}}``; a failure that is not the text's
  own also carries a request id (and the ``x-request-id`` header) in place of the internal
  details, which go to the log under that id (the loggers under
  ``langchain_qwen_fast.serving.service``). The OpenAPI document (``/openapi.json``,
  :mod:`.schema`) states each constraint the service enforces and each status it answers, so
  that clients generated from it agree with the service;
  ``tests/unit_tests/serving/test_api_schema.py`` fuzzes the service from it.
* Texts are grouped: at most ``groups_in_flight`` groups go to vLLM at once, and texts that
  arrive while all are busy go together as the next (up to ``max_group``), single texts and
  lists' alike. Many clients each sending one text get batch throughput; a lone text goes at
  once; a list of the default size goes as one group.
* ``GET /health`` (liveness: never calls vLLM), ``GET /ready`` (readiness: the set-up is done
  and a vLLM server answers, within a short timeout: :mod:`.readiness`), ``GET /metrics``
  (Prometheus: requests, latency, group sizes, errors: :mod:`.metrics`) and OpenAPI docs at
  ``/docs``. With an API key, ``/v1/classify`` and ``/metrics`` need ``Authorization: Bearer
  <key>``. Binds 127.0.0.1 unless told otherwise.
* ``workers`` > 1 (``qwen-fast api --workers N``): N processes serve the one port, each with
  its own classifier, grouping and line, for more requests a second than one process's HTTP
  work allows; ``/metrics`` sums them all (:mod:`.workers`).

In Python, :func:`serve_api` runs the service in the foreground and :func:`create_app` gives the
ASGI application (:mod:`.app`), both under one :class:`ServiceOptions`. Needs the ``api`` extra
(FastAPI, uvicorn, prometheus-client); importing this package needs none of it, and gives
:class:`ServiceOptions` without LangChain.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_qwen_fast._extras import lazy_exports
from langchain_qwen_fast.serving.service.auth import APIKey
from langchain_qwen_fast.serving.service.options import ServiceOptions

if TYPE_CHECKING:
    from langchain_qwen_fast.serving.service.app import ClassifyService, create_app
    from langchain_qwen_fast.serving.service.workers import serve_api

# Imported on first use: the application imports the classifier (LangChain), and
# ``qwen-fast api --help`` needs only the options.
__getattr__ = lazy_exports(
    __name__,
    {
        "ClassifyService": "langchain_qwen_fast.serving.service.app",
        "create_app": "langchain_qwen_fast.serving.service.app",
        "serve_api": "langchain_qwen_fast.serving.service.workers",
    },
)

__all__ = ["APIKey", "ClassifyService", "ServiceOptions", "create_app", "serve_api"]
