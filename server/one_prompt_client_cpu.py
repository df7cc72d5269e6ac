"""The classifier's own CPU a text against a server that takes one prompt a request (as vLLM's
Rust frontend does), with the repository's canned vLLM standing in for the server.

    TEXTS=4000 ROUNDS=2 .venv/bin/python server/one_prompt_client_cpu.py .models/qwen3-tiny

The canned vLLM (``tests/support/fake_vllm.py``, served as ``server/service_cpu.py`` serves it)
refuses lists of prompts and answers at once from a process of its own, tokenising with the
given model directory's ``tokenizer.json``; the classifier sends token ids made with the same
tokenizer (``tokenizer_path``). Each round runs ``QwenClassifier.abatch`` on ``TEXTS`` news
texts it has not sent before (default 4000) and prints texts/s and the client process's CPU
(all its threads) a text as a line of JSON. ``LISTS=1`` lets the canned server take lists, for
the list path. Run it from a checkout with the ``benchmarks`` extra; ``PYTHONPATH`` chooses which
tree's client runs, so two trees can be compared round by round.
"""

from __future__ import annotations

import asyncio
import json
import multiprocessing
import os
import sys
import time
from pathlib import Path

# After PYTHONPATH, so that it still chooses the client's tree: the checkout (for the canned
# vLLM in tests/support) and this folder (for service_cpu).
sys.path += [str(Path(__file__).resolve().parents[1]), str(Path(__file__).resolve().parent)]


def main(model_dir: str) -> None:
    from service_cpu import prepare_when_up, serve_canned

    from langchain_qwen_fast import QwenClassifier
    from langchain_qwen_fast.serving import free_port
    from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, news_items

    texts, lists = int(os.environ.get("TEXTS", 4000)), os.environ.get("LISTS") == "1"
    port = free_port()
    canned = multiprocessing.get_context("spawn").Process(
        target=serve_canned, args=(port, lists, str(Path(model_dir) / "tokenizer.json")), daemon=True
    )
    canned.start()
    try:
        classifier = QwenClassifier(
            labels=list(AG_NEWS_LABELS), base_url=f"http://127.0.0.1:{port}/v1", tokenizer_path=model_dir
        )
        prepare_when_up(classifier)
        asyncio.run(classifier.abatch(news_items(300, 0)))  # warm-up: connections, tokenizer
        for round_number in range(int(os.environ.get("ROUNDS", 2))):
            batch = news_items(texts, 10_000 * (round_number + 1))
            started, cpu = time.perf_counter(), time.process_time()
            asyncio.run(classifier.abatch(batch))
            seconds, cpu = time.perf_counter() - started, time.process_time() - cpu
            row = {"round": round_number + 1, "lists": lists, "texts": texts, "texts_per_s": round(texts / seconds),
                   "client_cpu_ms_a_text": round(cpu / texts * 1000, 3)}  # fmt: skip
            print(json.dumps(row), flush=True)
    finally:
        canned.kill()


if __name__ == "__main__":
    main(sys.argv[1])
