"""The review queue: rows for a person to label, in the layout ``qwen-fast train`` reads.

It holds every row whose confidence (:func:`~langchain_qwen_fast.jobs.summary.confidence`) is
under ``below``, plus a sample of ``sample`` other rows stratified by predicted label (the
strata take turns, so a rare label gets as many rows as a common one while it has rows left).
The sample is the same however the job ran (resumed or not): each row gets a fixed key from
its place in the input and ``seed``, and each stratum's rows with the smallest keys are taken.
Rows that got an error are left out (there is nothing to review but the error).

Each chunk keeps its rows under ``below`` and its sample candidates (each stratum's
``sample`` smallest keys) in its digest; :func:`write_review` merges them at the end, reading
one chunk's candidates at a time. The file has ``text``, ``label`` (empty, for the person to
fill), and hints: ``model_label``, ``model_probability`` and ``row`` (the row's place in the
input, from 0). CSV or JSONL; multi-label labels are JSON lists in JSONL and joined with "|"
in CSV, as ``qwen-fast train`` reads them.
"""

from __future__ import annotations

import csv
import hashlib
import heapq
import os
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson

from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.parts import atomic_write
from langchain_qwen_fast.jobs.summary import confidence, stratum
from langchain_qwen_fast.jobs.tables import LABEL_SEPARATOR

#: The review file's columns, in order.
REVIEW_COLUMNS = ("text", "label", "model_label", "model_probability", "row")


@dataclass(frozen=True)
class ReviewOptions:
    """Which rows go to the review file ``out`` (CSV or JSONL, by its name)."""

    out: str
    #: rows whose confidence is under this
    below: float | None = None
    #: and this many of the other rows, stratified by predicted label
    sample: int = 0
    #: the sample's seed
    seed: int = 0

    def check(self) -> None:
        """:class:`ConfigurationError` for a file kind ``qwen-fast train`` cannot read or a
        threshold outside 0..1."""
        if Path(self.out).suffix.lower() not in (".csv", ".jsonl"):
            raise ConfigurationError(f"--review-out must be .csv or .jsonl, as qwen-fast train reads: {self.out}")
        if self.below is not None and not 0.0 < self.below <= 1.0:
            raise ConfigurationError(f"--review-below must be a probability within (0, 1], got {self.below}")
        if self.sample < 0:
            raise ConfigurationError(f"--review-sample must be 0 or more, got {self.sample}")


def sample_key(seed: int, row: int) -> int:
    """The fixed sample key of input row ``row`` (smaller keys are taken first)."""
    digest = hashlib.blake2b(f"{seed}:{row}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big")


class ReviewChunk:
    """One chunk's review entries: its rows under ``below`` and its sample candidates."""

    def __init__(self, options: ReviewOptions) -> None:
        self.options = options
        self._low: list[dict[str, Any]] = []
        #: per stratum, a max-heap (negated keys) of the ``sample`` smallest keys
        self._candidates: dict[str, list[tuple[int, int, dict[str, Any]]]] = {}

    def add(self, row: int, text: str, result: Classification | BaseException) -> None:
        """Consider one row for the review file."""
        if isinstance(result, BaseException):
            return
        sure = confidence(result)
        entry = {
            "row": row,
            "text": text,
            "model_label": list(result.labels) if result.multi_label else result.label,
            "model_probability": sure,
        }
        below = self.options.below
        if below is not None and sure is not None and sure < below:
            self._low.append({**entry, "low": True})
            return
        if self.options.sample <= 0:
            return
        key = sample_key(self.options.seed, row)
        heap = self._candidates.setdefault(stratum(result), [])
        item = (-key, row, {**entry, "low": False, "key": key, "stratum": stratum(result)})
        if len(heap) < self.options.sample:
            heapq.heappush(heap, item)
        elif -heap[0][0] > key:
            heapq.heapreplace(heap, item)

    def entries(self) -> list[dict[str, Any]]:
        """The chunk's entries, in input order."""
        candidates = [entry for heap in self._candidates.values() for _, _, entry in heap]
        return sorted([*self._low, *candidates], key=lambda entry: int(entry["row"]))


def _picked(options: ReviewOptions, chunks: Iterable[list[dict[str, Any]]]) -> set[int]:
    """The sampled rows: each stratum's ``sample`` smallest keys over every chunk, then the
    strata in turn, smallest keys first, until ``sample`` rows are picked."""
    best: dict[str, list[tuple[int, int]]] = {}
    for entries in chunks:
        for entry in entries:
            if entry["low"]:
                continue
            heap = best.setdefault(entry["stratum"], [])
            item = (-int(entry["key"]), int(entry["row"]))
            if len(heap) < options.sample:
                heapq.heappush(heap, item)
            elif heap[0] < item:
                heapq.heapreplace(heap, item)
    queues = {name: sorted((-negated, row) for negated, row in heap) for name, heap in best.items()}
    picked: set[int] = set()
    turn = 0
    while len(picked) < options.sample and any(turn < len(queue) for queue in queues.values()):
        for name in sorted(queues):
            if turn < len(queues[name]) and len(picked) < options.sample:
                picked.add(queues[name][turn][1])
        turn += 1
    return picked


def write_review(
    options: ReviewOptions, multi_label: bool, chunks: Callable[[], Iterator[list[dict[str, Any]]]]
) -> dict[str, Any]:
    """Write the review file from the chunks' entries (``chunks()`` yields them chunk by chunk,
    in input order; it is called twice), whole or not at all. Returns what it wrote: path,
    rows, below, sampled."""
    picked = _picked(options, chunks()) if options.sample > 0 else set()
    path = Path(options.out)
    path.parent.mkdir(parents=True, exist_ok=True)
    taken = {"below": 0, "sampled": 0}
    jsonl = path.suffix.lower() == ".jsonl"

    def write(tmp: Path) -> None:
        with tmp.open("w", newline="", encoding="utf-8") as f:
            writer = None if jsonl else csv.writer(f, lineterminator="\n")
            if writer is not None:
                writer.writerow(REVIEW_COLUMNS)
            for entries in chunks():
                for entry in entries:
                    if entry["low"]:
                        taken["below"] += 1
                    elif int(entry["row"]) in picked:
                        taken["sampled"] += 1
                    else:
                        continue
                    empty: Any = [] if multi_label else ""
                    values = [entry["text"], empty, entry["model_label"], entry["model_probability"], entry["row"]]
                    if writer is None:
                        f.write(orjson.dumps(dict(zip(REVIEW_COLUMNS, values))).decode() + "\n")
                    else:
                        writer.writerow(["" if v is None else _csv(v) for v in values])
            f.flush()
            os.fsync(f.fileno())

    atomic_write(path, write)
    return {
        "path": str(path),
        "rows": taken["below"] + taken["sampled"],
        "below": taken["below"],
        "sampled": taken["sampled"],
        "below_threshold": options.below,
        "sample": options.sample,
    }


def _csv(value: Any) -> Any:
    return LABEL_SEPARATOR.join(value) if isinstance(value, list) else value
