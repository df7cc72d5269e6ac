"""The NVIDIA GPUs of this machine, as ``nvidia-smi -L`` lists them, and GPU choices checked
against them."""

from __future__ import annotations

import shutil
import subprocess

from langchain_qwen_fast.errors import ConfigurationError


def gpu_count() -> int:
    """How many NVIDIA GPUs ``nvidia-smi -L`` lists (0 without one)."""
    smi = shutil.which("nvidia-smi")
    if smi is None:
        return 0
    result = subprocess.run([smi, "-L"], capture_output=True, text=True, check=False)
    return sum(line.startswith("GPU ") for line in result.stdout.splitlines()) if result.returncode == 0 else 0


def has_gpu() -> bool:
    """True where an NVIDIA GPU answers ``nvidia-smi -L``."""
    return gpu_count() > 0


def parse_gpus(value: str | None) -> list[int]:
    """GPU indices from ``'all'`` or a list such as ``'0,1'``, checked against what
    ``nvidia-smi`` lists; None gives none. Raises :class:`ConfigurationError` for a GPU that
    is not here."""
    if value is None:
        return []
    found = gpu_count()
    if value == "all":
        if not found:
            raise ConfigurationError(
                "--gpus all: no GPU answers nvidia-smi here; without GPUs use --servers-per-gpu alone"
            )
        return list(range(found))
    try:
        gpus = [int(x) for x in value.split(",") if x.strip()]
    except ValueError:
        raise ConfigurationError(f"--gpus takes 'all' or indices such as 0,1, got {value!r}") from None
    missing = [g for g in gpus if g >= found]
    if missing:
        raise ConfigurationError(f"--gpus {value}: no GPU {missing[0]} here ({found} found)")
    return gpus
