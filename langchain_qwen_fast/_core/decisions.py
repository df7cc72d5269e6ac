"""Decisions: typed questions about a state, each answered from its answer tokens'
probabilities in one decode step. Pure: no I/O, no LangChain.

A request is a state (text, a conversation, or JSON) and a :class:`QuestionSet`. Every
question becomes a label set of its own: a ``choice`` its labels, a ``noul`` ``yes`` and
``no``, a ``score`` its levels ``0`` .. ``n-1``. What each kind does differently (its labels, its
lines in the prompt, its answer and confidence) is its class's, in
:mod:`~langchain_qwen_fast._core.question_kinds`. The prompt puts what is shared first, so
that vLLM's prefix cache computes it once:

    head     system turn: every question of the set, numbered, with its answers
    body     user turn: the state, rendered (:func:`render_state`)
    tail     one per question: a short user turn naming the question, then the assistant
             turn's opening (+ the label tokens already given, where labels share tokens)

The turns are written in the served model's chat format (:class:`QuestionSet`'s
``prompt_format``, fitted at set-up as the classifier's is: Qwen3's with the empty think block,
or plain ChatML without it; see :mod:`~langchain_qwen_fast._core.chat_formats`).

One question set over many states shares the head; many questions over one state share the
head and the state, and each question adds only its tail. The answers are read exactly as
``QwenClassifier`` reads labels (:mod:`~langchain_qwen_fast._core.prompting`): one step over
distinct first tokens, a step per node of the labels' token trie where they share first tokens.

Confidence (the same in the LangChain model and on ``/v1/decisions``):

* ``choice``: the chosen label's probability.
* ``score``: ``1 - sd / sd_max``, where ``sd`` is the standard deviation of the level
  distribution and ``sd_max = (n - 1) / 2`` the largest a distribution over ``n`` levels can
  have (half on each end): 1 when every bit of probability is on one level, 0 when it is
  split evenly between the two ends.
* ``noul``: none; the probability of yes is the answer.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_qwen_fast._core.content import (
    MEDIA_TYPES,
    Turn,
    content_text,
    json_value,
    media_type,
    optional_text,
)
from langchain_qwen_fast._core.prompting import (
    QWEN3,
    SYSTEM_OPEN,
    TURN_END,
    USER_OPEN,
    ClassifierPlan,
    LabelSet,
    PromptFormat,
    neutralize_control_tokens,
)
from langchain_qwen_fast._core.question_kinds import KINDS, NOUL_LABELS, QuestionKind, kind_named
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError

DECISION_INSTRUCTIONS = (
    "Answer questions about the input in the next user turn. Each question is asked on its own: "
    "answer it with one of its answers only."
)
#: The instructions of a set of one question, whose prompt asks it right after the input.
ONE_QUESTION_INSTRUCTIONS = "Answer the question about the input in the next user turn with one of its answers only."


@dataclass(frozen=True)
class DecisionQuestion:
    """One question, as the prompt asks it: its name (the answer's key), its kind, its
    instructions as text, and its answers with their descriptions (None: no description)."""

    name: str
    #: the kind's name (a key of :data:`~langchain_qwen_fast._core.question_kinds.KINDS`):
    #: what saved question sets and fingerprints hold; :attr:`kind_spec` is the kind itself
    kind: str
    instructions: str
    labels: tuple[str, ...]
    descriptions: tuple[str | None, ...]
    #: a score's levels as given, as JSON text (the answer's legend gives them back)
    legend: str = ""

    @classmethod
    def of(cls, kind: str, name: str, instructions: Any, criteria: Any = None) -> DecisionQuestion:
        """A question of the kind called ``kind``, from its instructions and its ``criteria``
        as LangChain's question types give them (:meth:`QuestionKind.parts`)."""
        spec = kind_named(kind)
        return cls(name, spec.name, *spec.parts(name, instructions, criteria))

    @classmethod
    def noul(cls, name: str, instructions: Any, true: Any = None, false: Any = None) -> DecisionQuestion:
        """A yes/no question; ``true`` and ``false`` describe what counts as each."""
        return cls.of("noul", name, instructions, {"true": true, "false": false})

    @classmethod
    def choice(cls, name: str, instructions: Any, criteria: Mapping[str, Any]) -> DecisionQuestion:
        """One label of ``criteria`` (label -> description)."""
        return cls.of("choice", name, instructions, criteria)

    @classmethod
    def score(cls, name: str, instructions: Any, levels: Sequence[Any]) -> DecisionQuestion:
        """A level ``0`` .. ``n-1`` of ``levels`` (their descriptions, in order; two at least)."""
        return cls.of("score", name, instructions, levels)

    @property
    def kind_spec(self) -> QuestionKind:
        """The question's kind: how it is asked, answered and written."""
        return KINDS[self.kind]

    def render(self, number: int) -> str:
        """This question in the prompt's head, as question ``number``."""
        spec = self.kind_spec
        lines = [f"Question {number}: {neutralize_control_tokens(self.instructions)}", spec.answer_line(self)]
        return "\n".join([*lines, *spec.legend_lines(self)])


@dataclass(frozen=True)
class QuestionSet:
    """The questions of a request, in order (hashable: requests with the same set share a
    plan, and their prompts share its head), and the chat format their prompts are written in
    (the decision engine fits it to the served model)."""

    questions: tuple[DecisionQuestion, ...]
    #: compared, not hashed: a request's set is hashed to find its plan, and its questions
    #: alone tell sets apart there
    prompt_format: PromptFormat = dataclasses.field(default=QWEN3, hash=False)

    def __post_init__(self) -> None:
        if not self.questions:
            raise InvalidInputError("questions is empty: ask at least one question")
        names = [q.name for q in self.questions]
        repeated = sorted({n for n in names if names.count(n) > 1})
        if repeated:
            raise InvalidInputError(f"question names must be distinct; repeated: {repeated}")

    def render_head(self) -> str:
        """The fixed start of every prompt of this set: a system turn with every question."""
        instructions = ONE_QUESTION_INSTRUCTIONS if len(self.questions) == 1 else DECISION_INSTRUCTIONS
        parts = [instructions, *(q.render(k) for k, q in enumerate(self.questions, 1))]
        return SYSTEM_OPEN + "\n\n".join(parts) + TURN_END

    def tails(self) -> tuple[str, ...]:
        """What follows the state to ask each question, in order: a short turn naming the
        question, computed once per question and state; a set of one question is answered
        right after the state, as a classifier's prompt is (nothing to tell apart)."""
        suffix = self.prompt_format.answer_suffix
        if len(self.questions) == 1:
            return (suffix,)
        return tuple(f"{TURN_END}{USER_OPEN}Answer question {k}.{suffix}" for k in range(1, len(self.questions) + 1))

    def in_format(self, prompt_format: PromptFormat) -> QuestionSet:
        """These questions, their prompts written in ``prompt_format`` (this set where they are)."""
        return self if prompt_format == self.prompt_format else dataclasses.replace(self, prompt_format=prompt_format)

    def label_set(self, index: int) -> LabelSet:
        """Question ``index``'s answers as a label set, in this set's format (only a one-label
        choice has fewer than two, and it is answered without asking)."""
        question = self.questions[index]
        if len(question.labels) < 2:
            return LabelSet(question.labels, {}, question.instructions, prompt_format=self.prompt_format)
        try:
            labels = LabelSet.build(question.labels)
        except ConfigurationError as exc:
            raise InvalidInputError(f"question {question.name!r}: {exc}") from None
        same = labels.prompt_format == self.prompt_format
        return labels if same else dataclasses.replace(labels, prompt_format=self.prompt_format)


@dataclass(frozen=True)
class DecisionPlan(ClassifierPlan):
    """A question set's plan: the shared head, every question's steps one after another, and
    each question's own plan (its label set, scoring and steps) to read its answer with."""

    questions: QuestionSet | None = None
    parts: tuple[ClassifierPlan, ...] = ()

    def split(self, answers: Sequence[Any]) -> Iterator[tuple[ClassifierPlan, Sequence[Any]]]:
        """Each question's plan and its share of a state's step answers."""
        start = 0
        for part in self.parts:
            yield part, answers[start : start + len(part.steps)]
            start += len(part.steps)


@dataclass(frozen=True)
class Answered:
    """One question's answer: its probabilities, one per answer in the question's order
    (temperature applied), and whether it was refused (a choice under ``abstain_below``)."""

    question: DecisionQuestion
    probabilities: tuple[float, ...]
    refused: bool = False

    @property
    def by_label(self) -> dict[str, float]:
        """Each answer's probability by its label."""
        return dict(zip(self.question.labels, self.probabilities, strict=True))

    @property
    def yes(self) -> float:
        """A noul's answer: the probability of yes."""
        return self.probabilities[0]

    @property
    def choice(self) -> str:
        """A choice's most probable label (the first of equals)."""
        best = max(range(len(self.probabilities)), key=self.probabilities.__getitem__)
        return self.question.labels[best]

    @property
    def score(self) -> float:
        """A score's expected level."""
        return sum(i * p for i, p in enumerate(self.probabilities))

    @property
    def confidence(self) -> float:
        """See the module docstring: the chosen label's probability for a choice, one less
        the relative spread of the levels for a score (the kind's
        :meth:`~langchain_qwen_fast._core.question_kinds.QuestionKind.confidence`)."""
        return self.question.kind_spec.confidence(self.probabilities)


@dataclass(frozen=True)
class TokenUsage:
    """The tokens a request's prompts took: prompt tokens, those of them the server's
    prefix cache held (None where it does not report them), and output tokens."""

    prompt: int = 0
    cached: int | None = None
    output: int = 0


class UsageLedger:
    """The tokens each prompt body took, summed over its requests. A request that carried
    several bodies' prompts (vLLM counts a request's tokens, not a prompt's) gives each
    prompt a share of its counts in proportion to the prompt's length."""

    def __init__(self) -> None:
        self._shares: dict[str, list[float]] = {}

    def record(self, reply: Any, prompts: Sequence[tuple[str, str]]) -> None:
        """A request's reply, for its ``(body, tail)`` prompts (an error reply took nothing)."""
        self.record_counts(parse_usage(reply), prompts)

    def record_counts(self, counts: TokenCounts | None, prompts: Sequence[tuple[str, str]]) -> None:
        """A request's token counts (:func:`parse_usage`), for its ``(body, tail)`` prompts."""
        if counts is None or not prompts:
            return
        weights = [len(body) + len(tail) + 1 for body, tail in prompts]
        total = sum(weights)
        for (body, _), weight in zip(prompts, weights, strict=True):
            share = self._shares.setdefault(body, [0.0, 0.0, 0.0, 0.0])
            for i, count in enumerate(counts):
                share[i] += -1.0 if count is None else count * weight / total
            share[3] += 1

    def of(self, body: str) -> TokenUsage:
        """What ``body``'s prompts took (nothing for a body answered from the cache)."""
        prompt, cached, output, _ = self._shares.get(body, (0.0, 0.0, 0.0, 0.0))
        return TokenUsage(round(prompt), None if cached < 0 else round(cached), round(output))


#: A reply's ``(prompt tokens, cached prompt tokens or None, output tokens)``.
TokenCounts = tuple[int, int | None, int]


def parse_usage(reply: Any) -> TokenCounts | None:
    """A completions reply's ``(prompt tokens, cached prompt tokens or None, output tokens)``,
    or None for an error or a reply without counts."""
    usage = reply.get("usage") if isinstance(reply, dict) else None
    if not isinstance(usage, dict):
        return None
    details = usage.get("prompt_tokens_details")
    cached = details.get("cached_tokens") if isinstance(details, dict) else None
    try:
        return (
            int(usage.get("prompt_tokens") or 0),
            None if cached is None else int(cached),
            int(usage.get("completion_tokens") or 0),
        )
    except (TypeError, ValueError):
        return None


@dataclass(frozen=True)
class DecisionOutcome:
    """One request's answers, in its questions' order, and what it took."""

    answers: tuple[Answered, ...]
    usage: TokenUsage


# -- the state, rendered --------------------------------------------------------------------
def render_state(state: Any) -> str:
    """A state as the text the prompt carries: text as it is; a conversation as one
    ``role: text`` line per turn; JSON (objects and arrays, turns anywhere inside as
    ``{"role", "content"}`` objects) as compact JSON with sorted keys, so that equal states
    always render alike. :class:`InvalidInputError` names what cannot be rendered: a media
    block, a value JSON has no form for, an empty state."""
    if isinstance(state, str):
        if not state.strip():
            raise InvalidInputError("state is empty or whitespace only")
        return state
    if isinstance(state, Turn):
        return _turn_line(state)
    if isinstance(state, Sequence) and not isinstance(state, (bytes, bytearray)):
        if not state:
            raise InvalidInputError("state is an empty list")
        if all(isinstance(item, Turn) for item in state):
            return "\n".join(_turn_line(turn) for turn in state)
    if isinstance(state, (Mapping, Sequence)) and not isinstance(state, (bytes, bytearray)):
        return json.dumps(json_value(state, "state"), ensure_ascii=False, sort_keys=True, separators=(",", ":"))
    kind = "None" if state is None else type(state).__name__
    raise InvalidInputError(f"state must be text, messages, or a JSON object or array, got {kind}")


def _turn_line(turn: Turn) -> str:
    return f"{turn.role}: {turn.text}"


__all__ = [
    "DECISION_INSTRUCTIONS",
    "MEDIA_TYPES",
    "NOUL_LABELS",
    "ONE_QUESTION_INSTRUCTIONS",
    "Answered",
    "DecisionOutcome",
    "DecisionPlan",
    "DecisionQuestion",
    "QuestionKind",
    "QuestionSet",
    "TokenCounts",
    "TokenUsage",
    "Turn",
    "UsageLedger",
    "content_text",
    "media_type",
    "optional_text",
    "parse_usage",
    "render_state",
]
