"""A server program (vLLM, the router) as a child process in its own process group: started
with its output in a log file and tied to the life of the process that started it, waited for
until the server on its port is this child and serves what it should, stopped with every
process in its group. One home for these rules, shared by
:class:`~langchain_qwen_fast.serving.VLLMServer` and :class:`~langchain_qwen_fast.serving.Router`.

The checks, in the order a start meets them:

- :func:`refuse_answering_port`, before anything starts: a port that already accepts
  connections belongs to another server, which a ready check would otherwise take for the new
  one while the new one dies with "address in use".
- :func:`spawn_in_own_group`: the child gets a session of its own (so that a stop reaches its
  workers, and Ctrl-C in the terminal reaches only the launcher, which then stops it), and on
  Linux the kernel sends it SIGTERM when the launcher dies (``PR_SET_PDEATHSIG``), so that a
  killed launcher leaves no server holding a GPU or a port.
- :func:`wait_until_answering`: ready only while the child is alive, the port's listening
  socket is held by the child or its descendants (where ``/proc`` says), and ``/v1/models``
  lists the model the child was told to serve.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import ipaddress
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from langchain_qwen_fast.errors import ServerStartError

#: ``prctl`` option: the signal the kernel sends this process when its parent thread exits
_PR_SET_PDEATHSIG = 1
#: seconds one probe of a port (a connection, or one HTTP request) may take
PROBE_TIMEOUT = 2.0
#: how far up its parents a process is followed to find whether it is a child's descendant
_MAX_DEPTH = 64
#: a listening socket's state in ``/proc/net/tcp``
_LISTEN = "0A"
#: the variable that names the launcher to a child that dies with it: a child that starts more
#: processes (vLLM's entry, :mod:`~langchain_qwen_fast.serving.vllm_cli`) watches for it to go
LAUNCHER_PID_ENV = "QWEN_FAST_LAUNCHER_PID"


def log_tail(path: Path, lines: int = 40) -> str:
    """The last ``lines`` lines of a log, for an error message."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def connect_host(host: str) -> str:
    """The address to reach a server bound to ``host`` from this machine: the loopback address
    for a wildcard bind."""
    return {"0.0.0.0": "127.0.0.1", "::": "::1", "": "127.0.0.1"}.get(host, host)


def http_base(host: str, port: int) -> str:
    """``http://HOST:PORT`` for a server bound to ``host`` (IPv6 addresses in brackets)."""
    address = connect_host(host)
    return f"http://[{address}]:{port}" if ":" in address else f"http://{address}:{port}"


def is_loopback(host: str) -> bool:
    """True when a server bound to ``host`` is reachable from this machine only."""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:  # a host name other than localhost: it may resolve to anything
        return False


# -- starting ---------------------------------------------------------------------------------
@functools.cache
def _prctl() -> Callable[..., int] | None:
    """libc's ``prctl``, looked up once in the parent (a forked child should call, not load)."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        prctl = ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None
    prctl.argtypes = [ctypes.c_int, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong, ctypes.c_ulong]
    prctl.restype = ctypes.c_int
    return prctl


def parent_death_signal(sig: int = signal.SIGTERM) -> Callable[[], None] | None:
    """A ``preexec_fn`` that has the kernel send ``sig`` to the child when the thread that
    started it exits (Linux only; None elsewhere). The thread, not the process: a child started
    from a short-lived worker thread would be stopped when that thread ends, so servers are
    started from a thread that outlives them (the main thread in every command here)."""
    prctl = _prctl()
    if prctl is None:
        return None
    parent = os.getpid()

    def in_child() -> None:
        prctl(_PR_SET_PDEATHSIG, sig, 0, 0, 0)
        # The parent may have died before the line above took effect: then no signal will come.
        if os.getppid() != parent:
            os.kill(os.getpid(), sig)

    return in_child


def spawn_in_own_group(
    command: Sequence[str], log_path: Path, env: Mapping[str, str] | None = None, *, die_with_parent: bool = True
) -> subprocess.Popen[bytes]:
    """Start ``command`` with its output appended to ``log_path``, in a session (and process
    group) of its own so that :func:`stop_group` also reaches the workers it starts; with
    ``die_with_parent``, it gets SIGTERM if this process dies first (see
    :func:`parent_death_signal`), and is named this process in ``QWEN_FAST_LAUNCHER_PID``."""
    child_env = dict(os.environ if env is None else env)
    child_env.pop(LAUNCHER_PID_ENV, None)
    if die_with_parent:
        child_env[LAUNCHER_PID_ENV] = str(os.getpid())
    with open(log_path, "ab") as log:
        return subprocess.Popen(
            list(command),
            stdout=log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=child_env,
            start_new_session=True,
            # Prepared here, before the fork: in the child it only calls.
            preexec_fn=parent_death_signal() if die_with_parent else None,
        )


# -- who holds a port -------------------------------------------------------------------------
def _stat(pid: int) -> tuple[int, int, int] | None:
    """``(parent, process group, session)`` of ``pid`` from ``/proc``, or None if it is gone."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
    except (OSError, IndexError):
        return None
    return int(fields[1]), int(fields[2]), int(fields[3])


def belongs_to(pid: int, leader: int) -> bool:
    """True when ``pid`` is ``leader``, in its process group or session, or descended from it."""
    for _ in range(_MAX_DEPTH):
        if pid == leader:
            return True
        stat = _stat(pid)
        if stat is None:
            return False
        parent, group, session = stat
        if leader in (group, session):
            return True
        if parent <= 1:
            return False
        pid = parent
    return False


def _listening_inodes(port: int) -> set[str] | None:
    """The socket inodes listening on TCP ``port`` (any address), or None where ``/proc`` does
    not list sockets."""
    inodes: set[str] = set()
    readable = False
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        readable = True
        for line in lines:
            fields = line.split()
            if len(fields) > 9 and fields[3] == _LISTEN and int(fields[1].rsplit(":", 1)[1], 16) == port:
                inodes.add(fields[9])
    return inodes if readable else None


def listeners(port: int) -> list[int | None] | None:
    """One entry for each socket listening on TCP ``port``: the id of a process holding it, or
    None when no process this user may look into does (another user's). None where ``/proc``
    does not say (not Linux)."""
    inodes = _listening_inodes(port)
    if inodes is None:
        return None
    holders: dict[str, int | None] = dict.fromkeys(inodes)
    wanted = {f"socket:[{inode}]": inode for inode in inodes}
    with contextlib.suppress(OSError):
        for entry in os.scandir("/proc"):
            if not wanted or not entry.name.isdigit():
                continue
            with contextlib.suppress(OSError):  # gone meanwhile, or not ours to read
                for fd in os.scandir(f"/proc/{entry.name}/fd"):
                    inode = wanted.pop(os.readlink(fd.path), None)
                    if inode is not None:
                        holders[inode] = int(entry.name)
    return list(holders.values())


def _describe_holders(port: int) -> str:
    """``held by pid N`` for the processes listening on ``port``, where ``/proc`` says."""
    found = listeners(port)
    pids = sorted({pid for pid in found or () if pid is not None})
    if pids:
        return "held by pid " + ", ".join(map(str, pids))
    return "held by another user's process" if found else ""


# -- what answers on a port -------------------------------------------------------------------
def _get(url: str, api_key: str | None = None) -> tuple[int, bytes] | None:
    """``(status, body)`` of a GET, or None when nothing answers within :data:`PROBE_TIMEOUT`."""
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {api_key}"} if api_key else {})
    try:
        with urllib.request.urlopen(request, timeout=PROBE_TIMEOUT) as response:
            return int(response.status), response.read(1 << 20)
    except urllib.error.HTTPError as exc:
        exc.close()
        return exc.code, b""
    except (OSError, ValueError):
        return None


def served_models(base: str, api_key: str | None = None) -> tuple[int, list[str]] | None:
    """``(status, model ids)`` from ``{base}/v1/models`` (ids empty unless it answered 200 with
    an OpenAI model list), or None when nothing answers."""
    answer = _get(f"{base}/v1/models", api_key)
    if answer is None:
        return None
    status, body = answer
    try:
        data = json.loads(body)["data"] if status == 200 else []
        return status, [str(m["id"]) for m in data if isinstance(m, dict) and "id" in m]
    except (ValueError, KeyError, TypeError):
        return status, []


def refuse_answering_port(host: str, port: int, *, name: str) -> None:
    """Raise :class:`ServerStartError` when something already accepts connections on ``port``
    of ``host``, naming the port, who holds it and what ``/v1/models`` says it serves (asked
    without any key: the key is for our own server only)."""
    try:
        with socket.create_connection((connect_host(host), port), timeout=PROBE_TIMEOUT):
            pass
    except OSError:
        return
    what = [_describe_holders(port)]
    models = served_models(http_base(host, port))
    if models is not None:
        status, ids = models
        if ids:
            what.append("serving " + ", ".join(map(repr, ids)))
        else:
            what.append(f"/v1/models answers {status}")
    detail = "; ".join(w for w in what if w)
    raise ServerStartError(
        f"cannot start the {name} on port {port}: something already answers there"
        f"{f' ({detail})' if detail else ''}. Stop it, or choose another port (0 picks a free one)."
    )


def port_not_held_by(process: subprocess.Popen[bytes], port: int) -> str | None:
    """Why the server on ``port`` is not ``process``'s, or None when it is (or ``/proc`` cannot
    say)."""
    found = listeners(port)
    if found is None:
        return None
    if any(pid is not None and belongs_to(pid, process.pid) for pid in found):
        return None
    if not found:
        return f"nothing listens on port {port} yet"
    return f"port {port} is {_describe_holders(port)}, not by this child (pid {process.pid})"


def _exit_message(name: str, code: int, log_path: Path, port: int) -> str:
    tail = log_tail(log_path)
    taken = "address already in use" in tail.lower()
    why = f": port {port} was taken by another process" if taken else ""
    return f"{name} exited with code {code} before it was ready{why} (log {log_path}):\n{tail}"


def wait_until_answering(
    process: subprocess.Popen[bytes],
    base: str,
    *,
    name: str,
    log_path: Path,
    started: float,
    timeout: float,
    interval: float,
    model: str | None = None,
    api_key: str | None = None,
    health_path: str | None = "/health",
) -> None:
    """Wait until the server at ``base`` (``http://HOST:PORT``) is ``process``'s and ready:
    ``process`` alive, ``health_path`` answering 200 (None: skipped), the port's listening
    socket held by ``process`` or its descendants (where ``/proc`` says), and ``/v1/models``
    answering 200 with ``model`` among its ids (None: any list; ``api_key``: sent there, only
    once the port is known to be the child's). Raise :class:`ServerStartError` with the log's
    tail as soon as ``process`` exits, or when ``timeout`` seconds pass after ``started``
    (``time.monotonic``), saying what was last seen on the port."""
    port = urllib.parse.urlsplit(base).port or 80
    seen = "nothing answered"
    while True:
        code = process.poll()
        if code is not None:
            raise ServerStartError(_exit_message(name, code, log_path, port))
        if time.monotonic() - started > timeout:
            raise ServerStartError(
                f"{name} not ready after {timeout:.0f} s ({seen}; log {log_path}):\n{log_tail(log_path)}"
            )
        seen = _not_ready(process, base, port, model, api_key, health_path) or ""
        if not seen:
            return
        time.sleep(interval)


def _not_ready(
    process: subprocess.Popen[bytes],
    base: str,
    port: int,
    model: str | None,
    api_key: str | None,
    health_path: str | None,
) -> str | None:
    """Why the server at ``base`` is not yet ``process``'s ready server, or None when it is."""
    if health_path is not None:
        answer = _get(f"{base}{health_path}")
        if answer is None:
            return "nothing answered"
        if answer[0] != 200:
            return f"{health_path} answered {answer[0]}"
    foreign = port_not_held_by(process, port)
    if foreign is not None:
        return foreign
    models = served_models(base, api_key)
    if models is None:
        return "/v1/models did not answer"
    status, ids = models
    if status != 200:
        return f"/v1/models answered {status}"
    if model is not None and model not in ids:
        return f"/v1/models lists {ids}, not {model!r}"
    return None


# -- stopping ---------------------------------------------------------------------------------
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
