"""What a question kind is: everything the package does differently for one kind of decision
question, in one class. A kind says how its definition (a questions file's or LangChain's
``criteria``, or the OpenAI Decisions wire's answers) becomes the question's labels, how the
prompt asks it, how its probabilities become its answer, its job columns and its wire answer,
and what a job's summary counts of it.

The modules that treat kinds apart (the decision engine, the jobs' columns and summary, the
service's wire) ask the question's kind (``DecisionQuestion.kind_spec``) rather than branch
on its name. Pure: no LangChain (the decision model turns :meth:`QuestionKind.plain_answer`
into LangChain's answer types), no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, NamedTuple, Protocol

from langchain_qwen_fast._core.prompting import neutralize_control_tokens


class AskedQuestion(Protocol):
    """What a kind reads of a question (``decisions.DecisionQuestion`` is one), declared here so
    that the kinds need not import the module that registers them."""

    @property
    def name(self) -> str: ...
    @property
    def instructions(self) -> str: ...
    @property
    def labels(self) -> tuple[str, ...]: ...
    @property
    def descriptions(self) -> tuple[str | None, ...]: ...
    @property
    def legend(self) -> str: ...


class AnsweredQuestion(Protocol):
    """What a kind reads of an answer (``decisions.Answered`` is one)."""

    @property
    def question(self) -> AskedQuestion: ...
    @property
    def probabilities(self) -> tuple[float, ...]: ...
    @property
    def refused(self) -> bool: ...
    @property
    def by_label(self) -> dict[str, float]: ...
    @property
    def yes(self) -> float: ...
    @property
    def choice(self) -> str: ...
    @property
    def score(self) -> float: ...
    @property
    def confidence(self) -> float: ...


#: The suffix of a question's confidence column (``Q.confidence``).
CONFIDENCE = "confidence"
#: The prefix of a probability column (``Q.p_<label>``, and a classifier job's ``p_<label>``).
PROBABILITY_PREFIX = "p_"


def probability_column(label: str) -> str:
    """The column holding ``label``'s probability."""
    return f"{PROBABILITY_PREFIX}{label}"


class QuestionParts(NamedTuple):
    """A question as its kind reads its definition: its instructions as prompt text, its
    labels, their descriptions (None: no description), and its legend (JSON text the answer
    gives back; empty for none)."""

    instructions: str
    labels: tuple[str, ...]
    descriptions: tuple[str | None, ...]
    legend: str = ""


class WireDefinition(NamedTuple):
    """A wire question's definition as the engine takes it: the ``criteria`` the kind's
    :meth:`QuestionKind.parts` reads, and the values the wire's answer gives back, in the
    labels' order."""

    criteria: Any
    values: tuple[str | bool, ...]


class QuestionKind(ABC):
    """One kind of decision question (see the module docstring). A kind holds no state:
    one instance of each is registered in :data:`~langchain_qwen_fast._core.question_kinds.KINDS`."""

    #: the kind's name: a question's ``kind``, LangChain's and a questions file's ``type``
    name: ClassVar[str]
    #: its ``type`` on the OpenAI Decisions wire (``POST /v1/decisions``)
    wire_name: ClassVar[str]
    #: the field of a wire question that lists its answers (None: none, the labels are fixed)
    wire_answers_field: ClassVar[str | None] = None
    #: its answer is one of its labels, as text: its column holds text, a job's summary counts
    #: it per label, and ``abstain_below`` refuses it
    chooses_label: ClassVar[bool] = False
    #: its answer has a confidence: a confidence column and one probability column per label
    has_confidence: ClassVar[bool] = True

    # -- the definition -----------------------------------------------------------------------
    @abstractmethod
    def parts(self, name: str, instructions: str, criteria: Any) -> QuestionParts:
        """The question ``name`` from its instructions (as prompt text) and ``criteria`` as
        LangChain's question types give them; :class:`InvalidInputError` names what is wrong."""

    def wire_definition(self, answers: Sequence[Any], where: str) -> WireDefinition:
        """A wire question's answers (its :attr:`wire_answers_field`) as criteria and the
        values its answer gives back; :class:`InvalidInputError` names what is wrong."""
        return WireDefinition(None, ())

    # -- the prompt ---------------------------------------------------------------------------
    @abstractmethod
    def answer_line(self, question: AskedQuestion) -> str:
        """The line after the question's instructions saying how to answer it."""

    def legend_lines(self, question: AskedQuestion) -> list[str]:
        """The lines describing its answers: one per described label."""
        return [
            legend_line(label, description)
            for label, description in zip(question.labels, question.descriptions, strict=True)
            if description is not None
        ]

    # -- the answer ---------------------------------------------------------------------------
    def confidence(self, probabilities: Sequence[float]) -> float:
        """The answer's confidence: the most probable label's probability."""
        return max(probabilities)

    @abstractmethod
    def value(self, answered: AnsweredQuestion) -> Any:
        """The answer itself, as its own column holds it (None: refused)."""

    @abstractmethod
    def plain_answer(self, answered: AnsweredQuestion) -> dict[str, Any]:
        """The answer as LangChain's answer type of this kind takes it, less its ``type``."""

    @abstractmethod
    def wire_answer(self, answered: AnsweredQuestion, values: Sequence[str | bool]) -> dict[str, Any]:
        """The answer on the wire, less its ``type`` and ``name``; ``values`` are the wire's
        (:meth:`wire_definition`)."""

    # -- the job's columns --------------------------------------------------------------------
    def columns(self, question: AskedQuestion) -> list[str]:
        """The columns a questions job adds for the question, in order."""
        if not self.has_confidence:
            return [question.name]
        return [
            question.name,
            f"{question.name}.{CONFIDENCE}",
            *(f"{question.name}.{probability_column(label)}" for label in question.labels),
        ]

    def row(self, answered: AnsweredQuestion) -> dict[str, Any]:
        """The question's columns of one row, from its answer."""
        name = answered.question.name
        row = {name: self.value(answered)}
        if self.has_confidence:
            row[f"{name}.{CONFIDENCE}"] = answered.confidence
            for label, probability in zip(answered.question.labels, answered.probabilities, strict=True):
                row[f"{name}.{probability_column(label)}"] = probability
        return row

    def read_row(self, question: AskedQuestion, row: Mapping[str, Any]) -> tuple[tuple[float, ...], bool]:
        """A written row's probabilities for the question and whether it was refused."""
        cells = [row.get(f"{question.name}.{probability_column(label)}") for label in question.labels]
        refused = self.chooses_label and row.get(question.name) in (None, "")
        return tuple(float(p or 0.0) for p in cells), refused


def legend_line(label: str, description: str | None) -> str:
    """One answer's line in the prompt: ``- label: description``."""
    text = neutralize_control_tokens(description or "")
    return f"- {neutralize_control_tokens(label)}: {text}".rstrip()


def clamped(value: float) -> float:
    """A probability kept within 0..1 (float sums can land a hair outside)."""
    return min(1.0, max(0.0, value))


__all__ = [
    "CONFIDENCE",
    "PROBABILITY_PREFIX",
    "QuestionKind",
    "QuestionParts",
    "WireDefinition",
    "clamped",
    "legend_line",
    "probability_column",
]
