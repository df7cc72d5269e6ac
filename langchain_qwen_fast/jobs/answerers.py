"""What answers a job's rows, and how a job names it: the two ways a chunk is answered
(:class:`RowAnswerer`): a classifier's labels (:class:`LabelAnswerer`, with :mod:`.columns`'
columns) or a question set (:class:`~.questions.QuestionAsker`), and the checks that a job
names one of them, one way (:func:`check_classifier_choice`, :func:`check_no_classifier`).

Both the streaming job (:mod:`.job`) and the Ray Data job (:mod:`.ray_data`) answer their rows
through these.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, Protocol

from langchain_qwen_fast._core.decisions import DecisionOutcome
from langchain_qwen_fast._core.fingerprints import answer_settings
from langchain_qwen_fast.classification import Classification
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.jobs.columns import added_columns, result_columns

if TYPE_CHECKING:
    from langchain_qwen_fast.engine import EngineClassifier

#: One row's answer: a classifier's, a question set's, or the error in its place.
Result = Classification | DecisionOutcome | BaseException


def check_classifier_choice(
    classifier: str | None, labels: Sequence[str] | None, multi_label: bool, *, flags: bool
) -> None:
    """:class:`ConfigurationError` unless a job names its classifier one way: a saved
    ``classifier``, or two labels or more (``multi_label`` is for labels: a saved classifier
    says whether it is multi-label). ``flags``: name ``qwen-fast classify``'s flags, else the
    fields."""
    saved, given, multi, named = (
        ("--classifier DIR", "--labels A,B,C", "--multi-label", "--labels")
        if flags
        else ("a saved classifier", "labels", "multi_label", "labels")
    )
    if (classifier is None) == (labels is None):
        raise ConfigurationError(f"give {saved} or {given} (one of them)")
    if classifier is not None and multi_label:
        raise ConfigurationError(f"{multi} is for {named}; a saved classifier says whether it is multi-label")
    if labels is not None and len(set(labels)) < 2:
        raise ConfigurationError(f"{named} needs at least two distinct labels, got {list(labels)}")


def check_no_classifier(
    classifier: str | None, labels: Sequence[str] | None, multi_label: bool, mode: str | None, *, flags: bool
) -> None:
    """:class:`ConfigurationError` when a job that asks questions names a classifier too (or a
    classifier's settings). ``flags``: name ``qwen-fast classify``'s flags, else the fields."""
    given = {
        ("--classifier", "classifier"): classifier is not None,
        ("--labels", "labels"): labels is not None,
        ("--multi-label", "multi_label"): multi_label,
        ("--mode", "mode"): mode is not None,
    }
    for (flag, field_name), set_ in given.items():
        if set_:
            what, questions = (flag, "--questions") if flags else (field_name, "questions")
            raise ConfigurationError(
                f"{what} is for a classifier's labels; {questions} asks its own questions (give one of them)"
            )


def named_classifier(
    classifier: str | None, labels: Sequence[str] | None, multi_label: bool, **settings: Any
) -> EngineClassifier:
    """The classifier a job names: the saved one at ``classifier`` with ``settings`` on top, or
    one over ``labels``. A setting given as None keeps the classifier's own (or the default)."""
    from langchain_qwen_fast.engine import EngineClassifier

    overrides = {name: value for name, value in settings.items() if value is not None}
    if classifier is not None:
        return EngineClassifier.load(classifier, **overrides)
    assert labels is not None
    return EngineClassifier(labels=list(labels), multi_label=multi_label, **overrides)


class RowAnswerer(Protocol):
    """What answers a job's rows: a classifier's labels (:class:`LabelAnswerer`) or questions
    (:class:`~.questions.QuestionAsker`)."""

    #: the columns added to each row, in order
    added: list[str]
    #: the added columns that hold text (None: a classifier's, ``label`` and ``error``)
    text_columns: frozenset[str] | None
    multi_label: bool

    async def aprepare(self) -> None: ...

    def rows_in_flight(self) -> int:
        """Rows an engine call needs to keep every request in flight full (after the set-up)."""
        ...

    async def aanswer(self, values: Sequence[Any]) -> Sequence[Result]: ...

    def columns(self, result: Any) -> dict[str, Any]: ...

    def fingerprint(self) -> dict[str, Any]: ...

    async def aclose(self) -> None: ...

    def close(self) -> None: ...


class LabelAnswerer:
    """A classifier's side of a job: its labels' columns (:mod:`.columns`), from its engine."""

    def __init__(self, classifier: EngineClassifier) -> None:
        self.classifier = classifier
        self.labels = classifier.label_names
        self.multi_label = classifier.multi_label
        self.added = added_columns(self.labels, self.multi_label)
        self.text_columns: frozenset[str] | None = None

    async def aprepare(self) -> None:
        await self.classifier.engine.aprepare()

    def rows_in_flight(self) -> int:
        return self.classifier.engine.rows_in_flight()

    async def aanswer(self, values: Sequence[Any]) -> Sequence[Result]:
        return await self.classifier.engine.aclassify(list(values))

    def columns(self, result: Any) -> dict[str, Any]:
        return result_columns(result, self.labels, self.multi_label)

    def fingerprint(self) -> dict[str, Any]:
        """The classifier's settings that change answers, which a restart must find the same
        (its engine's, every one that counts: :func:`answer_settings`)."""
        return answer_settings(self.classifier.engine.settings)

    async def aclose(self) -> None:
        await self.classifier.aclose()

    def close(self) -> None:
        self.classifier.close()
