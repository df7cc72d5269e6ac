"""``QwenDecisionModel``: LangChain's decision model (``langchain_core.decisions``) answered by
Qwen3 on vLLM, each question from its answers' token probabilities in one decode step.

The state and the questions are turned into the engine's plain forms here (messages into
:class:`~langchain_qwen_fast._core.decisions.Turn`, questions into
:class:`~langchain_qwen_fast._core.decisions.DecisionQuestion`), and the engine's answers back
into LangChain's answer types; everything between is the engine's (``_core/deciding.py``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.decisions import (
    BaseDecisionModel,
    Choice,
    ChoiceAnswer,
    ClassifierResponse,
    NoulAnswer,
    Question,
    ScoreAnswer,
    State,
)
from langchain_core.exceptions import ModelRefusalError
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, SystemMessage, ToolMessage
from langchain_core.runnables import RunnableConfig
from pydantic import ConfigDict

from langchain_qwen_fast._core.deciding import DecisionRequest
from langchain_qwen_fast._core.decisions import (
    DecisionOutcome,
    DecisionPlan,
    QuestionSet,
    Turn,
    media_type,
    render_state,
)
from langchain_qwen_fast._runs import abatch_with_runs, raise_unless, unobserved
from langchain_qwen_fast.decision_questions import question_set
from langchain_qwen_fast.engine import ClassifierConfig, EngineDecisions
from langchain_qwen_fast.errors import AbstainedError, InvalidInputError

if TYPE_CHECKING:
    from langchain_core.decisions import ClassifierRequest


class DecisionRefused(AbstainedError, ModelRefusalError):
    """An abstention as both the package's error and LangChain's standard refusal, which
    LangChain's decision-model callers (and ``OpenAIClassifier``'s) catch."""


#: LangChain's answer type of each question kind, by the kind's name: the one thing of a kind
#: the engine cannot hold (it imports no LangChain); the kind gives the answer's fields.
_ANSWER_TYPES: dict[str, type[NoulAnswer | ChoiceAnswer | ScoreAnswer]] = {
    "noul": NoulAnswer,
    "choice": ChoiceAnswer,
    "score": ScoreAnswer,
}

_ROLES: dict[type[BaseMessage], str] = {
    HumanMessage: "user",
    AIMessage: "assistant",
    SystemMessage: "system",
    ToolMessage: "tool",
}


class QwenDecisionModel(EngineDecisions, BaseDecisionModel):
    """Answer ``Noul``, ``Choice`` and ``Score`` questions about text, messages or JSON with
    Qwen3 served by vLLM: every question from its answers' token probabilities, in one decode
    step (a step per shared token where answers share first tokens), over the same engine as
    ``QwenClassifier`` (replicas, retries, timeouts, the cache).

    The questions of a request go first in the prompt, then the state, then a short tail per
    question, so vLLM's prefix cache computes the questions once for every state and the
    state once for all its questions. ``batch`` and ``abatch`` send the states of requests
    with the same questions in grouped requests, as ``QwenClassifier.abatch`` sends texts;
    an answer never depends on how requests were batched. See ``docs/decisions.md``.

    Example:
        .. code-block:: python

            from langchain_core.decisions import Choice, Noul

            decisions = QwenDecisionModel(base_url="http://127.0.0.1:8000/v1", model="qwen3")
            response = decisions.invoke({
                "state": "Stripe fails whenever I connect my account.",
                "questions": {
                    "team": Choice(instructions="Which team handles this?",
                                   criteria={"billing": "Payments.", "technical": "Bugs."}),
                    "urgent": Noul(instructions="Is this urgent?"),
                },
            })
            response.choices["team"].choice, response.nouls["urgent"].noul
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    @property
    def _provider(self) -> str:
        return "vllm"

    @classmethod
    def is_lc_serializable(cls) -> bool:
        """Not serialisable through LangChain's ``dumpd``."""
        return False

    def prepare(self, questions: Mapping[str, Question]) -> DecisionPlan:
        """Do the set-up for ``questions`` now (it otherwise happens on first use) and return
        their plan: the rendered head every state's prompts start with, each question's decode
        steps and the context budget, learnt from the server. Raises what the set-up ran into."""
        return self._decider.plan(question_set(questions))

    # -- BaseDecisionModel ---------------------------------------------------------------
    def invoke(
        self, input: ClassifierRequest, config: RunnableConfig | None = None, **kwargs: Any
    ) -> ClassifierResponse:
        """Answer one request; raises its error (typed, see :mod:`~langchain_qwen_fast.errors`)."""
        return super().invoke(_checked_request(input), config, **kwargs)

    async def ainvoke(
        self, input: ClassifierRequest, config: RunnableConfig | None = None, **kwargs: Any
    ) -> ClassifierResponse:
        """Async :meth:`invoke`."""
        return await super().ainvoke(_checked_request(input), config, **kwargs)

    def _classify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        return _raised(self._responses(self._decider.decide([decision_request(state, questions)]))[0])

    async def _aclassify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        return _raised(self._responses(await self._decider.adecide([decision_request(state, questions)]))[0])

    def batch(
        self,
        inputs: Sequence[ClassifierRequest],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[ClassifierResponse]:
        """Answer ``inputs`` in grouped requests, in input order; a bad request keeps its own
        error (raised unless ``return_exceptions``), the others their answers."""
        items = list(inputs)
        if not items:
            return []
        if unobserved(config):
            return raise_unless(return_exceptions, self._decide(items))

        def decide(batch: list[Any], _: Any) -> list[Any]:
            return self._decide(batch)

        return raise_unless(
            return_exceptions,
            self._batch_with_config(decide, items, _config_list(config), return_exceptions=True, run_type="llm"),
        )

    async def abatch(
        self,
        inputs: Sequence[ClassifierRequest],
        config: RunnableConfig | Sequence[RunnableConfig] | None = None,
        *,
        return_exceptions: bool = False,
        **kwargs: Any,
    ) -> list[ClassifierResponse]:
        """Async :meth:`batch`."""
        items = list(inputs)
        if not items:
            return []
        if unobserved(config):
            return raise_unless(return_exceptions, await self._adecide(items))
        configs = list(config) if isinstance(config, Sequence) else config
        return raise_unless(
            return_exceptions, await abatch_with_runs(self, items, configs, lambda batch, _: self._adecide(batch))
        )

    def _decide(self, items: list[Any]) -> list[Any]:
        return self._responses(self._decider.decide(decision_requests(items)))

    async def _adecide(self, items: list[Any]) -> list[Any]:
        return self._responses(await self._decider.adecide(decision_requests(items)))

    def _responses(self, outcomes: Sequence[DecisionOutcome | Exception]) -> list[ClassifierResponse | Exception]:
        responses: list[ClassifierResponse | Exception] = []
        for outcome in outcomes:
            try:
                responses.append(outcome if isinstance(outcome, Exception) else response_of(outcome, self.model))
            except ModelRefusalError as exc:
                responses.append(exc)
        return responses


class ClassifierDecisionModel(BaseDecisionModel):
    """A classifier's own label set answered as a ``Choice``: the classifier's prompt (or its
    trained head), calibration and abstention, behind LangChain's decision-model interface,
    so that a fine-tuned or calibrated classifier can route an agent
    (``ModelRouterMiddleware``). Made by :meth:`QwenClassifier.as_decision_model`.

    It answers a ``Choice`` whose labels are exactly the classifier's (in any order; their
    descriptions and the instructions are the classifier's own, trained or written into it);
    any other question is an :class:`~langchain_qwen_fast.errors.InvalidInputError` naming it.
    An abstained classification is a ``ModelRefusalError``.
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    classifier: Any
    """The ``QwenClassifier`` that answers."""

    @property
    def _provider(self) -> str:
        return "vllm"

    def _checked(self, state: State, questions: dict[str, Question]) -> str:
        labels = set(self.classifier.label_names)
        if not questions:
            raise InvalidInputError("questions is empty: ask at least one question")
        for name, question in questions.items():
            if not isinstance(question, Choice) or set(question.criteria) != labels:
                raise InvalidInputError(
                    f"question {name!r}: this classifier answers only a Choice among its own labels {sorted(labels)}"
                )
        return _classifier_text(state)

    def _answered(self, questions: dict[str, Question], result: Any) -> ClassifierResponse:
        if result.abstained or result.scores is None:
            raise DecisionRefused(f"the classifier abstained on {', '.join(questions)}")
        answer = ChoiceAnswer(
            type="choice",
            choice=result.label,
            probabilities=dict(result.scores),
            confidence=max(result.scores.values()),
        )
        return ClassifierResponse(model=self.model, answers=dict.fromkeys(questions, answer))

    def _classify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        return self._answered(questions, self.classifier.invoke(self._checked(state, questions)))

    async def _aclassify(self, state: State, questions: dict[str, Question]) -> ClassifierResponse:
        return self._answered(questions, await self.classifier.ainvoke(self._checked(state, questions)))


def as_decision_model(classifier: ClassifierConfig) -> ClassifierDecisionModel:
    """``classifier`` as a decision model (see :class:`ClassifierDecisionModel`)."""
    from langchain_qwen_fast.errors import ConfigurationError

    if classifier.multi_label or isinstance(classifier.labels, dict):
        raise ConfigurationError(
            "as_decision_model answers one label of a flat label set; this classifier is multi-label or hierarchical"
        )
    return ClassifierDecisionModel(classifier=classifier, model=classifier.model)


# -- LangChain's forms to the engine's, and back ---------------------------------------------
def decision_request(state: Any, questions: Any) -> DecisionRequest:
    """A request's state and questions in the engine's forms; :class:`InvalidInputError` names
    the first question or block the model cannot answer (before anything is sent)."""
    return _rendered(state), question_set(questions)


def _checked_request(item: Any) -> Any:
    """``item`` if it is a request's shape, else an :class:`InvalidInputError` saying so."""
    if not isinstance(item, Mapping) or "state" not in item or "questions" not in item:
        raise InvalidInputError("a decision request is a mapping with 'state' and 'questions'")
    return item


def decision_requests(items: Sequence[Any]) -> list[DecisionRequest | Exception]:
    """Each item as the engine's request, or the :class:`InvalidInputError` that names what is
    wrong with it, in order. A batch usually asks one question set of every state: each
    questions mapping given is converted once, however many items share it."""
    converted: dict[int, QuestionSet | InvalidInputError] = {}
    requests: list[DecisionRequest | Exception] = []
    for item in items:
        try:
            questions = _checked_request(item)["questions"]
            asked = converted.get(id(questions))
            if asked is None:
                asked = converted[id(questions)] = _question_set_or_error(questions)
            requests.append(asked if isinstance(asked, Exception) else (_rendered(item["state"]), asked))
        except InvalidInputError as exc:
            requests.append(exc)
    return requests


def _rendered(state: Any) -> str:
    return render_state(engine_state(state, "state"))


def _question_set_or_error(questions: Any) -> QuestionSet | InvalidInputError:
    try:
        return question_set(questions)
    except InvalidInputError as exc:
        return exc


def engine_state(value: Any, where: str) -> Any:
    """A LangChain state with every message as a :class:`Turn` (its role and its text);
    :class:`InvalidInputError` names a media block wherever it is."""
    if isinstance(value, BaseMessage):
        return Turn(_role(value), _message_text(value, where))
    if isinstance(value, Mapping):
        if media_type(value):
            raise InvalidInputError(f"{where} is a {value['type']!r} block: this model reads text only")
        return {key: engine_state(item, f"{where}[{key!r}]") for key, item in value.items()}
    if isinstance(value, Sequence) and not isinstance(value, (str, bytes, bytearray)):
        return [engine_state(item, f"{where}[{i}]") for i, item in enumerate(value)]
    return value


def _role(message: BaseMessage) -> str:
    for kind, role in _ROLES.items():
        if isinstance(message, kind):
            return role
    return str(getattr(message, "role", None) or message.type)


def _message_text(message: BaseMessage, where: str) -> str:
    """A message's text: its text blocks in order, an AI message's tool calls after them as
    JSON; a media block is an error naming it."""
    content = message.content
    parts: list[str] = []
    for i, block in enumerate([content] if isinstance(content, str) else content):
        if isinstance(block, str):
            parts += [block] if block else []
        elif isinstance(block, Mapping) and media_type(block):
            raise InvalidInputError(f"{where}.content[{i}] is a {block['type']!r} block: this model reads text only")
        elif isinstance(block, Mapping) and block.get("type") == "text" and block.get("text"):
            parts.append(str(block["text"]))
    for call in getattr(message, "tool_calls", None) or []:
        parts.append("tool call " + json.dumps({"name": call["name"], "args": call["args"]}, sort_keys=True))
    return "\n".join(parts)


def _classifier_text(state: Any) -> str:
    """What a classifier reads of a state: a message's or a string's text as it is (the texts
    it was trained on), anything else rendered."""
    if isinstance(state, BaseMessage):
        return _message_text(state, "state")
    return render_state(engine_state(state, "state"))


def response_of(outcome: DecisionOutcome, model: str) -> ClassifierResponse:
    """The engine's outcome as LangChain's response; a refused choice (abstention) is a
    ``ModelRefusalError`` naming it."""
    refused = [a.question.name for a in outcome.answers if a.refused]
    if refused:
        raise DecisionRefused(f"the model abstained on {', '.join(refused)}")
    answers: dict[str, Any] = {}
    for answered in outcome.answers:
        kind = answered.question.kind_spec
        answer_type = _ANSWER_TYPES.get(kind.name)
        if answer_type is None:
            raise InvalidInputError(
                f"question {answered.question.name!r}: LangChain has no answer type for a {kind.name}"
            )
        fields: dict[str, Any] = {"type": kind.name, **kind.plain_answer(answered)}
        answers[answered.question.name] = answer_type(**fields)
    usage: dict[str, Any] = {"input_tokens": outcome.usage.prompt, "output_tokens": outcome.usage.output}
    if outcome.usage.cached is not None:
        usage["input_token_details"] = {"cache_read": outcome.usage.cached}
    return ClassifierResponse(model=model, answers=answers, usage=usage)  # type: ignore[arg-type]


def _config_list(
    config: RunnableConfig | Sequence[RunnableConfig] | None,
) -> RunnableConfig | list[RunnableConfig] | None:
    return list(config) if isinstance(config, Sequence) else config


def _raised(result: Any) -> Any:
    if isinstance(result, Exception):
        raise result
    return result


__all__ = [
    "ClassifierDecisionModel",
    "DecisionRefused",
    "QwenDecisionModel",
    "as_decision_model",
    "decision_request",
    "decision_requests",
    "question_set",
    "response_of",
]
