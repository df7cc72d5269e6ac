"""A restart's checks: an interrupted job is carried on only by the same job over the same input.

The work folder keeps the job's :func:`fingerprint` and, for each finished chunk, the digest of
every input row it was read from. A restart carries on from there only where its options
give the same fingerprint (:func:`resumable`, naming what :func:`differences` finds), and its
input has the same columns and, row by row, the same rows (:func:`check_same_input`);
else it refuses with :class:`~langchain_qwen_fast.errors.ConfigurationError`, unless ``fresh``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.answerers import RowAnswerer
from langchain_qwen_fast.jobs.options import ClassifyOptions
from langchain_qwen_fast.jobs.parts import MANIFEST_VERSION, CommittedChunk, WorkFolder
from langchain_qwen_fast.jobs.tables import ROW_DIGEST_BYTES, STDIN, Format, InputRow

#: How a refused restart ends its message.
_AGAIN = " (run it with the input that job read to finish it, or pass --fresh to start over)"


#: How each fingerprint field is named when a restart differs from the folder's job.
_NAMES = {
    "input": "the input",
    "input_format": "--input-format",
    "output_format": "--output-format",
    "text_column": "--text-column",
    "classifier": "--classifier",
    # the engine's settings (answer_settings) by the flag or the classifier's field that sets
    # them; any other is named as the engine names it
    "label_sets.labels": "--labels",
    "label_sets.multi_label": "--multi-label",
    "rules.abstain_below": "--abstain-below",
    "model": "--model",
    "mode": "--mode",
    "label_sets.layout": "prompt_layout",
    "rules.thresholds": "threshold",
    "rules.temperature": "temperature",
    "label_sets.instructions": "instructions",
    "label_sets.descriptions": "label_descriptions",
    "label_sets.examples": "examples",
    "review_below": "--review-below",
    "review_sample": "--review-sample",
    "review_seed": "--review-seed",
    "questions": "--questions",
}


def fingerprint(options: ClassifyOptions, answerer: RowAnswerer, kinds: tuple[Format, Format]) -> dict[str, Any]:
    """What must be the same for a restart to carry on an interrupted job: how the input is
    read and the output written, every setting of the classifier's engine (or the questions
    model's) that changes answers, the questions, and the review rules. The server, the chunk
    sizes and the error rate may change; the input itself is checked row by row against the
    digests of the finished chunks (and may come from another path)."""
    review = options.review()
    return {
        "input_format": kinds[0],
        "output_format": kinds[1],
        "text_column": options.text_column,
        "classifier": str(Path(options.classifier).resolve()) if options.classifier else None,
        **answerer.fingerprint(),
        "review_below": review.below if review else None,
        "review_sample": review.sample if review else 0,
        "review_seed": review.seed if review else 0,
    }


def differences(saved: dict[str, Any], now: dict[str, Any]) -> list[str]:
    """Each field that differs, as ``--labels differ: A,B vs A,C`` (saved first)."""

    def shown(value: Any) -> str:
        if isinstance(value, list) and all(isinstance(v, str) for v in value):
            return ",".join(value)
        return "none" if value is None else str(value)

    found = []
    for key in sorted(set(saved) | set(now), key=lambda k: list(_NAMES).index(k) if k in _NAMES else len(_NAMES)):
        if orjson.dumps(saved.get(key)) != orjson.dumps(now.get(key)):
            found.append(f"{_NAMES.get(key, key)} differ: {shown(saved.get(key))} vs {shown(now.get(key))}")
    return found


def resumable(
    folder: WorkFolder, now: dict[str, Any], *, fresh: bool
) -> tuple[dict[str, Any] | None, list[CommittedChunk]]:
    """The interrupted job's manifest and finished chunks in ``folder`` to carry on from, for
    a job whose fingerprint is ``now``; ``(None, [])`` to start over (``fresh``, no folder, or
    a folder with no finished chunk, which holds nothing to lose). :class:`ConfigurationError`
    when they are another job's."""
    manifest = None if fresh else folder.manifest()
    chunks = folder.chunks() if manifest is not None else []
    if manifest is None or not chunks:
        return None, []
    if manifest.get("version") != MANIFEST_VERSION:
        raise ConfigurationError(f"{folder.path} is from another release; remove it or pass --fresh")
    found = differences(manifest["fingerprint"], now)
    if found:
        raise ConfigurationError(
            f"{folder.path} holds an interrupted job with other options: {'; '.join(found)} "
            "(run it with the same options to finish it, or pass --fresh to start over)"
        )
    return manifest, chunks


def check_same_columns(manifest: dict[str, Any], columns: list[str], input: str, folder: WorkFolder) -> None:
    """:class:`ConfigurationError` unless the input's ``columns`` are those of the interrupted
    job's input (its ``manifest``)."""
    if list(manifest["columns"]) != columns:
        raise ConfigurationError(
            f"{_input_name(input)} has other columns than the input of the interrupted job in "
            f"{folder.path}: {columns} vs {manifest['columns']}{_AGAIN}"
        )


async def check_same_input(
    rows: Iterator[InputRow], chunks: list[CommittedChunk], input: str, folder: WorkFolder
) -> None:
    """Read the rows the finished chunks were read from, comparing each one's digest with
    the one kept; :class:`ConfigurationError` naming the first that differs. It yields to
    the event loop between chunks, so that an interrupt during a long check stops it
    there."""
    done = sum(chunk.rows for chunk in chunks)
    at = 0
    for chunk in chunks:
        await asyncio.sleep(0)
        kept = chunk.input_digests()
        for offset in range(chunk.rows):
            row = next(rows, None)
            if row is None:
                raise ConfigurationError(
                    f"{_input_name(input)} has {at} rows, fewer than the {done} that the interrupted job in "
                    f"{folder.path} finished: it is not the input that job read{_AGAIN}"
                )
            if row.digest != kept[offset * ROW_DIGEST_BYTES : (offset + 1) * ROW_DIGEST_BYTES]:
                raise ConfigurationError(
                    f"{_input_name(input)} is not the input the interrupted job in {folder.path} read: "
                    f"its row {at + 1} ({row.place}) differs{_AGAIN}"
                )
            at += 1


def _input_name(input: str) -> str:
    """The input as messages name it."""
    return "stdin" if input == STDIN else input


__all__ = ["check_same_columns", "check_same_input", "differences", "fingerprint", "resumable"]
