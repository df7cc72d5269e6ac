"""``qwen-fast classify`` stopped by Ctrl-C (SIGINT) or SIGTERM against the real vLLM server, run
as a command: once a chunk is committed the signal comes (SIGINT to the job's process group, as
Ctrl-C in a terminal sends it; SIGTERM to the job's process, as ``kill`` sends it, or to its
group, as a service manager may); the command prints one line, the rows
saved and the command that carries on, with no traceback, exits 130 or 143 and leaves no process
behind; the same command run again finishes with the output an uninterrupted run writes.

The job is held mid-way whatever the machine's speed: the fault proxy lets the replies of the
first few chunks' prompts through and holds every later one until the job has stopped, so the
signal always finds it with rows committed and rows still to classify.
"""

from __future__ import annotations

import csv
import os
import re
import shlex
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.jobs.parts import saved_rows, work_folder
from langchain_qwen_fast.testing.samples import news_items
from tests.integration_tests.conftest import NEWS_LABELS, ROOT
from tests.support.fake_vllm import prompts_of
from tests.support.proxy import FaultProxy

COMMAND = [sys.executable, "-m", "langchain_qwen_fast.cli", "classify"]
ROWS = 200
CHUNK_ROWS = 10
#: The prompts whose replies pass before the proxy holds the rest: a few chunks' worth, far
#: fewer than the job's (one prompt a row).
PASSED_PROMPTS = 3 * CHUNK_ROWS
#: Generous bounds on waits that only end a test which would otherwise hang.
WAIT_SECONDS = 120


class Gate:
    """A proxy's ``rewrite_all`` that passes the completions replies of the first ``prompts``
    prompts and holds each later one until :meth:`open` (or ``WAIT_SECONDS``)."""

    def __init__(self, prompts: int) -> None:
        self.left = prompts
        self.held = 0
        self._opened = threading.Event()
        self._lock = threading.Lock()

    def __call__(self, body: Any, reply: dict[str, Any]) -> dict[str, Any]:
        if isinstance(body, dict) and "prompt" in body:
            with self._lock:
                self.left -= len(prompts_of(body["prompt"])[0])
                held = self.left < 0
                self.held += held
            if held:
                self._opened.wait(WAIT_SECONDS)
        return reply

    def open(self) -> None:
        self._opened.set()


def saved_classifier(path: Path, base_url: str) -> Path:
    """A classifier on ``base_url`` whose timeout outlasts the replies held, saved for ``--classifier``."""
    return QwenClassifier(labels=NEWS_LABELS, base_url=base_url, timeout=WAIT_SECONDS).save(path)


def write_csv(path: Path, texts: list[str]) -> Path:
    with path.open("w", newline="") as f:
        csv.writer(f).writerows([["id", "text"], *[[str(i), t] for i, t in enumerate(texts)]])
    return path


def table(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


def committed_parts(out: Path) -> list[Path]:
    """The committed part files (a part being written has a temporary name, ``.tmp-…``)."""
    return sorted(work_folder(out).glob("0*.csv"))


def processes_of(out: Path) -> list[str]:
    """The processes whose command line names ``out``: the job's and its table process (a fork
    of it, with its command line)."""
    found = []
    for entry in Path("/proc").iterdir():
        try:
            if entry.name.isdigit() and str(out).encode() in (entry / "cmdline").read_bytes():
                found.append(entry.name)
        except OSError:  # it ended meanwhile
            continue
    return found


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return news_items(ROWS, 76_000)


@pytest.fixture(scope="module")
def whole(server_url: str, texts: list[str], tmp_path_factory: pytest.TempPathFactory) -> list[dict[str, str]]:
    """The output of an uninterrupted run of the job."""
    folder = tmp_path_factory.mktemp("whole")
    source = write_csv(folder / "in.csv", texts)
    out = folder / "out.csv"
    classifier = saved_classifier(folder / "classifier.json", server_url)
    done = subprocess.run(
        [*COMMAND, str(source), "--out", str(out), "--classifier", str(classifier), "--chunk-rows", str(CHUNK_ROWS),
         "--chunks-in-flight", "1", "--no-progress"],
        cwd=ROOT, capture_output=True, text=True, timeout=WAIT_SECONDS * 2,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr[-3000:]
    return table(out)


@pytest.mark.parametrize(
    ("signum", "code", "progress", "group"),
    [(signal.SIGINT, 130, True, True), (signal.SIGTERM, 143, False, False), (signal.SIGTERM, 143, False, True)],
    ids=["SIGINT-group", "SIGTERM", "SIGTERM-group"],
)
def test_a_stop_signal_keeps_what_is_committed_and_the_same_command_finishes_the_job(
    proxy: FaultProxy,
    tmp_path: Path,
    texts: list[str],
    whole: list[dict[str, str]],
    signum: signal.Signals,
    code: int,
    progress: bool,
    group: bool,
) -> None:
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    classifier = saved_classifier(tmp_path / "classifier.json", proxy.base_url)
    words = ["classify", str(source), "--out", str(out), "--classifier", str(classifier), "--chunk-rows",
             str(CHUNK_ROWS), "--chunks-in-flight", "1", *([] if progress else ["--no-progress"])]  # fmt: skip
    gate = Gate(PASSED_PROMPTS)
    proxy.rewrite_all = gate
    job = subprocess.Popen([*COMMAND, *words[1:]], cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                           start_new_session=True)  # fmt: skip
    try:
        deadline = time.monotonic() + WAIT_SECONDS
        while not committed_parts(out) and job.poll() is None and time.monotonic() < deadline:
            time.sleep(0.02)
        assert committed_parts(out) and job.poll() is None, "the job ended before a chunk was committed"
        if group:  # the table process gets it too
            os.killpg(job.pid, signum)
        else:
            job.send_signal(signum)
        _, raw = job.communicate(timeout=WAIT_SECONDS)
    finally:
        if job.poll() is None:
            job.kill()
        gate.open()
        proxy.rewrite_all = None
    stderr = raw.decode()
    assert job.returncode == code, stderr[-3000:]
    assert "Traceback" not in stderr
    assert not processes_of(out)  # the table process ended with the job
    folder = work_folder(out)
    saved = saved_rows(folder)
    parts = sum(1 for part in committed_parts(out) for _ in csv.reader(part.open(newline="")))
    assert 0 < saved == parts < ROWS and not out.exists()
    line = (
        f"qwen-fast classify: stopped by {signum.name}: {saved} rows are saved in {folder}; "
        f"the same command carries on from there: qwen-fast {shlex.join(words)}"
    )
    if progress:  # the bar's last count is the rows saved, then the line
        bar, said = stderr.rstrip("\n").rsplit("\n", 1)
        assert said == line
        assert re.findall(rf"(\d+)/{ROWS}\b", bar)[-1] == str(saved)
    else:
        assert stderr == line + "\n"

    again = subprocess.run([*COMMAND, *words[1:]], cwd=ROOT, capture_output=True, text=True, timeout=WAIT_SECONDS * 2)
    assert again.returncode == 0, again.stderr[-3000:]
    assert f"({saved} done by an earlier run" in again.stdout
    rows = table(out)
    assert [(r["id"], r["text"], r["label"], r["error"]) for r in rows] == [
        (r["id"], r["text"], r["label"], r["error"]) for r in whole
    ]
    for label in NEWS_LABELS:
        assert max(abs(float(a[f"p_{label}"]) - float(b[f"p_{label}"])) for a, b in zip(rows, whole)) < 1e-3
    assert not folder.exists()
