"""A server program in its own process group: its log's tail in errors, a start that fails or
times out, a stop that reaches the workers it started, a child that dies with the process that
started it, and who holds a port (stand-in programs; this process opens no socket)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ServerStartError
from langchain_qwen_fast.serving.process_group import (
    belongs_to,
    is_loopback,
    listeners,
    log_tail,
    port_not_held_by,
    spawn_in_own_group,
    stop_group,
    wait_until_answering,
)

SLEEPER = [sys.executable, "-c", "import time; time.sleep(120)"]
#: a stand-in server: listens on a free port (any address: there may be no loopback), says which
LISTENER = (
    "import socket, time\n"
    "s = socket.socket(); s.bind(('', 0)); s.listen()\n"
    "print(s.getsockname()[1], flush=True)\n"
    "time.sleep(120)\n"
)
linux_only = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG")


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def wait_for(condition: object, seconds: float) -> bool:
    """Poll ``condition()`` until true or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(0.05)
    return bool(condition())  # type: ignore[operator]


@pytest.fixture
def listener() -> Iterator[tuple[subprocess.Popen[bytes], int]]:
    """A stand-in server started in a group of its own, and its port."""
    process = subprocess.Popen([sys.executable, "-c", LISTENER], stdout=subprocess.PIPE, start_new_session=True)
    assert process.stdout is not None
    port = int(process.stdout.readline())
    yield process, port
    stop_group(process, 10)


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
            process, "http://127.0.0.1:1", name="vLLM server", log_path=log, started=time.monotonic(),
            timeout=60, interval=0.1,
        )  # fmt: skip
    assert "no such architecture" in str(info.value) and str(log) in str(info.value)
    assert "was taken" not in str(info.value)


def test_a_child_that_lost_its_port_says_so(tmp_path: Path) -> None:
    log = tmp_path / "server.log"
    said = "print('ERROR: [Errno 98] Address already in use'); raise SystemExit(1)"
    process = spawn_in_own_group([sys.executable, "-c", said], log)
    process.wait(30)
    with pytest.raises(ServerStartError, match="port 8123 was taken by another process") as info:
        wait_until_answering(
            process, "http://127.0.0.1:8123", name="vLLM server", log_path=log, started=time.monotonic(),
            timeout=60, interval=0.1,
        )  # fmt: skip
    assert "exited with code 1" in str(info.value) and "Errno 98" in str(info.value)


def test_a_program_that_never_answers_times_out(tmp_path: Path) -> None:
    log = tmp_path / "router.log"
    process = spawn_in_own_group(SLEEPER, log)
    try:
        with pytest.raises(ServerStartError, match=r"vllm-router not ready after 1 s \(nothing answered"):
            wait_until_answering(
                process, "http://127.0.0.1:1", name="vllm-router", log_path=log,
                started=time.monotonic() - 10, timeout=1, interval=0.1, health_path=None,
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


@linux_only
@pytest.mark.parametrize("die_with_parent", [True, False])
def test_a_child_dies_with_the_process_that_started_it(tmp_path: Path, die_with_parent: bool) -> None:
    # The launcher's parent is killed outright (as by the OOM killer or kill -9): nothing of its
    # own runs to stop the child, which is in a session of its own, out of reach of its group.
    launcher = (
        "import sys, time\n"
        "from pathlib import Path\n"
        "from langchain_qwen_fast.serving.process_group import spawn_in_own_group\n"
        f"child = spawn_in_own_group({SLEEPER!r}, Path(sys.argv[1]), die_with_parent={die_with_parent})\n"
        "print(child.pid, flush=True)\n"
        "time.sleep(120)\n"
    )
    parent = subprocess.Popen([sys.executable, "-c", launcher, str(tmp_path / "log")], stdout=subprocess.PIPE)
    assert parent.stdout is not None
    child = int(parent.stdout.readline())
    try:
        assert alive(child)
        assert os.getsid(child) == child  # its own session: Ctrl-C in a terminal reaches only the launcher
        parent.kill()
        parent.wait(10)
        # Without the parent-death signal it would run on (a moment's wait shows that much: with
        # it, the child is gone within a poll or two).
        assert wait_for(lambda: not alive(child), 10 if die_with_parent else 0.3) is die_with_parent
    finally:
        if alive(child):
            os.kill(child, signal.SIGKILL)


@linux_only
def test_who_holds_a_port(listener: tuple[subprocess.Popen[bytes], int], tmp_path: Path) -> None:
    server, port = listener
    assert listeners(port) == [server.pid]
    assert belongs_to(server.pid, server.pid) and not belongs_to(os.getpid(), server.pid)
    other = spawn_in_own_group(SLEEPER, tmp_path / "log")
    try:
        assert port_not_held_by(server, port) is None  # the port is this child's
        assert port_not_held_by(other, port) == (
            f"port {port} is held by pid {server.pid}, not by this child (pid {other.pid})"
        )
    finally:
        stop_group(other, 10)
    stop_group(server, 10)
    assert listeners(port) == []


@linux_only
def test_a_worker_of_the_child_holding_the_port_is_the_child(tmp_path: Path) -> None:
    # vLLM's API server may hand its socket to worker processes: they are the child's too.
    parent = f"import subprocess, sys, time; subprocess.Popen([sys.executable, '-c', {LISTENER!r}]); time.sleep(120)"
    leader = spawn_in_own_group([sys.executable, "-c", parent], tmp_path / "log")
    try:
        assert wait_for(lambda: (tmp_path / "log").read_text().strip(), 30)
        port = int((tmp_path / "log").read_text())
        (holder,) = listeners(port) or [None]
        assert holder is not None and holder != leader.pid and belongs_to(holder, leader.pid)
        assert port_not_held_by(leader, port) is None
    finally:
        stop_group(leader, 10)


def test_loopback_hosts() -> None:
    assert all(map(is_loopback, ["127.0.0.1", "::1", "localhost", "127.0.0.2"]))
    assert not any(map(is_loopback, ["0.0.0.0", "::", "10.1.2.3", "example.com"]))
