"""The job's safety rules against a canned vLLM (no network): outputs that cannot overwrite
their input, a restart that carries on only over the input its finished chunks were read from
(stdin too), errors of the servers that stop the job instead of becoming rows, input errors
that stop it when they are systematic or over ``max_error_rate``, and one run at a time."""

from __future__ import annotations

import csv
import io
import json
import os
import sys
import threading
from collections.abc import Callable
from pathlib import Path
from typing import Any

import httpx
import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.cli import classify as command
from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.jobs import job as job_module
from langchain_qwen_fast.jobs.job import (
    SYSTEMATIC_ROWS,
    ClassifyOptions,
    InfrastructureFailure,
    TooManyInputErrors,
    classify_table,
)
from langchain_qwen_fast.jobs.parts import LOCK, WorkFolder, atomic_write, work_folder
from langchain_qwen_fast.testing.samples import headlines
from tests.support import fake_vllm
from tests.support.cli import parse_command
from tests.support.fake_vllm import FakeVLLM, prompts_in

LABELS = ("World", "Sports", "Business", "Sci/Tech")
URL = "http://vllm.test/v1"


def classifier(transport: Any, **kwargs: Any) -> QwenClassifier:
    # No retries: an outage fails a request at once, as one past the retry deadline does.
    settings = {"max_retries": 0, "timeout": 5.0}
    return QwenClassifier(labels=list(LABELS), base_url=URL, http_transport=transport, **{**settings, **kwargs})


def options(source: Path | str, out: Path, **kwargs: Any) -> ClassifyOptions:
    settings: dict[str, Any] = {"labels": LABELS, "progress": False, "histogram": False, "chunk_rows": 25}
    return ClassifyOptions(str(source), str(out), **{**settings, **kwargs})


def write_csv(path: Path, texts: list[str]) -> Path:
    with path.open("w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(["id", "text"])
        writer.writerows([i, t] for i, t in enumerate(texts))
    return path


def read_csv(path: Path) -> list[dict[str, str]]:
    with path.open(newline="") as f:
        return list(csv.DictReader(f))


class Killed(BaseException):
    """Stands for the process being killed: nothing catches it on the way out."""


def failing_after(fake: FakeVLLM, prompts: int, fail: Callable[[httpx.Request], httpx.Response]) -> Any:
    """A transport that answers completions requests for ``prompts`` prompts, then every
    request with ``fail`` (an outage) until ``outage["on"]`` is set False."""
    outage = {"seen": 0, "on": True}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions"):
            outage["seen"] += prompts_in(request)
            if outage["seen"] > prompts and outage["on"]:
                return fail(request)
        return fake(request)

    return httpx.MockTransport(handler), outage


def refused_connection(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


# -- outputs that cannot overwrite the input ---------------------------------------------------
def test_review_out_may_be_neither_the_input_nor_the_output(tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", ["x"])
    out = tmp_path / "out.csv"
    review = {"review_below": 0.5}
    (tmp_path / "sub").mkdir()
    for given, message in [
        (str(source), "--review-out is the input file"),
        (str(tmp_path / "sub" / ".." / "in.csv"), "--review-out is the input file"),
        (str(out), "--review-out is the --out file"),
        (os.path.relpath(out), "--review-out is the --out file"),
    ]:
        with pytest.raises(ConfigurationError, match=message):
            options(source, out, review_out=given, **review).check()
    linked = tmp_path / "linked.csv"
    os.symlink(source, linked)
    hard = tmp_path / "hard.csv"
    os.link(source, hard)
    for other in (linked, hard):
        with pytest.raises(ConfigurationError, match="--review-out is the input file"):
            options(source, out, review_out=str(other), **review).check()
        with pytest.raises(ConfigurationError, match="--out is the input file"):
            options(source, other).check()
    options(source, out, review_out=str(tmp_path / "review.csv"), **review).check()  # a file of its own
    options("-", out, review_out=str(tmp_path / "review.csv"), **review).check()


def test_refused_paths_touch_nothing(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(30))
    before = source.read_bytes()
    with pytest.raises(ConfigurationError, match="--review-out is the input file"):
        classify_table(options(source, tmp_path / "out.csv", review_out=str(source), review_below=0.9),
                       classifier(fake.transport))  # fmt: skip
    assert source.read_bytes() == before and not fake.requests
    assert sorted(os.listdir(tmp_path)) == ["in.csv"]


# -- a restart carries on only over the same input ----------------------------------------------
def test_a_restart_over_another_input_is_refused_naming_the_first_differing_row(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = headlines(300)
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    transport, _ = failing_after(fake, 75, fake_vllm.status(503))
    with pytest.raises(InfrastructureFailure):
        classify_table(options(source, out, chunks_in_flight=1), classifier(transport))
    done = sum(chunk.rows for chunk in WorkFolder(out, "csv").chunks())
    assert 25 <= done < 300
    changed = list(texts)
    changed[17] += " (corrected)"
    write_csv(source, changed)
    with pytest.raises(ConfigurationError, match=r"in\.csv is not the input .* its row 18 \(line 19\) differs"):
        classify_table(options(source, out), classifier(fake.transport))
    write_csv(source, texts[: done - 1])
    with pytest.raises(ConfigurationError, match=f"has {done - 1} rows, fewer than the {done}"):
        classify_table(options(source, out), classifier(fake.transport))
    assert WorkFolder(out, "csv").chunks()  # refusing keeps what was done
    # Rows after the finished chunks may differ (and the file may move): those are read now.
    later = list(texts)
    later[done + 3] = "A row that was not read before"
    moved = write_csv(tmp_path / "moved.csv", later)
    report = classify_table(options(moved, out), classifier(fake.transport))
    assert report.resumed_rows == done
    assert [r["text"] for r in read_csv(out)] == later


def test_a_last_line_that_gains_a_line_break_is_the_same_row(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = headlines(120)
    source = tmp_path / "in.jsonl"
    lines = [json.dumps({"text": t}) for t in texts]
    source.write_text("\n".join(lines[:50]))  # no line break after the last row
    monkeypatch.setattr(job_module, "join_parts", _killed)
    out = tmp_path / "out.jsonl"
    with pytest.raises(Killed):
        classify_table(options(source, out, chunk_rows=50), classifier(_dying(fake.transport, 10**6)))
    assert sum(chunk.rows for chunk in WorkFolder(out, "jsonl").chunks()) == 50
    monkeypatch.undo()
    source.write_text("\n".join(lines) + "\n")  # appended to
    report = classify_table(options(source, out), classifier(fake.transport))
    assert report.resumed_rows == 50 and report.rows == 120


def _dying(transport: httpx.MockTransport, completions: int) -> httpx.MockTransport:
    seen = {"n": 0}

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions"):
            seen["n"] += 1
            if seen["n"] > completions:
                raise Killed
        return transport.handle_request(request)

    return httpx.MockTransport(handler)


def stdin_of(monkeypatch: pytest.MonkeyPatch, data: bytes) -> None:
    monkeypatch.setattr(sys, "stdin", io.TextIOWrapper(io.BytesIO(data)))


def test_a_restart_from_stdin_with_another_stream_is_refused(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    texts = headlines(200)
    stream = "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(texts)).encode()
    out = tmp_path / "out.csv"
    given = {"input_format": "jsonl", "chunks_in_flight": 1}
    stdin_of(monkeypatch, stream)
    transport, _ = failing_after(fake, 62, fake_vllm.reset())
    with pytest.raises(InfrastructureFailure):
        classify_table(options("-", out, **given), classifier(transport))
    done = sum(chunk.rows for chunk in WorkFolder(out, "csv").chunks())
    assert done >= 25
    other = list(texts)
    other[done - 1] = "another stream's row"
    stdin_of(monkeypatch, "".join(json.dumps({"text": t, "n": i}) + "\n" for i, t in enumerate(other)).encode())
    with pytest.raises(ConfigurationError, match=rf"stdin is not the input .* its row {done} \(line {done}\) differs"):
        classify_table(options("-", out, **given), classifier(fake.transport))
    stdin_of(monkeypatch, stream)
    report = classify_table(options("-", out, **given), classifier(fake.transport))
    assert report.resumed_rows == done and report.errors == 0
    assert [r["n"] for r in read_csv(out)] == [str(i) for i in range(200)]


def test_a_restart_over_other_parquet_values_is_refused(fake: FakeVLLM, tmp_path: Path) -> None:
    import pyarrow as pa
    import pyarrow.parquet as pq

    texts = headlines(100)
    rows = [{"id": i, "score": i / 3, "text": t} for i, t in enumerate(texts)]
    source = tmp_path / "in.parquet"
    pq.write_table(pa.Table.from_pylist(rows), source)
    out = tmp_path / "out.parquet"
    transport, _ = failing_after(fake, 50, fake_vllm.status(502))
    with pytest.raises(InfrastructureFailure):
        classify_table(options(source, out, chunks_in_flight=1), classifier(transport))
    assert WorkFolder(out, "parquet").chunks()
    rows[3]["score"] = 7.0  # another number, the text the same
    pq.write_table(pa.Table.from_pylist(rows), source)
    with pytest.raises(ConfigurationError, match=r"its row 4 \(row 4\) differs"):
        classify_table(options(source, out), classifier(fake.transport))


# -- errors of the servers stop the job; a re-run carries on -----------------------------------
OUTAGES = {
    "503": fake_vllm.status(503),
    "429": fake_vllm.status(429, {"Retry-After": "0"}),
    "500": fake_vllm.status(500),
    "401 after set-up": fake_vllm.status(401),
    "reset": fake_vllm.reset(),
    "timeout": fake_vllm.timeout(),
    "refused": refused_connection,
    "unreadable reply": fake_vllm.raw(b'{"choices": [{"index": 0, '),
}


@pytest.mark.parametrize("outage", list(OUTAGES))
def test_errors_of_the_servers_stop_the_job_and_a_rerun_has_every_row_once_without_errors(
    fake: FakeVLLM, tmp_path: Path, outage: str
) -> None:
    texts = headlines(240)
    texts[30] = ""  # an input error: it stays, in its place
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    whole = tmp_path / "whole.csv"
    classify_table(options(source, whole), classifier(fake.transport))
    transport, state = failing_after(fake, 75, OUTAGES[outage])
    with pytest.raises(InfrastructureFailure, match="not of the row") as stopped:
        classify_table(options(source, out, chunks_in_flight=2), classifier(transport))
    assert stopped.value.exit_code == 3 and "Run the same command again" in str(stopped.value)
    assert not out.exists()
    chunks = WorkFolder(out, "csv").chunks()
    assert chunks, "the chunks finished before the outage are kept"
    written = [row for chunk in chunks for row in read_csv_part(chunk.part_path)]
    assert all(not row[-1] or "InvalidInputError" in row[-1] for row in written)  # no row holds the outage
    state["on"] = False  # the outage is over
    report = classify_table(options(source, out, chunks_in_flight=2), classifier(transport))
    assert report.resumed_rows == sum(chunk.rows for chunk in chunks) and report.rows == 240
    assert read_csv(out) == read_csv(whole)
    assert report.errors == 1 and report.error_kinds == {"InvalidInputError": 1}


def read_csv_part(path: Path) -> list[list[str]]:
    with path.open(newline="") as f:
        return list(csv.reader(f))


def test_a_failed_set_up_stops_the_job_with_nothing_written(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(40))
    out = tmp_path / "out.csv"
    fake.fail("/v1/models", fake_vllm.status(503))
    with pytest.raises(InfrastructureFailure, match=r"the set-up with the server failed \(ServerStatusError.*503"):
        classify_table(options(source, out), classifier(fake.transport))
    assert not fake.calls("/completions")
    assert sorted(os.listdir(tmp_path)) == ["in.csv"]  # no output, no work folder
    down = FakeVLLM(down_hosts={"vllm.test"})
    with pytest.raises(InfrastructureFailure, match="no row was written"):
        classify_table(options(source, out), classifier(down.transport))


def test_a_job_with_nothing_left_needs_no_server(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(50))
    out = tmp_path / "out.csv"
    with monkeypatch.context() as patched:
        patched.setattr(job_module, "join_parts", _killed)
        with pytest.raises(Killed):
            classify_table(options(source, out, chunk_rows=50), classifier(fake.transport))
    down = FakeVLLM(down_hosts={"vllm.test"})
    report = classify_table(options(source, out, chunk_rows=50), classifier(down.transport))
    assert report.resumed_rows == 50 and report.classified_rows == 0 and not down.requests


def _killed(*args: Any) -> Any:
    """A job's end, killed as the parts are joined into the output."""
    raise Killed


def test_a_row_the_server_refuses_for_its_content_keeps_its_error(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = headlines(60)
    texts[12] = "POISON " + texts[12]  # the canned server answers 400 to any request holding it
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    report = classify_table(options(source, out), classifier(fake.transport))
    rows = read_csv(out)
    assert rows[12]["error"].startswith("ServerStatusError") and "400" in rows[12]["error"]
    assert all(r["label"] in LABELS for i, r in enumerate(rows) if i != 12)
    assert report.errors == 1


# -- input errors: systematic, or over max_error_rate ------------------------------------------
@pytest.mark.parametrize(("source_kind", "out_kind"), [("jsonl", "csv"), ("jsonl", "jsonl"), ("parquet", "csv"),
                                                      ("csv", "parquet")])  # fmt: skip
def test_a_misspelt_text_column_is_refused_naming_the_columns(
    fake: FakeVLLM, tmp_path: Path, source_kind: str, out_kind: str
) -> None:
    rows = [{"id": i, "body": t} for i, t in enumerate(headlines(30))]
    source = tmp_path / f"in.{source_kind}"
    if source_kind == "jsonl":
        source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    elif source_kind == "csv":
        source.write_text("id,body\n" + "".join(f"{r['id']},{r['body']}\n" for r in rows))
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq

        pq.write_table(pa.Table.from_pylist(rows), source)
    out = tmp_path / f"out.{out_kind}"
    with pytest.raises(DataFileError, match=r"has no 'txt' (column|key) .*\['id', 'body'\]"):
        classify_table(options(source, out, text_column="txt"), classifier(fake.transport))
    assert not fake.calls("/completions") and not out.exists() and not work_folder(out).exists()


def test_a_systematic_error_stops_the_job_before_writing_the_chunk(
    fake: FakeVLLM, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # From stdin, past the rows scanned for keys, a missing text key is found row by row.
    lines = [json.dumps({"body": t}) for t in headlines(1100)]
    out = tmp_path / "out.csv"
    stdin_of(monkeypatch, ("\n".join(lines) + "\n").encode())
    with pytest.raises(TooManyInputErrors, match=r"all 25 rows from row 1 failed alike \(row 1 \(line 1\): "
                       r"DataFileError: line 1 has no 'text' key") as stopped:  # fmt: skip
        classify_table(options("-", out, input_format="jsonl"), classifier(fake.transport))
    assert stopped.value.exit_code == 4 and "no row was written" in str(stopped.value)
    assert not work_folder(out).exists() and not out.exists()
    # With another column given, the same output starts over: nothing was kept to refuse it.
    stdin_of(monkeypatch, ("\n".join(lines) + "\n").encode())
    report = classify_table(options("-", out, input_format="jsonl", text_column="body"), classifier(fake.transport))
    assert report.rows == 1100 and report.errors == 0


def test_every_row_failing_alike_at_the_server_is_systematic(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", [f"POISON {t}" for t in headlines(40)])
    out = tmp_path / "out.csv"
    with pytest.raises(TooManyInputErrors, match="ServerStatusError"):
        classify_table(options(source, out), classifier(fake.transport))
    report = classify_table(options(source, out, max_error_rate=1.0), classifier(fake.transport))
    assert report.errors == 40 == report.rows


def test_a_few_rows_failing_alike_are_not_systematic(fake: FakeVLLM, tmp_path: Path) -> None:
    texts = [*headlines(50), *[""] * (SYSTEMATIC_ROWS - 1)]  # the last chunk: only empty rows
    source = write_csv(tmp_path / "in.csv", texts)
    report = classify_table(options(source, tmp_path / "out.csv"), classifier(fake.transport))
    assert report.errors == SYSTEMATIC_ROWS - 1 and report.rows == len(texts)


def test_max_error_rate_stops_over_the_rows_read_so_far_and_a_higher_one_carries_on(
    fake: FakeVLLM, tmp_path: Path
) -> None:
    texts = headlines(150)
    for i in range(50, 60):  # 10 empty rows in the third chunk of 25
        texts[i] = ""
    source = write_csv(tmp_path / "in.csv", texts)
    out = tmp_path / "out.csv"
    given = {"chunks_in_flight": 1}
    with pytest.raises(TooManyInputErrors, match=r"10 of the 75 rows read have input errors \(13\.3%\), over "
                       r"--max-error-rate 0\.1") as stopped:  # fmt: skip
        classify_table(options(source, out, max_error_rate=0.1, **given), classifier(fake.transport))
    assert "the 50 rows finished before are kept" in str(stopped.value)
    assert sum(chunk.rows for chunk in WorkFolder(out, "csv").chunks()) == 50
    # the rate counts the rows resumed too: 10 of 75 is under 0.15 (10 of this run's 25 is not)
    report = classify_table(options(source, out, max_error_rate=0.15, **given), classifier(fake.transport))
    assert report.resumed_rows == 50 and report.errors == 10 and report.rows == 150
    with pytest.raises(TooManyInputErrors, match=r"--max-error-rate 0\.0 \(the first in the chunk from row 51: row 51"):
        classify_table(options(source, tmp_path / "zero.csv", max_error_rate=0.0, chunk_rows=25),
                       classifier(fake.transport))  # fmt: skip
    with pytest.raises(ConfigurationError, match=r"--max-error-rate must be within \[0, 1\]"):
        options(source, out, max_error_rate=1.5).check()


# -- one run at a time ---------------------------------------------------------------------------
def test_a_second_run_on_the_same_output_refuses_at_once_naming_the_folder(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(60))
    out = tmp_path / "out.csv"
    other = WorkFolder(out, "csv")
    other.lock()  # another run holds it (a lock of another open file, as another process's)
    (other.path / f".tmp-{os.getpid() + 1}-0000-000000000000.csv").write_text("the other run's half chunk")
    try:
        with pytest.raises(ConfigurationError, match=rf"{work_folder(out)} is in use by another .* \(process "):
            classify_table(options(source, out), classifier(fake.transport))
        assert not fake.requests and len(list(other.path.iterdir())) == 2  # its files untouched
    finally:
        other.release()
    assert not other.path.exists()  # it held no finished chunk
    report = classify_table(options(source, out), classifier(fake.transport))
    assert report.rows == 60 and not work_folder(out).exists()


def test_a_run_holds_the_lock_for_its_life(fake: FakeVLLM, tmp_path: Path) -> None:
    source = write_csv(tmp_path / "in.csv", headlines(100))
    out = tmp_path / "out.csv"
    seen: list[str] = []
    gate = threading.Event()

    def handler(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions") and not gate.is_set():
            gate.set()
            try:
                WorkFolder(out, "csv").lock()
            except ConfigurationError as exc:
                seen.append(str(exc))
        return fake(request)

    classify_table(options(source, out), classifier(httpx.MockTransport(handler)))
    assert len(seen) == 1 and "is in use by another qwen-fast classify run" in seen[0]
    assert not work_folder(out).exists()


def test_the_lock_outlives_a_fresh_start_and_a_removed_folder(tmp_path: Path) -> None:
    folder = WorkFolder(tmp_path / "out.csv", "csv")
    folder.lock()
    folder.start({"labels": ["A"]}, ["text"])  # --fresh and a first start clear all but the lock
    assert (folder.path / LOCK).exists()
    with pytest.raises(ConfigurationError, match="in use"):
        WorkFolder(tmp_path / "out.csv", "csv").lock()
    folder.remove()  # the end of a job: the lock file goes last
    again = WorkFolder(tmp_path / "out.csv", "csv")
    again.lock()  # a run starting after the end locks a folder of its own
    folder.release()
    with pytest.raises(ConfigurationError, match="in use"):
        WorkFolder(tmp_path / "out.csv", "csv").lock()
    again.release()


def test_temporary_files_are_named_by_their_run_and_never_left_by_a_failed_write(tmp_path: Path) -> None:
    target = tmp_path / "out.csv"

    def broken(path: Path) -> None:
        path.write_text("half")
        raise OSError("disk full")

    with pytest.raises(OSError, match="disk full"):
        atomic_write(target, broken)
    assert list(tmp_path.iterdir()) == []
    names: list[str] = []

    def whole(path: Path) -> None:
        names.append(path.name)
        path.write_text("whole")

    atomic_write(target, whole)
    assert names[0].startswith(f".tmp-{os.getpid()}-") and target.read_text() == "whole"


# -- the command's exit codes --------------------------------------------------------------------
@pytest.mark.parametrize(("stop", "code"), [(InfrastructureFailure, 3), (TooManyInputErrors, 4)])
def test_the_command_exits_with_the_stop_s_code_and_names_its_cause(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], stop: type[Exception], code: int
) -> None:
    def stopped(options: ClassifyOptions) -> Any:
        raise stop("stopped: row 7 (line 8) got ServerStatusError: 503")

    monkeypatch.setattr(job_module, "classify_table", stopped)
    args = parse_command(command, ["in.csv", "--out", "o.csv", "--labels", "A,B", "--max-error-rate", "0.2"])
    assert command.classify_options(args).max_error_rate == 0.2
    assert command.run(args) == code
    assert "qwen-fast classify: stopped: row 7 (line 8) got ServerStatusError: 503" in capsys.readouterr().err
