"""Start-up time and speed of the CPU build with and without graph compilation, side by side.

    .venv/bin/python server/cpu_startup.py .models/qwen3-tiny

Starts one server at a time with the `cpu` profile's flags (the default vLLM compilation, then
`-O0`), and prints for each: seconds to /health, three batches of 525 texts (classifications/s)
and the p50 of 120 single requests, every text new to the server.
"""

from __future__ import annotations

import sys
import time

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.serving import PROFILES, VLLMServer
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines


def main(model: str) -> None:
    texts = headlines(175)
    compiled = [flag for flag in PROFILES["cpu"].args if flag != "-O0"]
    for name, flags in (("compiled", []), ("-O0", ["-O0"])):
        started = time.perf_counter()
        server = VLLMServer(
            model,
            profile="default",
            log_path=f"out/cpu-startup-{name}.log",
            extra_args=[*compiled, *flags],
            env=dict(PROFILES["cpu"].env),
        )
        with server:
            boot = time.perf_counter() - started
            classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=server.base_url, model="qwen3")
            classifier.batch(texts[:32])
            rates = []
            for round_ in range(3):
                batch = [f"{text} ({round_}-{i})" for i, text in enumerate(texts * 3)]
                t0 = time.perf_counter()
                classifier.batch(batch)
                rates.append(len(batch) / (time.perf_counter() - t0))
            latencies = []
            for i in range(120):
                t0 = time.perf_counter()
                classifier.invoke(f"{texts[i % len(texts)]} single {i}")
                latencies.append(time.perf_counter() - t0)
            latencies.sort()
            print(
                f"{name}: start-up {boot:.1f} s, batch {[round(r) for r in rates]}/s, "
                f"invoke p50 {latencies[60] * 1000:.1f} ms",
                flush=True,
            )


if __name__ == "__main__":
    main(sys.argv[1])
