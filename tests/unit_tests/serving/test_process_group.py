"""A server program in its own process group: its log's tail in errors, a start that fails or
times out, and a stop that reaches the workers it started (stand-in programs, no sockets)."""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ServerStartError
from langchain_qwen_fast.serving.process_group import log_tail, spawn_in_own_group, stop_group, wait_until_answering


def test_the_log_tail_is_its_last_lines(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    log.write_text("".join(f"line {n}\n" for n in range(100)))
    assert log_tail(log, 3) == "line 97\nline 98\nline 99"
    assert log_tail(tmp_path / "none.log") == "(no log)"


def test_a_program_that_exits_early_is_an_error_with_its_log(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    process = spawn_in_own_group([sys.executable, "-c", "print('no such architecture'); raise SystemExit(3)"], log)
    process.wait(30)
    with pytest.raises(ServerStartError, match="exited with code 3") as info:
        wait_until_answering(
            process, "http://127.0.0.1:1/health", name="vLLM server", log_path=log, started=time.monotonic(),
            timeout=60, interval=0.1,
        )  # fmt: skip
    assert "no such architecture" in str(info.value) and str(log) in str(info.value)


def test_a_program_that_never_answers_times_out(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    process = spawn_in_own_group([sys.executable, "-c", "import time; time.sleep(300)"], log)
    try:
        with pytest.raises(ServerStartError, match="vllm-router not healthy after 1 s"):
            wait_until_answering(
                process, "http://127.0.0.1:1/v1/models", name="vllm-router", log_path=log,
                started=time.monotonic() - 10, timeout=1, interval=0.1,
            )  # fmt: skip
    finally:
        stop_group(process, 10)


def test_stop_reaches_every_process_of_the_group(tmp_path: Path) -> None:
    child = "import time; time.sleep(300)"
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {child!r}]); time.sleep(300)"
    process = spawn_in_own_group([sys.executable, "-c", parent], tmp_path / "log", dict(os.environ))
    os.killpg(process.pid, 0)  # the group is there
    stop_group(process, 10)
    assert process.returncode is not None
    with pytest.raises(ProcessLookupError):  # and nothing of it is left, the child included
        os.killpg(process.pid, 0)
