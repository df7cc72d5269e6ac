"""The service's Prometheus metrics (``GET /metrics``): requests by kind and status, their
latency, the size of the groups sent to vLLM, and the items answered with an error. With
several worker processes each writes its counts to prometheus-client's folder and the page sums
them all."""

from __future__ import annotations

import os
from typing import Any

#: prometheus-client's own variable: where worker processes write their metrics to be summed.
METRICS_DIR = "PROMETHEUS_MULTIPROC_DIR"

_LATENCY_BUCKETS = (0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0)
_GROUP_BUCKETS = (1, 2, 4, 8, 16, 32, 64, 128, 256, 512, 1024)


class ServiceMetrics:
    """One service's metrics, in a registry of its own (several services in one process, as in
    tests, count apart). Needs prometheus-client (the ``api`` extra)."""

    def __init__(self) -> None:
        from prometheus_client import CollectorRegistry, Counter, Histogram
        from prometheus_client.multiprocess import MultiProcessCollector

        registry = CollectorRegistry()
        self._requests = Counter(
            "qwen_fast_requests", "HTTP requests to /v1/classify", ["kind", "status"], registry=registry
        )
        latency = Histogram(
            "qwen_fast_request_seconds",
            "Latency of /v1/classify",
            ["kind"],
            buckets=_LATENCY_BUCKETS,
            registry=registry,
        )
        self._groups = Histogram(
            "qwen_fast_group_size", "Texts per grouped vLLM call", buckets=_GROUP_BUCKETS, registry=registry
        )
        self._item_errors = Counter(
            "qwen_fast_item_errors", "Items answered with an error", ["type"], registry=registry
        )
        self._latencies = {kind: latency.labels(kind) for kind in ("single", "list")}
        self._counts: dict[tuple[str, int], Any] = {}
        self._scraped = registry
        if os.environ.get(METRICS_DIR):  # one of several workers: each writes its counts there
            self._scraped = CollectorRegistry()
            MultiProcessCollector(self._scraped)

    def answered(self, kind: str, status: int, seconds: float | None = None) -> None:
        """A request of ``kind`` (single, list or invalid) answered ``status``, in ``seconds``."""
        counter = self._counts.get((kind, status))
        if counter is None:  # each label set looked up once
            counter = self._counts[kind, status] = self._requests.labels(kind, str(status))
        counter.inc()
        if seconds is not None:
            self._latencies[kind].observe(seconds)

    def refused(self, status: int) -> None:
        """A request refused before it was read or parsed (413, 408, 422)."""
        self.answered("invalid", status)

    def grouped(self, size: int) -> None:
        """A group of ``size`` texts went to vLLM."""
        self._groups.observe(size)

    def item_failed(self, exc: BaseException) -> None:
        """An item was answered with ``exc``."""
        self._item_errors.labels(type(exc).__name__).inc()

    def page(self) -> tuple[bytes, str]:
        """The metrics in the Prometheus text format, and its content type."""
        from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

        return generate_latest(self._scraped), CONTENT_TYPE_LATEST


__all__ = ["METRICS_DIR", "ServiceMetrics"]
