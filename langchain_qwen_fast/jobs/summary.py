"""What a job says about its rows: the counts per chunk (:class:`Counts`, kept in each chunk's
digest so that a resumed job counts the rows done before it too), their sum, the confidence
histogram (a PNG) and the report (JSON beside the output, and the lines printed at the end).

A row's confidence (:func:`confidence`) is the probability of its best label (single-label),
or under multi-label how sure the least sure of its label decisions is: the smallest
``max(p, 1 - p)`` over the labels. A row without probabilities (an error, constrained choice)
has none. A questions job counts each choice's labels (``answer_counts``) and draws each
choice's and score's confidence (the decision model's) in a panel of its own.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

from langchain_qwen_fast._core.decisions import DecisionOutcome
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.jobs.columns import ClassifiedColumns
from langchain_qwen_fast.jobs.parts import atomic_write

if TYPE_CHECKING:
    from typing import Self

#: The histogram's bins: this many equal steps of confidence from 0 to 1.
BINS = 20
#: The stratum (and label count) of rows with no label: abstained, or no label passed under
#: multi-label.
NO_LABEL = "(none)"


def confidence(result: Classification | BaseException) -> float | None:
    """How sure the classifier was of a row (see the module docstring); None without scores."""
    if isinstance(result, BaseException):
        return None
    return _sure(result.scores, result.multi_label)


def _sure(scores: Mapping[str, float] | None, multi_label: bool) -> float | None:
    """:func:`confidence` from a row's probabilities."""
    if not scores:
        return None
    if multi_label:
        return min(max(p, 1.0 - p) for p in scores.values())
    return max(scores.values())


def stratum(result: Classification) -> str:
    """The row's predicted label as the review sample and the histogram group it."""
    return result.label if result.label is not None else NO_LABEL


def error_kind(error: BaseException) -> str:
    """An error's kind in the counts: its type's name (or, read back from a written row, the
    name its text starts with)."""
    return str(getattr(error, "kind", type(error).__name__))


@dataclass
class Counts:
    """Counts over some rows: in one chunk's digest, and summed over the job."""

    rows: int = 0
    #: rows per predicted label (``label``; :data:`NO_LABEL` for none)
    label_counts: dict[str, int] = field(default_factory=dict)
    #: multi-label: rows per chosen label (a row counts once per label in ``labels``)
    chosen_counts: dict[str, int] = field(default_factory=dict)
    abstained: int = 0
    errors: int = 0
    error_kinds: dict[str, int] = field(default_factory=dict)
    #: per predicted label (a questions job: per choice and score), rows per confidence bin
    #: (:data:`BINS` from 0 to 1)
    histogram: dict[str, list[int]] = field(default_factory=dict)
    #: a questions job: per choice, rows per chosen label (:data:`NO_LABEL` for refused)
    answer_counts: dict[str, dict[str, int]] = field(default_factory=dict)

    def add(self, result: Classification | DecisionOutcome | BaseException) -> None:
        """Count one row's result."""
        self.rows += 1
        if isinstance(result, BaseException):
            self.errors += 1
            kind = error_kind(result)
            self.error_kinds[kind] = self.error_kinds.get(kind, 0) + 1
            return
        if isinstance(result, DecisionOutcome):
            self._add_answers(result)
            return
        group = stratum(result)
        self.label_counts[group] = self.label_counts.get(group, 0) + 1
        if result.multi_label:
            for label in result.labels:
                self.chosen_counts[label] = self.chosen_counts.get(label, 0) + 1
        self.abstained += result.abstained
        sure = confidence(result)
        if sure is not None:
            bins = self.histogram.setdefault(group, [0] * BINS)
            bins[min(int(sure * BINS), BINS - 1)] += 1

    def add_classified(self, chunk: ClassifiedColumns) -> None:
        """Count rows classified without error from their columns: what :meth:`add` counts of
        each, a column at a time."""
        self.rows += len(chunk)
        groups = [NO_LABEL if label is None else label for label in chunk.label]
        label_counts = self.label_counts
        for group, n in Counter(groups).items():
            label_counts[group] = label_counts.get(group, 0) + n
        if chunk.multi_label:
            chosen = self.chosen_counts
            for labels in chunk.labels or ():
                for label in labels:
                    chosen[label] = chosen.get(label, 0) + 1
        self.abstained += sum(chunk.abstained)
        scores = chunk.scores
        if not chunk.multi_label and all(scores) and set(map(type, scores)) == {dict}:
            sure: list[float | None] = list(map(max, map(dict.values, cast("list[dict[str, float]]", scores))))
        else:
            sure = [_sure(given, chunk.multi_label) for given in scores]
        step = float(BINS)
        binned = Counter((group, int(p * step)) for group, p in zip(groups, sure) if p is not None)
        for (group, at), n in binned.items():
            bins = self.histogram.setdefault(group, [0] * BINS)
            bins[min(at, BINS - 1)] += n

    def _add_answers(self, outcome: DecisionOutcome) -> None:
        """A questions job's row: its choices' labels, its confidences, and whether any of its
        choices was refused (``abstained``)."""
        self.abstained += any(answered.refused for answered in outcome.answers)
        for answered in outcome.answers:
            question = answered.question
            kind = question.kind_spec
            if kind.chooses_label:
                value = kind.value(answered)
                chosen = NO_LABEL if value is None else str(value)
                labels = self.answer_counts.setdefault(question.name, {})
                labels[chosen] = labels.get(chosen, 0) + 1
            if kind.has_confidence:
                bins = self.histogram.setdefault(question.name, [0] * BINS)
                bins[min(int(answered.confidence * BINS), BINS - 1)] += 1

    def merge(self, other: Counts) -> None:
        """Add ``other``'s counts to these."""
        self.rows += other.rows
        self.abstained += other.abstained
        self.errors += other.errors
        for mine, theirs in (
            (self.label_counts, other.label_counts),
            (self.chosen_counts, other.chosen_counts),
            (self.error_kinds, other.error_kinds),
        ):
            for key, n in theirs.items():
                mine[key] = mine.get(key, 0) + n
        for question, labels in other.answer_counts.items():
            mine_labels = self.answer_counts.setdefault(question, {})
            for label, n in labels.items():
                mine_labels[label] = mine_labels.get(label, 0) + n
        for label, bins in other.histogram.items():
            mine_bins = self.histogram.setdefault(label, [0] * BINS)
            for i, n in enumerate(bins):
                mine_bins[i] += n

    def to_json(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> Counts:
        return cls(**{name: data[name] for name in cls.__dataclass_fields__ if name in data})


def total(digests: Iterable[Mapping[str, Any]]) -> Counts:
    """The counts of every chunk, summed."""
    counts = Counts()
    for digest in digests:
        counts.merge(Counts.from_json(digest))
    return counts


@dataclass(frozen=True)
class JobReport:
    """What a finished job did; written as JSON beside the output (:attr:`report`)."""

    output: str
    #: the output's rows: every input row, once, in input order
    rows: int
    #: rows this run classified (the others were done by an earlier, interrupted run)
    classified_rows: int
    #: rows found done in the work folder when this run started
    resumed_rows: int
    #: this run's seconds, from start to the finished output
    seconds: float
    #: this run's classified rows per second
    rows_per_s: float
    label_counts: dict[str, int]
    #: multi-label: rows per chosen label; None for single-label
    chosen_counts: dict[str, int] | None
    abstained: int
    errors: int
    error_kinds: dict[str, int]
    histogram: str | None
    report: str
    review: dict[str, Any] | None = None
    options: dict[str, Any] = field(default_factory=dict)
    #: a questions job: per choice question, rows per chosen label (``abstained``: rows with a
    #: refused choice); None for a classifier's
    answer_counts: dict[str, dict[str, int]] | None = None

    @classmethod
    def of(
        cls,
        counts: Counts,
        *,
        multi_label: bool,
        output: str,
        classified_rows: int,
        resumed_rows: int,
        seconds: float,
        histogram: str | None,
        report: str,
        review: dict[str, Any] | None,
        options: dict[str, Any],
        questions: bool = False,
    ) -> Self:
        """The report of a job whose output holds the rows ``counts`` counted, of which this run
        classified ``classified_rows`` in ``seconds``; ``questions``: a questions job's."""
        return cls(
            output=output,
            rows=counts.rows,
            classified_rows=classified_rows,
            resumed_rows=resumed_rows,
            seconds=round(seconds, 3),
            rows_per_s=round(classified_rows / seconds, 1) if seconds > 0 else 0.0,
            label_counts=counts.label_counts,
            chosen_counts=counts.chosen_counts if multi_label else None,
            abstained=counts.abstained,
            errors=counts.errors,
            error_kinds=counts.error_kinds,
            histogram=histogram,
            report=report,
            review=review,
            options=options,
            answer_counts=counts.answer_counts if questions else None,
        )

    def to_json(self) -> dict[str, Any]:
        return asdict(self)


def render(report: JobReport) -> str:
    """The lines printed when a job ends: the label distribution, abstained and error counts,
    rows/s, and where everything went."""
    lines = [f"wrote {report.rows} rows to {report.output}"]
    if report.resumed_rows:
        lines[0] += f" ({report.resumed_rows} done by an earlier run, {report.classified_rows} now)"
    distributions = {f"{q} distribution:": n for q, n in (report.answer_counts or {}).items()}
    if report.answer_counts is None:
        distributions = {"label distribution:": report.label_counts}
    for title, counted in distributions.items():
        width = max((len(label) for label in counted), default=5)
        labelled = sum(counted.values())
        lines.append(title)
        for label, n in sorted(counted.items(), key=lambda kv: (-kv[1], kv[0])):
            share = n / labelled if labelled else 0.0
            lines.append(f"  {label:<{width}}  {n:>9}  {share:6.1%}")
    if report.chosen_counts is not None:
        chosen = ", ".join(f"{label} {n}" for label, n in sorted(report.chosen_counts.items()))
        lines.append(f"chosen labels (multi-label): {chosen or 'none'}")
    kinds = ", ".join(f"{kind} {n}" for kind, n in sorted(report.error_kinds.items()))
    lines.append(f"abstained: {report.abstained}   errors: {report.errors}" + (f" ({kinds})" if kinds else ""))
    lines.append(f"{report.rows_per_s:.1f} rows/s ({report.classified_rows} rows in {report.seconds:.1f} s)")
    if report.review is not None:
        review = report.review
        lines.append(
            f"review queue: {review['rows']} rows ({review['below']} under {review['below_threshold']}, "
            f"{review['sampled']} sampled) in {review['path']}"
        )
    written = [report.report, *([report.histogram] if report.histogram else [])]
    lines.append("wrote " + ", ".join(written))
    return "\n".join(lines)


def draw_histogram(counts: Counts, path: Path, folder: Path | None = None) -> Path:
    """A PNG of confidence per predicted label (or per choice and score): one panel per label, rows per bin (Agg
    backend: no display needed), written whole or not at all (its temporary file in
    ``folder``, default beside it)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    groups = sorted(counts.histogram) or [NO_LABEL]
    columns = min(4, len(groups))
    rows = -(-len(groups) // columns)
    figure, axes = plt.subplots(rows, columns, figsize=(3.2 * columns, 2.4 * rows), squeeze=False, sharex=True)
    edges = [i / BINS for i in range(BINS)]
    for ax, group in zip(axes.flat, groups):
        bins = counts.histogram.get(group, [0] * BINS)
        ax.bar(edges, bins, width=1 / BINS, align="edge", color="#4C72B0", edgecolor="white", linewidth=0.5)
        ax.set_title(f"{group} ({sum(bins)})", fontsize=9)
        ax.set_xlim(0, 1)
        ax.tick_params(labelsize=7)
    for ax in list(axes.flat)[len(groups) :]:
        ax.set_visible(False)
    figure.supxlabel("confidence", fontsize=9)
    figure.supylabel("rows", fontsize=9)
    figure.tight_layout()
    try:
        atomic_write(path, lambda tmp: figure.savefig(tmp, dpi=110, format="png"), folder)
    finally:
        plt.close(figure)
    return path
