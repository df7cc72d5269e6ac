"""A server program (vLLM, the router) as a child process in its own process group: started
with its output in a log file, waited for until its URL answers, stopped with every process in
its group. One home for these rules, shared by :class:`~langchain_qwen_fast.serving.VLLMServer`
and :class:`~langchain_qwen_fast.serving.Router`."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path

from langchain_qwen_fast.errors import ServerStartError


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def spawn_in_own_group(
    command: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None
) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output appended to ``log_path``, in a process group of its own
    so that :func:`stop_group` also reaches the workers it starts."""
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=None if env is None else dict(env),
            start_new_session=True,
        )


def wait_until_answering(
    process: subprocess.Popen[bytes],
    url: str,
    *,
    name: str,
    log_path: Path,
    started: float,
    timeout: float,
    interval: float,
) -> None:
    """Poll ``url`` until it answers 200; raise :class:`ServerStartError` with the log's tail if
    the process exits first or ``timeout`` seconds pass after ``started`` (``time.monotonic``)."""
    while True:
        code = process.poll()
        if code is not None:
            raise ServerStartError(
                f"{name} exited with code {code} before it was healthy (log {log_path}):\n{log_tail(log_path)}"
            )
        if time.monotonic() - started > timeout:
            raise ServerStartError(f"{name} not healthy after {timeout:.0f} s (log {log_path}):\n{log_tail(log_path)}")
        with (
            contextlib.suppress(OSError, urllib.error.URLError),
            urllib.request.urlopen(url, timeout=2) as response,
        ):
            if response.status == 200:
                return
        time.sleep(interval)


def stop_group(process: subprocess.Popen[bytes], timeout: float) -> None:
    """Stop ``process`` and every process in its group: SIGTERM, SIGKILL after ``timeout``
    seconds, and a last SIGKILL to the group for workers that outlived their leader."""
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 10.0)):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, sig)
        try:
            process.wait(wait)
            break
        except subprocess.TimeoutExpired:
            continue
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
