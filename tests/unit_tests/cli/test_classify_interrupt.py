"""``qwen-fast classify`` stopped by Ctrl-C (SIGINT) or SIGTERM, against a canned vLLM (no
network): one line on stderr with the rows saved and the command that carries on, exit 130 or
143, the SIGTERM handler before it back; the same command then finishes the job."""

from __future__ import annotations

import csv
import os
import shlex
import signal
import sys
from pathlib import Path
from types import FrameType
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.cli import classify as command
from langchain_qwen_fast.jobs import job as job_module
from langchain_qwen_fast.jobs.job import ClassifyOptions
from langchain_qwen_fast.jobs.parts import WorkFolder, saved_rows, work_folder
from langchain_qwen_fast.testing.samples import headlines
from tests.support.cli import parse_command
from tests.support.fake_vllm import FakeVLLM, prompts_in

LABELS = ("World", "Sports", "Business", "Sci/Tech")
URL = "http://vllm.test/v1"
#: the job itself, which the tests give a classifier on a canned transport
CLASSIFY_TABLE = job_module.classify_table


def write_csv(path: Path, texts: list[str]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows([i, t] for i, t in enumerate(texts))
    return path


def signalling_after(fake: FakeVLLM, prompts: int, signum: int) -> httpx.MockTransport:
    """A transport that sends this process ``signum`` at the first completions request past
    ``prompts`` prompts, then answers it."""
    seen = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions"):
            before = seen["n"]
            seen["n"] += prompts_in(request)
            if before <= prompts < seen["n"]:
                os.kill(os.getpid(), signum)
        return fake(request)

    return httpx.MockTransport(handler)


def on_transport(monkeypatch: pytest.MonkeyPatch, transport: httpx.MockTransport) -> None:
    """The command's job classifies through ``transport`` (the classifier its options name)."""

    def classify_table(options: ClassifyOptions) -> Any:
        return CLASSIFY_TABLE(
            options, QwenClassifier(labels=list(options.labels or ()), base_url=URL, http_transport=transport)
        )

    monkeypatch.setattr(job_module, "classify_table", classify_table)


@pytest.mark.parametrize(("signum", "code"), [(signal.SIGINT, 130), (signal.SIGTERM, 143)], ids=["SIGINT", "SIGTERM"])
def test_a_stop_signal_prints_one_line_with_the_rows_saved_and_the_command_then_the_command_finishes(
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    signum: signal.Signals,
    code: int,
) -> None:
    fake = FakeVLLM()
    source = write_csv(tmp_path / "in.csv", headlines(300))
    out = tmp_path / "out.csv"
    words = ["classify", str(source), "--out", str(out), "--labels", ",".join(LABELS), "--chunk-rows", "25",
             "--chunks-in-flight", "2", "--no-progress", "--no-histogram"]  # fmt: skip
    monkeypatch.setattr(sys, "argv", ["/somewhere/bin/qwen-fast", *words])
    args = parse_command(command, words[1:])

    whole = tmp_path / "whole.csv"
    on_transport(monkeypatch, fake.transport)
    assert command.run(parse_command(command, [str(source), "--out", str(whole), *words[4:]])) == 0
    capsys.readouterr()

    def before(signum: int, frame: FrameType | None) -> None:
        raise AssertionError("the handler before the command's is not called while the command runs")

    previous = signal.signal(signal.SIGTERM, before)
    try:
        on_transport(monkeypatch, signalling_after(fake, 110, signum))
        assert command.run(args) == code
        assert signal.getsignal(signal.SIGTERM) is before  # the command's handler is gone
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, previous)
    err = capsys.readouterr().err
    folder = work_folder(out)
    saved = saved_rows(folder)
    # a row past the 110th asked: its chunk (from row 100) began once the commit of the chunk two
    # before it (rows 50 to 74) was sent, which the stop waited for
    assert 75 <= saved < 300 and saved % 25 == 0
    assert err == (
        f"qwen-fast classify: stopped by {signum.name}: {saved} rows are saved in {folder}; "
        f"the same command carries on from there: qwen-fast {shlex.join(words)}\n"
    )
    lock = WorkFolder(out, "csv")  # the job let go of its lock
    lock.lock()
    lock.release()

    on_transport(monkeypatch, fake.transport)
    assert command.run(args) == 0
    assert f"({saved} done by an earlier run" in capsys.readouterr().out
    assert out.read_text() == whole.read_text() and not folder.exists()


def test_an_interrupt_before_the_job_begins_says_what_the_folder_holds(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    def interrupted(options: ClassifyOptions) -> Any:
        raise KeyboardInterrupt

    monkeypatch.setattr(job_module, "classify_table", interrupted)
    monkeypatch.setattr(sys, "argv", ["qwen-fast", "classify", "in put.csv", "--out", "o.csv", "--labels", "A,B"])
    args = parse_command(command, sys.argv[2:])
    assert command.run(args) == 130
    assert capsys.readouterr().err == (
        "qwen-fast classify: stopped by SIGINT: no row is saved; the same command starts it again: "
        "qwen-fast classify 'in put.csv' --out o.csv --labels A,B\n"
    )
