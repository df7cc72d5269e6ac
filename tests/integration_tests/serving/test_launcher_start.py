"""A launcher that starts what it says, against the real CPU vLLM server: a port that already
answers is refused before anything starts; the ready check takes only its own child serving its
model (a real server on the port, or a stand-in serving another model or wanting a key, is not
it); children die with the process that started them; ``qwen-fast serve`` stops and exits on
Ctrl-C while vLLM is still starting."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from langchain_qwen_fast.errors import ServerStartError
from langchain_qwen_fast.serving import VLLMServer, free_port, launcher
from langchain_qwen_fast.serving.process_group import (
    refuse_answering_port,
    spawn_in_own_group,
    stop_group,
    wait_until_answering,
)
from langchain_qwen_fast.serving.vllm_install import installed_vllm

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc; PR_SET_PDEATHSIG")

#: A stand-in server: ``/health`` and ``/v1/models`` listing argv[1], wanting the key argv[2]
#: (empty: none); prints its port.
STAND_IN_SERVER = """
import json, sys
from http.server import BaseHTTPRequestHandler, HTTPServer

model, key = sys.argv[1], sys.argv[2]


class Handler(BaseHTTPRequestHandler):
    def do_GET(self):
        code, body = 404, b""
        if self.path == "/health":
            code = 200
        elif self.path == "/v1/models":
            code = 401 if key and self.headers.get("Authorization") != f"Bearer {key}" else 200
            body = json.dumps({"object": "list", "data": [{"id": model, "object": "model"}]}).encode()
        self.send_response(code)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args):
        pass


server = HTTPServer(("127.0.0.1", 0), Handler)
print(server.server_port, flush=True)
server.serve_forever()
"""
SLEEPER = [sys.executable, "-c", "import time; time.sleep(300)"]


def alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie, dead but not yet reaped, is not running)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def group_members(leader: int) -> list[int]:
    """The running processes of ``leader``'s process group."""
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


def until(condition: object, seconds: float, interval: float = 0.2) -> bool:
    """Poll ``condition()`` until true or ``seconds`` pass; its last value."""
    deadline = time.monotonic() + seconds
    while not condition() and time.monotonic() < deadline:  # type: ignore[operator]
        time.sleep(interval)
    return bool(condition())  # type: ignore[operator]


@pytest.fixture
def stand_in(tmp_path: Path) -> Iterator[object]:
    """Start stand-in servers (``start(model, key)`` gives the process and its base URL)."""
    started: list[subprocess.Popen[bytes]] = []

    def start(model: str, key: str = "") -> tuple[subprocess.Popen[bytes], str]:
        log = tmp_path / f"stand-in-{len(started)}.log"
        process = spawn_in_own_group([sys.executable, "-c", STAND_IN_SERVER, model, key], log)
        started.append(process)
        assert until(lambda: log.read_text().strip(), 30, 0.05), "the stand-in server did not start"
        return process, f"http://127.0.0.1:{int(log.read_text())}"

    yield start
    for process in started:
        stop_group(process, 10)


def ready(process: subprocess.Popen[bytes], base: str, timeout: float = 1.0, **check: str | None) -> None:
    wait_until_answering(
        process, base, name="vLLM server", log_path=Path(os.devnull), started=time.monotonic(),
        timeout=timeout, interval=0.1, **check,  # type: ignore[arg-type]
    )  # fmt: skip


# -- the real server ----------------------------------------------------------------------------
def test_a_port_the_shared_server_answers_on_is_refused(server_url: str, tiny_model: Path, tmp_path: Path) -> None:
    port = urlsplit(server_url).port
    assert port is not None
    server = VLLMServer(tiny_model, profile="cpu", port=port, log_path=tmp_path / "server.log")
    started = time.monotonic()
    with pytest.raises(ServerStartError, match=rf"port {port}: something already answers there") as info:
        server.start()
    # Refused before anything starts (a CPU vLLM start takes far longer than this bound).
    assert time.monotonic() - started < 30
    assert "serving 'qwen3'" in str(info.value) and "held by pid" in str(info.value)
    assert server.pid is None and not (tmp_path / "server.log").exists()
    assert httpx.get(server_url.removesuffix("/v1") + "/health", timeout=10).status_code == 200


def test_a_child_that_cannot_bind_fails_with_its_log_and_is_never_ready(
    server_url: str, tiny_model: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # As if the port were taken between the port check and the child's bind: the shared server
    # answers /health and lists 'qwen3' all along, yet the start fails, with the child's own words.
    port = urlsplit(server_url).port
    monkeypatch.setattr(launcher, "refuse_answering_port", lambda *a, **k: None)
    server = VLLMServer(tiny_model, profile="cpu", port=port, log_path=tmp_path / "server.log", startup_timeout=300)
    with pytest.raises(
        ServerStartError, match=rf"exited with code \d+ before it was ready: port {port} was taken"
    ) as info:
        server.start()
    assert "address already in use" in str(info.value).lower()
    assert server.pid is None


def test_a_real_server_on_the_port_is_not_the_childs(server_url: str, tmp_path: Path) -> None:
    # A child that is alive, and vLLM answering on the port with the model it would serve: still
    # not ready, for the server there is not the child.
    base = server_url.removesuffix("/v1")
    child = spawn_in_own_group(SLEEPER, tmp_path / "child.log")
    try:
        with pytest.raises(ServerStartError, match=r"not ready after 1 s \(port \d+ is held by pid \d+, not by this"):
            ready(child, base, model="qwen3")
    finally:
        stop_group(child, 10)


# -- stand-ins where the real server cannot show it ----------------------------------------------
def test_the_ready_check_wants_the_served_model(stand_in: object) -> None:
    process, base = stand_in("other")  # type: ignore[operator]
    with pytest.raises(ServerStartError, match=r"/v1/models lists \['other'\], not 'qwen3'"):
        ready(process, base, model="qwen3")
    ready(process, base, model="other")


def test_the_ready_check_sends_the_key_and_a_port_check_does_not(stand_in: object) -> None:
    key = "sk-ready-3b9d"
    process, base = stand_in("qwen3", key)  # type: ignore[operator]
    with pytest.raises(ServerStartError, match=r"/v1/models answered 401"):
        ready(process, base, model="qwen3")
    ready(process, base, model="qwen3", api_key=key)
    port = int(base.rsplit(":", 1)[1])
    with pytest.raises(ServerStartError, match=rf"port {port}: .*held by pid {process.pid}; /v1/models answers 401"):
        refuse_answering_port("127.0.0.1", port, name="vLLM server")
    refuse_answering_port("127.0.0.1", free_port(), name="vLLM server")  # a free port passes


# -- children die with their parent; Ctrl-C during start-up ------------------------------------
def test_a_killed_launcher_takes_its_vllm_server_with_it(tiny_model: Path, tmp_path: Path) -> None:
    launcher = (
        "import sys, time\n"
        "from langchain_qwen_fast.serving import VLLMServer\n"
        "server = VLLMServer(sys.argv[1], profile='cpu', log_path=sys.argv[2])\n"
        "server.spawn()\n"
        "print(server.pid, flush=True)\n"
        "time.sleep(300)\n"
    )
    parent = subprocess.Popen(
        [sys.executable, "-c", launcher, str(tiny_model), str(tmp_path / "server.log")], stdout=subprocess.PIPE
    )
    assert parent.stdout is not None
    leader = int(parent.stdout.readline())
    try:
        # Once the engine core is forked, the server is more than one process.
        assert until(lambda: len(group_members(leader)) >= 2, 180), (tmp_path / "server.log").read_text()[-2000:]
        parent.kill()  # as kill -9 or the OOM killer would: nothing of the launcher runs after
        parent.wait(10)
        assert until(lambda: not group_members(leader), 30), group_members(leader)
    finally:
        for pid in group_members(leader):
            os.kill(pid, signal.SIGKILL)


def vllm_processes(port: int) -> list[int]:
    """The running vLLM servers started for ``port`` (by their command line)."""
    found = []
    for entry in os.listdir("/proc"):
        if entry.isdigit():
            try:
                argv = Path(f"/proc/{entry}/cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if b"langchain_qwen_fast.serving.vllm_cli" in argv and str(port).encode() in argv and alive(int(entry)):
                found.append(int(entry))
    return found


@pytest.mark.skipif(installed_vllm() is None, reason="needs vLLM")
def test_serve_stops_vllm_on_ctrl_c_during_its_start(tiny_model: Path, tmp_path: Path) -> None:
    port = free_port()
    serve = subprocess.Popen(
        [sys.executable, "-m", "langchain_qwen_fast.cli.main", "serve", "--model", str(tiny_model), "--profile",
         "cpu", "--port", str(port), "--log", str(tmp_path / "server.log")],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        assert until(lambda: vllm_processes(port), 60), "vLLM did not start"
        (server,) = vllm_processes(port)
        time.sleep(3)  # well into its start-up: importing, loading
        assert serve.poll() is None and alive(server)
        serve.send_signal(signal.SIGINT)
        # Within its deadline: the start-up's own timeout is ten minutes off.
        _, err = serve.communicate(timeout=30)
    finally:
        serve.kill()
    assert serve.returncode == 128 + signal.SIGINT, err
    assert "SIGINT during start-up: stopped" in err
    assert not vllm_processes(port) and not group_members(server)
