"""The decision engine: answers decision requests (a rendered state and a
:class:`~langchain_qwen_fast._core.decisions.QuestionSet`) on an :class:`Engine`'s servers.

It learns once what the server can do (the model it serves, its context, its chat format,
whether it takes a list of prompts and returns chosen tokens' logprobs), then a plan per
question set (its prompts written in that format, the answers' tokens, the head's length),
kept in a bounded cache. Requests with the same
question set go through the classifier's procedure together, as one batch over their
states (deduplicated, length-checked, grouped, cached); requests with different sets run side
by side, sharing the requests in flight. No LangChain: the decision model and the HTTP
service both call it.
"""

from __future__ import annotations

import dataclasses
import threading
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.chat_formats import chat_format_steps
from langchain_qwen_fast._core.classification import Decided
from langchain_qwen_fast._core.decisions import (
    Answered,
    DecisionOutcome,
    DecisionPlan,
    DecisionQuestion,
    QuestionSet,
    TokenUsage,
    UsageLedger,
)
from langchain_qwen_fast._core.engine import ONE_PROMPT_MAX_CONCURRENCY_PER_REPLICA, Engine
from langchain_qwen_fast._core.procedure import Procedure, PromptLists
from langchain_qwen_fast._core.prompting import QWEN3, ClassifierPlan, LabelSet, PromptFormat, Step, plan_steps
from langchain_qwen_fast._core.settings import Rules
from langchain_qwen_fast._core.transport import Steps, adrive, drive, gather
from langchain_qwen_fast.errors import ConfigurationError, ContextLengthError, ResponseFormatError

#: Question sets whose plans are kept (least recently used first out).
MAX_KEPT_PLANS = 256

#: A decision request as the engine takes it: the rendered state and its questions.
DecisionRequest = tuple[str, QuestionSet]

_PROBE = QuestionSet((DecisionQuestion.noul("probe", "Is this a probe?"),))


#: The context taken for a model whose ``/v1/models`` entry gives none: room for any prompt the
#: client would send, the server's own limit the only check.
_UNKNOWN_CONTEXT = 1 << 20


@dataclass(frozen=True)
class _Server:
    """What the set-up learnt of the server."""

    max_model_len: int
    served: str
    prompt_format: PromptFormat = QWEN3
    takes_prompt_lists: bool = True
    has_logprob_token_ids: bool = True


class Decider:
    """Answers decision requests on ``engine``'s servers (see the module docstring), with
    ``rules`` (temperature, abstention; default none) rather than the engine's own: a
    classifier's calibration belongs to its labels, not to other questions. Shares the
    engine's transport, tokenizer and cache. Thread-safe; usable from any number of event loops."""

    def __init__(self, engine: Engine, rules: Rules | None = None) -> None:
        self._engine = engine
        settings = dataclasses.replace(engine.settings, rules=rules or Rules(), label_sets={})
        self._procedure = Procedure(settings, engine.procedure.tokenizer)
        self._server: _Server | None = None
        self._plans: OrderedDict[QuestionSet, DecisionPlan] = OrderedDict()
        self._lock = threading.Lock()

    @property
    def engine(self) -> Engine:
        """The engine whose transport and procedure this decider uses."""
        return self._engine

    def decide(self, requests: Sequence[DecisionRequest | Exception]) -> list[DecisionOutcome | Exception]:
        """Each request's outcome or the exception it ended with, in order (an exception
        given in a request's place stays there)."""
        steps = self._steps(list(requests))
        return drive(self._engine.transport, steps, self._in_flight(), self._engine.deadline())

    async def adecide(self, requests: Sequence[DecisionRequest | Exception]) -> list[DecisionOutcome | Exception]:
        """Async :meth:`decide`."""
        steps = self._steps(list(requests))
        return await adrive(self._engine.transport, steps, self._in_flight(), self._engine.deadline())

    def plan(self, questions: QuestionSet) -> DecisionPlan:
        """``questions``' plan (learnt from the server on first use)."""
        return drive(self._engine.transport, self._plan_steps(questions), self._in_flight())

    def _in_flight(self) -> int:
        settings = self._engine.settings
        if settings.max_concurrency or self._server is None or self._server.takes_prompt_lists:
            return self._engine.max_concurrency()
        return ONE_PROMPT_MAX_CONCURRENCY_PER_REPLICA * self._engine.replica_count

    # -- the steps ----------------------------------------------------------------------------
    def _steps(self, requests: list[DecisionRequest | Exception]) -> Steps[list[DecisionOutcome | Exception]]:
        results: list[DecisionOutcome | Exception | None] = [None] * len(requests)
        by_set: dict[QuestionSet, list[int]] = {}
        for i, request in enumerate(requests):
            if isinstance(request, Exception):
                results[i] = request
            else:
                by_set.setdefault(request[1], []).append(i)
        if by_set:
            runs = [self._set_steps(qs, [requests[i][0] for i in places]) for qs, places in by_set.items()]  # type: ignore[index]
            for places, outcomes in zip(by_set.values(), (yield from gather(runs)), strict=True):
                for i, outcome in zip(places, outcomes, strict=True):
                    results[i] = outcome
        return results  # type: ignore[return-value]

    def _set_steps(self, questions: QuestionSet, states: list[str]) -> Steps[list[DecisionOutcome | Exception]]:
        """Every state's outcome under one question set."""
        try:
            plan = yield from self._plan_steps(questions)
        except Exception as exc:
            return [exc] * len(states)
        ledger = UsageLedger()
        results = yield from self._procedure.classify_steps(states, {(): plan}, usage=ledger)
        return [
            _outcome(questions, result, ledger.of(plan.body(state))) if isinstance(result, Decided) else result
            for state, result in zip(states, results, strict=True)
        ]

    def _server_steps(self) -> Steps[_Server]:
        """What the server can do, learnt once: the model it serves and its context, and its
        chat format (:func:`~langchain_qwen_fast._core.chat_formats.chat_format_steps`, asked
        beside the first request, at no cost in round trips), then a probe that finds whether
        it takes a list of prompts and returns chosen tokens' logprobs (both
        :class:`~langchain_qwen_fast._core.procedure.Procedure` probes)."""
        if self._server is not None:
            return self._server
        runs: list[Steps[Any]] = [self._served_steps(), chat_format_steps(self._procedure)]
        server, prompt_format = yield from gather(runs)
        if isinstance(prompt_format, Exception):
            raise prompt_format
        server = dataclasses.replace(server, prompt_format=prompt_format)
        probe = yield from self._built_steps(_PROBE, server)
        lists = PromptLists()
        answer = yield from self._procedure.probe_steps(probe, 0, lists)
        server = dataclasses.replace(
            server,
            takes_prompt_lists=bool(lists.taken),
            has_logprob_token_ids=vllm_api.probe_has_logprob_token_ids(probe, answer),
        )
        self._server = server
        return server

    def _served_steps(self) -> Steps[_Server]:
        """The model the server serves, and its context."""
        reply = (yield [vllm_api.models_call()])[0]
        if isinstance(reply, Exception):
            raise reply
        served = vllm_api.parse_models(reply)
        model = self._engine.settings.model
        if model not in served:
            where = ", ".join(self._engine.settings.base_urls) or "the server"
            raise ConfigurationError(f"model {model!r} is not served at {where}; it serves {sorted(served)}")
        # An unknown context (0) is checked by the server alone, as the classifier's is.
        context = vllm_api.served_context(reply, model) or _UNKNOWN_CONTEXT
        return _Server(context, vllm_api.model_identity(reply, model))

    def _plan_steps(self, questions: QuestionSet) -> Steps[DecisionPlan]:
        server = yield from self._server_steps()
        with self._lock:
            known = self._plans.get(questions)
            if known is not None:
                self._plans.move_to_end(questions)
                return known
        plan = yield from self._built_steps(questions, server)
        with self._lock:
            self._plans[questions] = plan
            while len(self._plans) > MAX_KEPT_PLANS:
                self._plans.popitem(last=False)
        return plan

    def _built_steps(self, questions: QuestionSet, server: _Server) -> Steps[DecisionPlan]:
        """A question set's plan, its prompts written in the server's chat format: every
        answer's tokens, the head's and the tails' lengths (one round of ``/tokenize`` calls,
        or none with a local tokenizer)."""
        questions = questions.in_format(server.prompt_format)
        head = questions.render_head()
        tails = list(questions.tails())
        asked = [q for q in questions.questions if len(q.labels) > 1]
        words = list(dict.fromkeys(label for q in asked for label in q.labels))
        ids = yield from self._procedure.tokenize_steps([*words, "<|im_end|>", head, *tails])
        tokens = dict(zip(words, map(tuple, ids), strict=False))
        end, head_ids, tail_ids = ids[len(words)][0], ids[len(words) + 1], ids[len(words) + 2 :]
        parts: list[ClassifierPlan] = []
        for k, (question, tail) in enumerate(zip(questions.questions, tails, strict=True)):
            label_set = questions.label_set(k)
            if len(question.labels) < 2:
                parts.append(_part(label_set, "label_tokens", (), server))
                continue
            scoring, steps, paths = plan_steps([tokens[x] for x in question.labels], end, tail)
            if scoring == "label_sequences":
                steps = yield from self._shared_token_steps(question, steps, server)
            parts.append(_part(label_set, scoring, steps, server, paths=paths, end_token=end))
        all_steps = tuple(step for part in parts for step in part.steps)
        longest_tail = max((len(tail_ids[k]) for k in range(len(tails))), default=0)
        overhead = len(head_ids) + longest_tail + max((len(s.path) for s in all_steps), default=0)
        if overhead + 1 >= server.max_model_len:
            raise ContextLengthError(
                f"the questions take {overhead} tokens, leaving no room for the state in the server's context of "
                f"{server.max_model_len}; ask fewer or shorter questions",
                tokens=overhead,
                limit=server.max_model_len,
            )
        plan = DecisionPlan(
            label_set=LabelSet((), {}, head, prompt_format=questions.prompt_format),
            scoring="label_tokens",
            head=head,
            steps=all_steps,
            max_tokens=1,
            overhead_tokens=overhead,
            max_model_len=server.max_model_len,
            has_logprob_token_ids=server.has_logprob_token_ids,
            takes_prompt_lists=server.takes_prompt_lists,
            served=server.served,
            questions=questions,
            parts=tuple(parts),
        )
        tokenizer = self._procedure.tokenizer
        return plan if tokenizer is None else plan.with_tokenizer(tokenizer)  # type: ignore[return-value]

    def _shared_token_steps(
        self, question: DecisionQuestion, steps: tuple[Step, ...], server: _Server
    ) -> Steps[tuple[Step, ...]]:
        """The steps of labels that share first tokens, their label tokens as text; a
        :class:`ConfigurationError` where the server cannot score them (no chosen tokens'
        logprobs, or a label prefix that does not survive a round trip as text)."""
        with_text = yield from self._procedure.path_texts_steps(steps)
        if with_text is None or not server.has_logprob_token_ids:
            raise ConfigurationError(
                f"question {question.name!r}: its labels share first tokens, and this server cannot score them "
                "(it returns no logprobs for chosen tokens, or a label prefix does not survive a round trip as text); "
                "give the labels distinct first words"
            )
        return with_text


def _part(
    label_set: LabelSet,
    scoring: Any,
    steps: tuple[Step, ...],
    server: _Server,
    *,
    paths: tuple[tuple[int, ...], ...] = (),
    end_token: int | None = None,
) -> ClassifierPlan:
    """One question's own plan: how its answer is read from its steps."""
    return ClassifierPlan.generate(
        label_set, scoring, steps, 0, server.max_model_len, label_paths=paths, end_token=end_token
    )


def _outcome(questions: QuestionSet, decided: Decided, usage: TokenUsage) -> DecisionOutcome | Exception:
    """A state's results under ``questions`` as their answers."""
    answers = []
    for question, result in zip(questions.questions, decided.answers, strict=True):
        if result.scores is None:  # never under a decision plan: every scoring it uses gives them
            return ResponseFormatError(f"question {question.name!r} got no probabilities")
        probabilities = tuple(result.scores[label] for label in question.labels)
        refused = result.abstained and question.kind_spec.chooses_label
        answers.append(Answered(question, probabilities, refused))
    return DecisionOutcome(tuple(answers), usage)


__all__ = ["MAX_KEPT_PLANS", "Decider", "DecisionRequest"]
