"""A job's work folder beside its output (``OUTPUT.partial/``): what makes it resumable.

It holds ``manifest.json`` (the job's options fingerprint and the output's columns, written
once before the first part) and, per chunk of rows written, two files named by the chunk's
first row: ``<start>.digest.json`` (the chunk's counts, histogram and review candidates,
:mod:`.summary`) and ``<start>.<kind>`` (its rows, in the output's kind). Each is written to a
temporary name, synced and renamed into place, the digest first: a part file present is the
commit point of its chunk. Killed at any moment, the folder holds whole chunks only; a restart
keeps the unbroken run of chunks from row 0 and classifies from there.
"""

from __future__ import annotations

import contextlib
import os
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from langchain_qwen_fast.errors import DataFileError

MANIFEST = "manifest.json"
#: The manifest's layout version: a folder of another version is not resumed.
MANIFEST_VERSION = 1
_TMP = ".tmp-"
_DIGEST = ".digest.json"


@dataclass(frozen=True)
class Part:
    """One committed chunk: its first row, its row count and its two files."""

    start: int
    rows: int
    path: Path
    digest_path: Path

    def digest(self) -> dict[str, Any]:
        """The chunk's digest (:class:`~langchain_qwen_fast.jobs.summary.Digest` as JSON)."""
        return dict(orjson.loads(self.digest_path.read_bytes()))


def work_folder(output: Path) -> Path:
    """The work folder of the job writing ``output``."""
    return output.with_name(output.name + ".partial")


def atomic_write(target: Path, write: Callable[[Path], None]) -> None:
    """``write`` a temporary file beside ``target`` (it syncs what it writes), then rename it
    to ``target`` and sync the folder: ``target`` is either absent or whole."""
    tmp = target.with_name(_TMP + target.name)
    write(tmp)
    os.replace(tmp, target)
    _sync_folder(target.parent)


def atomic_bytes(target: Path, data: bytes) -> None:
    """:func:`atomic_write` of ``data``."""

    def write(path: Path) -> None:
        with path.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(target, write)


def _sync_folder(folder: Path) -> None:
    with contextlib.suppress(OSError):  # not every file system syncs a folder
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


class WorkFolder:
    """The work folder of one output (see the module docstring)."""

    def __init__(self, output: Path, kind: str) -> None:
        self.path = work_folder(output)
        self.kind = kind

    def manifest(self) -> dict[str, Any] | None:
        """The saved manifest, or None when there is no folder (or no manifest in it yet)."""
        file = self.path / MANIFEST
        if not file.is_file():
            return None
        try:
            return dict(orjson.loads(file.read_bytes()))
        except orjson.JSONDecodeError as exc:
            raise DataFileError(f"{file} cannot be read ({exc}); remove {self.path} to start over") from None

    def start(self, fingerprint: dict[str, Any], columns: list[str]) -> None:
        """A fresh folder for a job: anything there before is removed, the manifest written."""
        self.remove()
        self.path.mkdir(parents=True)
        manifest = {"version": MANIFEST_VERSION, "fingerprint": fingerprint, "columns": columns}
        atomic_bytes(self.path / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    def parts(self) -> list[Part]:
        """The committed chunks from row 0 on, unbroken; anything else in the folder (temporary
        files, a digest without its part, chunks after a gap) is removed."""
        if not self.path.is_dir():
            return []
        digests: dict[int, Path] = {}
        rows_files: dict[int, Path] = {}
        for file in self.path.iterdir():
            name = file.name
            if name == MANIFEST:
                continue
            first = name.split(".", 1)[0]
            if name.startswith(_TMP) or not first.isdigit():
                file.unlink()
            elif name.endswith(_DIGEST):
                digests[int(first)] = file
            else:
                rows_files[int(first)] = file
        kept: list[Part] = []
        at = 0
        for start in sorted(set(digests) | set(rows_files)):
            digest, rows = digests.get(start), rows_files.get(start)
            if start == at and digest is not None and rows is not None:
                count = int(orjson.loads(digest.read_bytes())["rows"])
                kept.append(Part(start, count, rows, digest))
                at += count
                continue
            for stray in (digest, rows):
                if stray is not None:
                    stray.unlink()
        return kept

    def commit(self, start: int, digest: dict[str, Any], write_rows: Callable[[Path], None]) -> Part:
        """Commit one chunk: its digest, then its rows (``write_rows`` writes and syncs them)."""
        name = f"{start:012d}"
        digest_path = self.path / f"{name}{_DIGEST}"
        path = self.path / f"{name}.{self.kind}"
        atomic_bytes(digest_path, orjson.dumps(digest))
        atomic_write(path, write_rows)
        return Part(start, int(digest["rows"]), path, digest_path)

    def remove(self) -> None:
        """Remove the folder and everything in it."""
        if self.path.exists():
            shutil.rmtree(self.path)


def part_files(parts: list[Part]) -> Iterator[Path]:
    """The chunks' row files, in order."""
    return (part.path for part in parts)
