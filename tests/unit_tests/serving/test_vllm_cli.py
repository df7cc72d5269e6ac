"""The CPU build's engine core forked, not spawned: the platform's choice of ``spawn`` is
overridden in the process that launches the engine core, and only there."""

from __future__ import annotations

import os
from typing import ClassVar

from langchain_qwen_fast.serving.vllm_cli import fork_engine_core

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
