"""A job's work folder beside its output (``OUTPUT.partial/``): what makes it resumable.

It holds ``manifest.json`` (the job's options fingerprint and the output's columns, written
once before the first part) and, per chunk of rows written, two files named by the chunk's
first row: ``<start>.digest.json`` (the chunk's counts, histogram, review candidates and the
digest of each input row it was read from, :mod:`.summary`) and ``<start>.<kind>`` (its rows,
in the output's kind). Each is written to a temporary name, synced and renamed into place, the
digest first, then the folder is synced: a part file present beside its digest is the commit
point of its chunk. Killed at any moment, the folder holds whole chunks only; a restart keeps
the unbroken run of chunks from row 0 and classifies from there.

One run at a time works in a folder: it holds an exclusive lock on the folder's ``lock`` file
(:meth:`WorkFolder.lock`) from before it reads the manifest until the folder is removed or the
run ends, and a second run refuses at once. Temporary files carry the name of the process that
writes them (:func:`temporary_path`), so that no run ever takes another's for its own.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import fcntl
import os
import secrets
import shutil
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from langchain_qwen_fast.errors import ConfigurationError, DataFileError

MANIFEST = "manifest.json"
#: The file whose lock a run holds for its life (it names the process holding it).
LOCK = "lock"
#: The manifest's layout version: a folder of another version is not resumed.
MANIFEST_VERSION = 3
_TMP = ".tmp-"
_DIGEST = ".digest.json"
#: Tries at taking a folder's lock while another run removes the folder under it.
_LOCK_TRIES = 20
#: This process's part of its temporary files' names (the process id is added per call: a
#: forked child names its own).
_TOKEN = secrets.token_hex(4)


@dataclass(frozen=True)
class CommittedChunk:
    """A chunk committed to the work folder: its first row, its row count, its part file (its
    rows, in the output's kind) and its digest file."""

    start: int
    rows: int
    part_path: Path
    digest_path: Path

    def digest(self) -> dict[str, Any]:
        """The chunk's digest (its counts, review entries and input rows' digests, as JSON)."""
        return dict(orjson.loads(self.digest_path.read_bytes()))

    def input_digests(self) -> bytes:
        """The digests of the input rows the chunk was read from, one after another."""
        return base64.b64decode(self.digest()["inputs"])


def encode_digests(digests: list[bytes]) -> str:
    """Row digests as :meth:`CommittedChunk.input_digests` reads them back from a chunk's digest."""
    return base64.b64encode(b"".join(digests)).decode()


def work_folder(output: Path) -> Path:
    """The work folder of the job writing ``output``."""
    return output.with_name(output.name + ".partial")


def temporary_path(target: Path, folder: Path | None = None) -> Path:
    """A temporary name for ``target`` in ``folder`` (default: beside it), named by this
    process, for a file to rename to ``target`` once whole."""
    return (folder or target.parent) / f"{_TMP}{os.getpid()}-{_TOKEN}-{target.name}"


def atomic_write(
    target: Path, write: Callable[[Path], None], folder: Path | None = None, *, sync_folder: bool = True
) -> None:
    """``write`` a temporary file (in ``folder``, default beside ``target``, on the same file
    system; ``write`` syncs what it writes), then rename it to ``target`` and sync the folder
    (unless not ``sync_folder``: the caller syncs it after more renames): ``target`` is either
    absent or whole. A failed write leaves no temporary file."""
    tmp = temporary_path(target, folder)
    try:
        write(tmp)
        os.replace(tmp, target)
    except BaseException:
        with contextlib.suppress(OSError):
            tmp.unlink()
        raise
    if sync_folder:
        _sync_folder(target.parent)


def atomic_bytes(target: Path, data: bytes, folder: Path | None = None, *, sync_folder: bool = True) -> None:
    """:func:`atomic_write` of ``data``."""

    def write(path: Path) -> None:
        with path.open("wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())

    atomic_write(target, write, folder, sync_folder=sync_folder)


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
        self._lock: int | None = None

    # -- the lock -------------------------------------------------------------------------
    def lock(self) -> None:
        """Take the folder's lock (making the folder), held until :meth:`release`;
        :class:`ConfigurationError` at once, naming the folder, when another run holds it."""
        if self._lock is not None:
            return
        file = self.path / LOCK
        for _ in range(_LOCK_TRIES):
            self.path.mkdir(parents=True, exist_ok=True)
            try:
                fd = os.open(file, os.O_RDWR | os.O_CREAT, 0o644)
            except FileNotFoundError:  # a run that just finished removed the folder
                continue
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError as exc:
                holder = os.pread(fd, 32, 0).decode(errors="replace").strip()
                os.close(fd)
                if exc.errno not in (errno.EAGAIN, errno.EACCES):
                    raise DataFileError(f"cannot lock {file}: {exc}") from None
                by = f" (process {holder})" if holder.isdigit() else ""
                raise ConfigurationError(
                    f"{self.path} is in use by another qwen-fast classify run{by}: one run at a time writes an "
                    "output; wait for it to end, or give another --out"
                ) from None
            # The lock counts only on the file still at that name: a finishing run removes
            # its lock file, holding it, before it lets go.
            if self._holds(fd):
                os.ftruncate(fd, 0)
                os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
                self._lock = fd
                return
            os.close(fd)
        raise DataFileError(f"cannot lock {file}: the folder was removed and made again {_LOCK_TRIES} times over")

    def release(self) -> None:
        """Let go of the lock; a folder holding no finished chunk is removed first (it has
        nothing a later run could carry on from)."""
        if self._lock is None:
            return
        try:
            # Only while its lock file is still this run's: once removed at the job's end, the
            # folder there may be a new run's.
            if self._holds(self._lock) and not any(_part_name(f.name) for f in self.path.iterdir()):
                self.remove()
        finally:
            os.close(self._lock)
            self._lock = None

    def _holds(self, fd: int) -> bool:
        """Whether ``fd`` is the lock file now at the folder's lock name."""
        try:
            return os.stat(self.path / LOCK).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

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
        """A fresh folder for a job: anything there before is removed (but the lock), the
        manifest written."""
        self._clear()
        self.path.mkdir(parents=True, exist_ok=True)
        manifest = {"version": MANIFEST_VERSION, "fingerprint": fingerprint, "columns": columns}
        atomic_bytes(self.path / MANIFEST, orjson.dumps(manifest, option=orjson.OPT_INDENT_2))

    def chunks(self) -> list[CommittedChunk]:
        """The committed chunks from row 0 on, unbroken; anything else in the folder (temporary
        files, a digest without its part, chunks after a gap) is removed."""
        if not self.path.is_dir():
            return []
        digests: dict[int, Path] = {}
        rows_files: dict[int, Path] = {}
        for file in self.path.iterdir():
            name = file.name
            if name in (MANIFEST, LOCK):
                continue
            first = name.split(".", 1)[0]
            if name.startswith(_TMP) or not first.isdigit():
                file.unlink()
            elif name.endswith(_DIGEST):
                digests[int(first)] = file
            else:
                rows_files[int(first)] = file
        kept: list[CommittedChunk] = []
        at = 0
        for start in sorted(set(digests) | set(rows_files)):
            digest, rows = digests.get(start), rows_files.get(start)
            if start == at and digest is not None and rows is not None:
                count = int(orjson.loads(digest.read_bytes())["rows"])
                kept.append(CommittedChunk(start, count, rows, digest))
                at += count
                continue
            for stray in (digest, rows):
                if stray is not None:
                    stray.unlink()
        return kept

    def commit(self, start: int, digest: dict[str, Any], write_rows: Callable[[Path], None]) -> CommittedChunk:
        """Commit one chunk: its digest (with ``rows`` and ``inputs``, :func:`encode_digests`),
        then its rows (``write_rows`` writes and syncs them), then the folder, synced once for
        both names: until then either may be lost to a crash of the machine, and a chunk that
        lacks either file is no chunk (:meth:`chunks`), classified again."""
        name = f"{start:012d}"
        digest_path = self.path / f"{name}{_DIGEST}"
        path = self.path / f"{name}.{self.kind}"
        atomic_bytes(digest_path, orjson.dumps(digest), sync_folder=False)
        atomic_write(path, write_rows, sync_folder=False)
        _sync_folder(self.path)
        return CommittedChunk(start, int(digest["rows"]), path, digest_path)

    def temporary(self, target: Path) -> Path:
        """A temporary name in the folder for a file to rename to ``target`` (beside the
        folder, so on its file system): one a killed run leaves goes with the folder."""
        return temporary_path(target, self.path)

    def remove(self) -> None:
        """Remove the folder and everything in it, the lock file last (a run that opens it
        before then finds it held)."""
        if not self.path.exists():
            return
        self._clear()
        with contextlib.suppress(FileNotFoundError):
            (self.path / LOCK).unlink()
        with contextlib.suppress(OSError):  # a run starting now may have made it again
            self.path.rmdir()

    def _clear(self) -> None:
        """Remove everything in the folder but the lock file."""
        if not self.path.is_dir():
            return
        for file in self.path.iterdir():
            if file.name == LOCK:
                continue
            if file.is_dir() and not file.is_symlink():
                shutil.rmtree(file, ignore_errors=True)
            else:
                with contextlib.suppress(FileNotFoundError):
                    file.unlink()


def saved_rows(folder: Path) -> int:
    """The rows of the folder's committed chunks from row 0 on, unbroken (those
    :meth:`WorkFolder.chunks` keeps), counted without changing anything: for a run that holds
    no lock on the folder (one interrupted before it took it, or before it read the folder).
    A folder that cannot be read holds none."""
    try:
        names = [file.name for file in folder.iterdir()]
    except OSError:
        return 0
    digests = {int(name.split(".", 1)[0]): name for name in names if name.endswith(_DIGEST) and _part_name(name)}
    parts = {int(name.split(".", 1)[0]) for name in names if not name.endswith(_DIGEST) and _part_name(name)}
    rows = 0
    while rows in digests and rows in parts:
        try:
            count = int(orjson.loads((folder / digests[rows]).read_bytes())["rows"])
        except (OSError, ValueError, KeyError, TypeError):  # removed meanwhile: the count so far
            break
        if count < 1:
            break
        rows += count
    return rows


def part_files(chunks: list[CommittedChunk]) -> Iterator[Path]:
    """The chunks' part files, in order."""
    return (chunk.part_path for chunk in chunks)


def _part_name(name: str) -> bool:
    """Whether a file of the folder is a chunk's (its name starts with the chunk's first row)."""
    return name.split(".", 1)[0].isdigit()
