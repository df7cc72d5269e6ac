"""The CPU build's engine core forked, not spawned: the platform's choice of ``spawn`` is
overridden in the process that launches the engine core, and only there. A server whose
launcher dies stops its whole group, workers that defer SIGTERM included."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import ClassVar

import pytest

from langchain_qwen_fast.serving.process_group import LAUNCHER_PID_ENV
from langchain_qwen_fast.serving.vllm_cli import fork_engine_core, stop_when_orphaned

_METHOD = "VLLM_WORKER_MULTIPROC_METHOD"


class _CpuPlatformLike:
    """What vLLM's CPU platform does to the start method whenever it checks a config."""

    checked: ClassVar[list[object]] = []

    @classmethod
    def check_and_update_config(cls, vllm_config: object) -> None:
        cls.checked.append(vllm_config)
        os.environ[_METHOD] = "spawn"


def _in_a_child(check: object) -> int:
    """Run ``check`` (returning an exit code) in a forked child, so that the override and its
    fork hook never reach the test process; the child's exit code."""
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            code = check()  # type: ignore[operator]
        finally:
            os._exit(code)
    return os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1])


def test_the_launching_process_forks_and_the_engine_core_spawns_its_own() -> None:
    def check() -> int:
        fork_engine_core(_CpuPlatformLike)
        _CpuPlatformLike.check_and_update_config("config")
        if _CpuPlatformLike.checked != ["config"] or os.environ[_METHOD] != "fork":
            return 2  # the platform's own check must still run, and then the override
        engine_core = os.fork()
        if engine_core == 0:
            # A forked engine core starts the processes it needs as vLLM chooses, even when the
            # platform checks a config again there.
            first = os.environ[_METHOD]
            _CpuPlatformLike.check_and_update_config("again")
            os._exit(0 if first == "spawn" and os.environ[_METHOD] == "spawn" else 3)
        return os.waitstatus_to_exitcode(os.waitpid(engine_core, 0)[1])

    assert _in_a_child(check) == 0


def group_members(leader: int) -> list[int]:
    """The running processes (zombies left out) of ``leader``'s process group."""
    members = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                with open(f"/proc/{entry}/stat") as f:
                    fields = f.read().rsplit(")", 1)[1].split()
            except OSError:
                continue
            if int(fields[2]) == leader and fields[0] != "Z":
                members.append(int(entry))
    return members


#: The stand-in server's grace between SIGTERM and SIGKILL (vLLM's entry waits longer): short,
#: since both its processes ignore SIGTERM and the test waits out the whole of it.
_GRACE = 0.2
#: A stand-in server: watches its launcher as vLLM's entry does (unless argv[1] is "off"), then
#: starts a worker; both defer SIGTERM, as vLLM's engine core does while it is being built.
_SERVER = f"""
import signal, subprocess, sys, time
from langchain_qwen_fast.serving.vllm_cli import stop_when_orphaned
if sys.argv[1] == "on":
    assert stop_when_orphaned(poll=0.05, grace={_GRACE}) is not None
signal.signal(signal.SIGTERM, signal.SIG_IGN)
worker = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
print(worker.pid, flush=True)
time.sleep(120)
"""
#: A stand-in launcher: starts the server as the launcher does, says its id, and waits.
_LAUNCHER = """
import sys, time
from pathlib import Path
from langchain_qwen_fast.serving.process_group import spawn_in_own_group
server = spawn_in_own_group([sys.executable, "-c", sys.argv[1], sys.argv[2]], Path(sys.argv[3]))
print(server.pid, flush=True)
time.sleep(120)
"""


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc")
@pytest.mark.parametrize("watch", [True, False])
def test_an_orphaned_server_stops_its_whole_group(tmp_path: Path, watch: bool) -> None:
    log = tmp_path / "server.log"
    argv = [sys.executable, "-c", _LAUNCHER, _SERVER, "on" if watch else "off", str(log)]
    launcher = subprocess.Popen(argv, stdout=subprocess.PIPE)
    assert launcher.stdout is not None
    leader = int(launcher.stdout.readline())
    try:
        deadline = time.monotonic() + 30
        while not log.is_file() or not log.read_text().strip():
            assert time.monotonic() < deadline, "the stand-in server did not start its worker"
            time.sleep(0.05)
        assert len(group_members(leader)) == 2  # the server and its worker
        launcher.kill()  # nothing of the launcher runs after this
        launcher.wait(10)
        # Unwatched, it would run on: a moment (twice what a watched one takes to be
        # stopped: the poll, the stopper's start, the grace) shows that.
        deadline = time.monotonic() + (10 if watch else 2 * (0.05 + 0.1 + _GRACE))
        while group_members(leader) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert (not group_members(leader)) is watch
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(leader, signal.SIGKILL)


def test_a_process_the_launcher_did_not_start_watches_nothing(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(LAUNCHER_PID_ENV, raising=False)
    assert stop_when_orphaned() is None
