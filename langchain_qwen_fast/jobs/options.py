"""A classification job's options (:class:`ClassifyOptions`), ``qwen-fast classify``'s flags,
and their checks before anything is read.

    from langchain_qwen_fast.jobs.options import ClassifyOptions

    options = ClassifyOptions("news.csv", "labelled.parquet", labels=("World", "Sports"))
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.answerers import check_classifier_choice, check_no_classifier
from langchain_qwen_fast.jobs.questions import GivenQuestions
from langchain_qwen_fast.jobs.review import ReviewOptions
from langchain_qwen_fast.jobs.tables import STDIN


@dataclass(frozen=True)
class ClassifyOptions:
    """One classification job; each field has a ``qwen-fast classify`` flag of the same name
    (``input`` is the positional argument, ``out`` is ``--out``)."""

    input: str
    out: str
    #: a saved classifier (``qwen-fast train``'s output, or ``QwenClassifier.save``'s file)
    classifier: str | None = None
    #: the labels, without ``classifier``
    labels: tuple[str, ...] | None = None
    multi_label: bool = False
    abstain_below: float | None = None
    #: the server (default: the saved classifier's, else ``QWEN_FAST_BASE_URL``, else local)
    base_url: str | None = None
    #: the served model name (default: the saved classifier's, else qwen3)
    model: str | None = None
    #: generate or head (default: the saved classifier's, else generate)
    mode: str | None = None
    #: csv, jsonl or parquet (default: from the file's name; needed for stdin)
    input_format: str | None = None
    output_format: str | None = None
    #: the text's column or key (else title and description)
    text_column: str = "text"
    #: rows per chunk: per engine call and per part file (None: as many as keep every request
    #: in flight full, asked of the engine as each chunk is read: what its servers' windows
    #: hold then, which follows what they answer; at least the job's ``MIN_CHUNK_ROWS``)
    chunk_rows: int | None = None
    #: chunks being classified at once
    chunks_in_flight: int = 3
    #: the review file (CSV or JSONL), with ``review_below`` and/or ``review_sample``
    review_out: str | None = None
    review_below: float | None = None
    review_sample: int = 0
    review_seed: int = 0
    #: a progress bar on stderr
    progress: bool = True
    #: the confidence histogram PNG
    histogram: bool = True
    #: discard an interrupted job's work folder and start over
    fresh: bool = False
    #: the share of rows (0 to 1) with input errors over which the job stops; None: stop only
    #: on a systematic error (a chunk whose rows all fail alike); 1: never stop
    max_error_rate: float | None = None
    #: questions to answer about every row instead of a classifier's labels: a questions
    #: file's path, or the mapping of answer ids to questions (:mod:`.questions`)
    questions: GivenQuestions | None = None

    def review(self) -> ReviewOptions | None:
        """The review queue's options, None without ``review_out``."""
        if self.review_out is None:
            return None
        return ReviewOptions(self.review_out, self.review_below, self.review_sample, self.review_seed)

    def check(self) -> None:
        """:class:`ConfigurationError` for options that cannot work (before anything is read)."""
        if self.questions is None:
            check_classifier_choice(self.classifier, self.labels, self.multi_label, flags=True)
        else:
            self._check_questions()
        if (self.chunk_rows is not None and self.chunk_rows < 1) or self.chunks_in_flight < 1:
            raise ConfigurationError("--chunk-rows and --chunks-in-flight must be at least 1")
        if self.out == STDIN:
            raise ConfigurationError("--out must be a file (its work folder and report go beside it)")
        if self.max_error_rate is not None and not 0.0 <= self.max_error_rate <= 1.0:
            raise ConfigurationError(f"--max-error-rate must be within [0, 1], got {self.max_error_rate}")
        if same_file(self.input, self.out):
            raise ConfigurationError(f"--out is the input file: {self.out}")
        if self.review_out is not None:
            for name, other in (("the input file", self.input), ("the --out file", self.out)):
                if same_file(self.review_out, other):
                    raise ConfigurationError(f"--review-out is {name}: {self.review_out}")
        review = self.review()
        if review is None:
            if self.review_below is not None or self.review_sample:
                raise ConfigurationError("--review-below and --review-sample need --review-out FILE")
            return
        if review.below is None and not review.sample:
            raise ConfigurationError("--review-out needs --review-below P and/or --review-sample N")
        review.check()

    def _check_questions(self) -> None:
        """With questions: none of the flags that are a classifier's."""
        check_no_classifier(self.classifier, self.labels, self.multi_label, self.mode, flags=True)
        if self.review_out is not None:
            raise ConfigurationError(
                "--review-out is for a classifier's labels; --questions asks its own questions (give one of them)"
            )


def same_file(a: str, b: str) -> bool:
    """Whether two paths name one file: the same path once resolved (links followed), or, where
    both exist, the same file (a hard link). Stdin is no file."""
    if STDIN in (a, b):
        return False
    first, second = Path(a), Path(b)
    if first.resolve() == second.resolve():
        return True
    try:
        return os.path.samefile(first, second)
    except OSError:  # one of them does not exist (yet)
        return False


__all__ = ["ClassifyOptions", "same_file"]
