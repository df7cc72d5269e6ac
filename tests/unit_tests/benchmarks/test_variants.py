"""Server variants from the benchmarks' JSON files: one reading, one rule for the flags."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from benchmarks.variants import Variant, load_variants, variant_flags
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import PROFILES, drop_flags

ROOT = Path(__file__).resolve().parents[3]


def test_the_projects_variant_files_load() -> None:
    for name in ("gpu_flags.json", "gpu_head_flags.json", "latency_variants.json", "latency_frontends.json"):
        assert load_variants(ROOT / "server" / name)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("{", "not JSON"),
        ("[]", "want"),
        ('{"a": []}', "want"),
        ('{"a": {"flag": []}}', r"'a': unknown keys \['flag'\]"),
    ],
)
def test_a_bad_file_is_named(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "v.json"
    path.write_text(text)
    with pytest.raises(ConfigurationError, match=message):
        load_variants(path)
    with pytest.raises(ConfigurationError, match="cannot read"):
        load_variants(tmp_path / "missing.json")


def test_dropping_flags_starts_from_vllms_defaults_with_the_rest_of_the_profile(tmp_path: Path) -> None:
    path = tmp_path / "v.json"
    path.write_text(json.dumps({"as is": {}, "cpu": {"profile": "cpu", "flags": ["--seed", "1"]}}))
    variants = load_variants(path)
    assert variant_flags(variants["as is"], "gpu") == ("gpu", [])
    assert variant_flags(variants["cpu"], "gpu") == ("cpu", ["--seed", "1"])
    dropped = Variant(drop=("--disable-log-stats",), flags=("--seed", "1"))
    assert variant_flags(dropped, "gpu") == (
        "default",
        [*drop_flags(PROFILES["gpu"].args, ["--disable-log-stats"]), "--seed", "1"],
    )


def test_a_variant_reads_every_key_of_its_object() -> None:
    entry = {"profile": "cpu", "drop": ["--a"], "flags": ["--b", "1"], "env": {"X": "1"}, "frontend": "rust",
             "torch_profile": 60, "startup_timeout": 90}  # fmt: skip
    assert set(entry) == set(Variant.KEYS)
    variant = Variant.from_json("v", entry)
    assert variant == Variant("cpu", ("--a",), ("--b", "1"), {"X": "1"}, "rust", 60, 90.0)
    assert Variant.from_json("plain", {}) == Variant()
