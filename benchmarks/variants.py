"""Server variants as the benchmarks' JSON files name them (``python -m benchmarks.flags
--flags FILE``, ``python -m benchmarks.scale --latency-variants FILE``): ``{"name":
{"profile": ..., "drop": [...], "flags": [...], "env": {...}}, ...}``, each a profile's flags
without those in ``drop`` (and their values), then ``flags``. One reading of the file and one
rule for the flags."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import PROFILES

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import ProfileName
    from langchain_qwen_fast.serving.profiles import Frontend

#: The profiles a benchmark can start its servers with (``--profile``): the launcher's, or auto
#: (gpu where nvidia-smi sees a GPU, else cpu).
PROFILE_CHOICES = ("auto", *PROFILES)


@dataclass(frozen=True)
class Variant:
    """One server variant: its profile (None: the benchmark's), the profile's flags to drop,
    flags to add, environment variables, vLLM's HTTP frontend, and for the latency variants
    how many single requests vLLM's torch profiler traces (0: none) and how long it may take
    to start."""

    profile: ProfileName | None = None
    drop: tuple[str, ...] = ()
    flags: tuple[str, ...] = ()
    env: dict[str, str] = field(default_factory=dict)
    frontend: Frontend = "python"
    torch_profile: int = 0
    startup_timeout: float = 600.0

    #: the keys a variant's JSON object may have
    KEYS = ("profile", "drop", "flags", "env", "frontend", "torch_profile", "startup_timeout")

    @classmethod
    def from_json(cls, name: str, entry: dict[str, Any]) -> Variant:
        """The variant ``name`` of a file, from its JSON object; unknown keys are named."""
        unknown = sorted(set(entry) - set(cls.KEYS))
        if unknown:
            raise ConfigurationError(f"server variant {name!r}: unknown keys {unknown}; known: {list(cls.KEYS)}")
        return cls(
            profile=entry.get("profile"),
            drop=tuple(entry.get("drop", ())),
            flags=tuple(entry.get("flags", ())),
            env=dict(entry.get("env", {})),
            frontend=entry.get("frontend", "python"),
            torch_profile=int(entry.get("torch_profile", 0)),
            startup_timeout=float(entry.get("startup_timeout", 600)),
        )


def load_variants(path: str | Path) -> dict[str, Variant]:
    """The variants in the JSON file at ``path``, checked to be an object of objects."""
    try:
        raw = json.loads(Path(path).read_text())
    except OSError as exc:
        raise ConfigurationError(f"cannot read the server variants file {path}: {exc}") from None
    except ValueError as exc:
        raise ConfigurationError(f"the server variants file {path} is not JSON: {exc}") from None
    if not isinstance(raw, dict) or not all(isinstance(v, dict) for v in raw.values()):
        raise ConfigurationError(f'{path}: want {{"name": {{"flags": [...], "drop": [...]}}, ...}}')
    return {name: Variant.from_json(name, entry) for name, entry in raw.items()}


def resolve_profile(profile: ProfileName) -> ProfileName:
    """``profile``, with ``auto`` made the one it stands for here (gpu where nvidia-smi sees a GPU)."""
    from langchain_qwen_fast.serving import has_gpu

    if profile != "auto":
        return profile
    return "gpu" if has_gpu() else "cpu"


def variant_flags(variant: Variant, profile: ProfileName) -> tuple[ProfileName, list[str]]:
    """The profile and extra flags a server for ``variant`` starts with: the variant's own
    profile (default ``profile``) and its ``flags``; with ``drop``, the ``default`` profile
    (vLLM's own) and that profile's flags without those dropped, then ``flags``."""
    from langchain_qwen_fast.serving import drop_flags

    base = resolve_profile(variant.profile or profile)
    if variant.drop:
        return "default", drop_flags(PROFILES[base].args, list(variant.drop)) + list(variant.flags)
    return base, list(variant.flags)


__all__ = ["PROFILE_CHOICES", "Variant", "load_variants", "resolve_profile", "variant_flags"]
