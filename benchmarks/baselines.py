"""References without a server, on QwenClassifier's own prompts (rendered by its plan,
``QwenClassifier.prepare().render``): Hugging Face transformers (``generate`` and a linear
head, as the published figures were taken) and vLLM's offline engine in this process. Rows of
``python -m benchmarks.compare --transformers-baseline`` and ``--offline-ceiling``; both load
the model in this process. The throughput benchmark's engine ceiling, several engines in
processes of their own, is :mod:`benchmarks.ceiling`."""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any

from langchain_qwen_fast.bench.measure import PathResult


def transformers_baseline(model_dir: str, prompts: list[str]) -> list[PathResult]:
    """Hugging Face transformers on the classifier's rendered ``prompts``, as the published
    figures were taken: ``generate`` (one new token, greedy) at batch 1 and 16, and a linear
    head's forward pass (``AutoModelForSequenceClassification``, 4 classes, a new random head)
    at batch 1 and 16."""
    import torch
    from transformers import AutoModelForCausalLM, AutoModelForSequenceClassification, AutoTokenizer

    device = "cuda" if torch.cuda.is_available() else "cpu"
    dtype = torch.bfloat16 if device == "cuda" else torch.float32
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    tokenizer.padding_side = "left"
    results = []

    def timed_steps(name: str, n: int, batch: int, step: Callable[[list[str]], Any]) -> PathResult:
        step(prompts[:batch])  # warm-up
        if device == "cuda":
            torch.cuda.synchronize()
        latencies = []
        c0, t0 = time.process_time(), time.perf_counter()
        for start in range(0, n, batch):
            s0 = time.perf_counter()
            step(prompts[start : start + batch])
            if device == "cuda":
                torch.cuda.synchronize()
            latencies.append((time.perf_counter() - s0) * 1000)
        t1 = time.perf_counter()
        return PathResult(name, "batch", n, t1 - t0, time.process_time() - c0, latencies if batch == 1 else [])

    models: dict[str, Any] = {"causal": AutoModelForCausalLM.from_pretrained(model_dir, dtype=dtype)}
    models["causal"] = models["causal"].to(device).eval()

    def generate(batch: list[str]) -> Any:
        encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.inference_mode():
            return models["causal"].generate(
                **encoded, max_new_tokens=1, do_sample=False, pad_token_id=tokenizer.pad_token_id
            )

    for batch, n in ((1, min(len(prompts), 256)), (16, len(prompts))):
        results.append(timed_steps(f"transformers generate, batch {batch}", n, batch, generate))
    del models["causal"]
    models["head"] = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=4, dtype=dtype)
    models["head"] = models["head"].to(device).eval()
    models["head"].config.pad_token_id = tokenizer.pad_token_id

    def forward(batch: list[str]) -> Any:
        encoded = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False).to(device)
        with torch.inference_mode():
            return models["head"](**encoded).logits.softmax(-1)

    for batch, n in ((1, min(len(prompts), 256)), (16, len(prompts))):
        results.append(timed_steps(f"transformers linear head, batch {batch}", n, batch, forward))
    return results


def offline_ceiling(model_dir: str, prompts: list[str]) -> list[PathResult]:
    """vLLM's offline engine on the classifier's rendered ``prompts``, one output token, in
    this process: token-id prompts (tokenised before the clock starts) and text prompts."""
    from vllm import LLM, SamplingParams
    from vllm.inputs import TokensPrompt

    llm = LLM(model=model_dir, max_model_len=512, gpu_memory_utilization=0.3, enable_prefix_caching=True)
    tokenizer = llm.get_tokenizer()
    ids = [TokensPrompt(prompt_token_ids=tokenizer.encode(p, add_special_tokens=False)) for p in prompts]
    params = SamplingParams(max_tokens=1, temperature=0)
    llm.generate(ids[:256], params, use_tqdm=False)  # warm-up
    results = []
    for name, batch in (("vLLM offline LLM.generate, token ids", ids), ("vLLM offline LLM.generate, text", prompts)):
        c0, t0 = time.process_time(), time.perf_counter()
        llm.generate(batch, params, use_tqdm=False)
        t1 = time.perf_counter()
        results.append(PathResult(name, "batch", len(prompts), t1 - t0, time.process_time() - c0, window=(t0, t1)))
    return results


__all__ = ["offline_ceiling", "transformers_baseline"]
