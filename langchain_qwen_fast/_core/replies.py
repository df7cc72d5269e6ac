"""A request's reply read into its prompts' answers, and answers into predictions.

A group of prompts goes out in one request; its reply is read where it arrives
(:func:`read_group`, on the transport's reader), each prompt's answer recorded under its step
and body (:func:`record`). With a one-step plan each answer is all a prediction needs, so the
reader makes the predictions too and a :class:`Finisher` makes them into results while the
other requests are still out.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.decisions import DecisionPlan, TokenCounts, UsageLedger, parse_usage
from langchain_qwen_fast._core.dispatch import Piece
from langchain_qwen_fast._core.prompting import ClassifierPlan, Prediction
from langchain_qwen_fast.errors import QwenFastError, ResponseFormatError

#: A group of prompts asked in one request: (body, step) pairs.
Group = list[tuple[str, int]]

_Combined = TypeVar("_Combined")


@dataclass(frozen=True)
class GroupReply:
    """A group's reply as read where it arrived: each prompt's answer (its step's scores, or
    the error its item ended with), in the group's order, and the reply's token counts."""

    answers: list[Any]
    counts: TokenCounts | None


def read_group(
    plan: ClassifierPlan, group: tuple[tuple[str, int], ...], finisher: Finisher | None, reply: Any
) -> GroupReply:
    """A group's decoded reply, for its (body, step) prompts, as a :class:`GroupReply`; with
    a ``finisher``, each prompt's prediction (or error) handed to it under its body."""
    try:
        items = vllm_api.reply_items(plan, reply)
    except ResponseFormatError as error:
        return GroupReply([error] * len(group), None)
    answers: list[Any] = []
    for position, (_, k) in enumerate(group):
        item = items.get(position)
        if item is None:
            answers.append(ResponseFormatError(f"reply has no choice for prompt {position} of its group"))
            continue
        try:
            answers.append(vllm_api.parse_item(plan, k, item))
        except QwenFastError as exc:
            answers.append(exc)
    if finisher is not None:
        finisher.add([(body, prediction_of(plan, [answer])) for (body, _), answer in zip(group, answers, strict=True)])
    return GroupReply(answers, parse_usage(reply))


def record(
    plan: ClassifierPlan, group: Group, piece: Piece, answers: list[dict[str, Any]], usage: UsageLedger | None
) -> None:
    """A request's reply (or the error it ended with) as its prompts' answers, and its token
    counts into ``usage``."""
    reply = piece.result
    if isinstance(reply, Exception):
        for body, k in group:
            answers[k][body] = reply
        return
    for (body, k), answer in zip(group, reply.answers, strict=True):
        answers[k][body] = answer
    if usage is not None:
        usage.record_counts(reply.counts, [(b, plan.steps[k].tail) for b, k in group])


def combined(answers: Sequence[Any], combine: Callable[[Sequence[Any]], _Combined]) -> _Combined | Exception:
    """``combine(answers)``, or the error the first failed answer (or the combining) ended with."""
    for answer in answers:  # a loop, not a generator: this runs once a text
        if isinstance(answer, Exception):
            return answer
    try:
        return combine(answers)
    except QwenFastError as exc:
        return exc


def prediction_of(plan: ClassifierPlan, answers: Sequence[Any]) -> Prediction | Exception:
    """A text's prediction from its steps' answers, or the error one of them (or their
    combination) ended with."""
    return combined(answers, lambda got: vllm_api.combine(plan, got))


def one_step(plan: ClassifierPlan) -> bool:
    """Whether each text's prediction needs one answer only, so its reply alone gives it."""
    return len(plan.steps) == 1 and not isinstance(plan, DecisionPlan)


#: Results a finisher makes at a time. Made one reply at a time, a batch's result objects
#: would reach the collector's oldest generation a few at a time and set off its full passes
#: several times a batch; made in blocks, about as often as when all are made at the end.
RESULTS_PER_BLOCK = 2048


class Finisher:
    """A level's results, made while its requests are out: the readers hand each reply's
    predictions here, and every :data:`RESULTS_PER_BLOCK` of them are made into results at
    once (``make``: a prediction or error to the body's result). Readers may run on several
    threads (the sync transport's), hence the lock around what waits."""

    def __init__(self, make: Callable[[Prediction | Exception], Any]) -> None:
        self._make = make
        self._waiting: list[tuple[str, Prediction | Exception]] = []
        self._made: dict[str, Any] = {}
        self._lock = threading.Lock()

    def add(self, predicted: list[tuple[str, Prediction | Exception]]) -> None:
        """Take a reply's predictions; make a block of results if one is due."""
        with self._lock:
            self._waiting += predicted
            if len(self._waiting) < RESULTS_PER_BLOCK:
                return
            ready, self._waiting = self._waiting, []
        self._make_all(ready)

    def finish(self) -> dict[str, Any]:
        """Every body's result handed in so far, the last ones made now."""
        with self._lock:
            ready, self._waiting = self._waiting, []
        self._make_all(ready)
        return self._made

    def _make_all(self, ready: list[tuple[str, Prediction | Exception]]) -> None:
        made = {body: self._make(predicted) for body, predicted in ready}
        with self._lock:
            self._made.update(made)


__all__ = [
    "RESULTS_PER_BLOCK",
    "Finisher",
    "Group",
    "GroupReply",
    "combined",
    "one_step",
    "prediction_of",
    "read_group",
    "record",
]
