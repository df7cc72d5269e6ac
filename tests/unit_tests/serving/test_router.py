"""vLLM's router's command line (no router is started)."""

from __future__ import annotations

import pytest

from langchain_qwen_fast.serving.router import Router


def test_a_router_takes_its_own_metrics_port() -> None:
    # vllm-router's Prometheus exporter defaults to port 29000: a second router would not start.
    first, second = Router(["http://127.0.0.1:8000/v1"], port=9000), Router(["http://127.0.0.1:8001"], port=9002)
    ports = [r.command()[r.command().index("--prometheus-port") + 1] for r in (first, second)]
    assert ports == ["9001", "9003"]
    assert first.command()[first.command().index("--worker-urls") + 1] == "http://127.0.0.1:8000"
    with pytest.raises(ValueError, match="at least two"):
        Router(["http://127.0.0.1:8000"], "power_of_two", port=9000)
