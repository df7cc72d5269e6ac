"""Server variants as the benchmarks' JSON files name them (``qwen-fast bench --compare-flags``,
``qwen-fast bench-scale --latency-variants``): ``{"name": {"profile": ..., "drop": [...],
"flags": [...], "env": {...}}, ...}``, each a profile's flags without those in ``drop`` (and
their values), then ``flags``. One reading of the file and one rule for the flags."""

from __future__ import annotations

import json
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import PROFILES

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName

#: The profiles a benchmark can start its servers with (``--profile``): the launcher's, or auto
#: (gpu where nvidia-smi sees a GPU, else cpu).
PROFILE_CHOICES = ("auto", *PROFILES)


def load_variants(path: str | Path) -> dict[str, dict[str, Any]]:
    """The variants in the JSON file at ``path``, checked to be an object of objects."""
    try:
        variants = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigurationError(f"cannot read the server variants file {path}: {exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"the server variants file {path} is not JSON: {exc}") from None
    if not isinstance(variants, dict) or not all(isinstance(v, dict) for v in variants.values()):
        raise ConfigurationError(f'{path}: want {{"name": {{"flags": [...], "drop": [...]}}, ...}}')
    return variants


def resolve_profile(profile: ProfileName) -> ProfileName:
    """``profile``, with ``auto`` made the one it stands for here (gpu where nvidia-smi sees a GPU)."""
    from langchain_qwen_fast.serving import has_gpu

    if profile != "auto":
        return profile
    return "gpu" if has_gpu() else "cpu"


def variant_flags(variant: dict[str, Any], profile: ProfileName) -> tuple[ProfileName, list[str]]:
    """The profile and extra flags a server for ``variant`` starts with: the variant's own
    profile (default ``profile``) and its ``flags``; with ``drop``, the ``default`` profile
    (vLLM's own) and that profile's flags without those dropped, then ``flags``."""
    from langchain_qwen_fast.serving import drop_flags

    base = resolve_profile(variant.get("profile", profile))
    flags = list(variant.get("flags", []))
    if variant.get("drop"):
        return "default", drop_flags(PROFILES[base].args, variant["drop"]) + flags
    return base, flags


__all__ = ["PROFILE_CHOICES", "load_variants", "resolve_profile", "variant_flags"]
