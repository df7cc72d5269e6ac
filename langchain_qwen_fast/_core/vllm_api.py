"""The one place that knows vLLM's HTTP endpoints: request bodies and reply parsing for
``/v1/models``, ``/tokenize``, ``/detokenize``, ``/v1/completions`` and ``/classify``.

Pure functions; the transport sends what they build. A request is a
:data:`~langchain_qwen_fast._core.transport.Request`: (HTTP method, path, JSON body or None).
Paths under ``/v1`` are relative (``"completions"``); server routes hang off the root
(``"/tokenize"``).
"""

from __future__ import annotations

import functools
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from langchain_qwen_fast._core.prompting import ClassifierPlan, Prediction, Prompt, strip_think
from langchain_qwen_fast._core.transport import Request
from langchain_qwen_fast.errors import LabelParseError, QwenFastError, ResponseFormatError, ServerStatusError

#: Servers that cannot return the logprobs of chosen tokens give the top-k instead.
TOP_LOGPROBS_FALLBACK = 20

_REPLY_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError)


# -- /v1/models --------------------------------------------------------------------------
def models_call() -> Request:
    """List the served models."""
    return ("GET", "models", None)


def parse_models(reply: Any) -> dict[str, int]:
    """Served model name -> its context length (0 when the server does not say)."""
    try:
        return {str(m["id"]): int(m.get("max_model_len") or 0) for m in reply["data"]}
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"/v1/models reply lacks its model list: {exc!r}") from None


def served_context(reply: Any, model: str) -> int:
    """The context length of ``model`` in a ``/v1/models`` reply: its own, else its parent's (a
    LoRA adapter's entry carries none), else 0 (unknown)."""
    served = parse_models(reply)
    if served.get(model):
        return served[model]
    for entry in reply.get("data", []) if isinstance(reply, dict) else []:
        if isinstance(entry, dict) and entry.get("id") == model and entry.get("parent") in served:
            return served[str(entry["parent"])]
    return 0


def model_identity(reply: Any, model: str) -> str:
    """What the server says of the weights it serves as ``model`` (its path, parent, context
    length and owner: everything in its ``/v1/models`` entry but the time of the reply), as
    canonical JSON; ``""`` when the entry is missing."""
    for entry in reply.get("data", []) if isinstance(reply, dict) else []:
        if isinstance(entry, dict) and entry.get("id") == model:
            return json.dumps({k: v for k, v in entry.items() if k != "created"}, sort_keys=True, default=str)
    return ""


# -- /tokenize ---------------------------------------------------------------------------
def tokenize_call(model: str, text: str) -> Request:
    """Tokenise ``text`` exactly as a completion prompt is tokenised (no special tokens added)."""
    return ("POST", "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})


def parse_tokenize(reply: Any) -> list[int]:
    """The token ids of a ``/tokenize`` reply."""
    try:
        tokens = reply["tokens"]
        return [int(t) for t in tokens]
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"/tokenize reply lacks its tokens: {exc!r}") from None


def is_tokenizer_unavailable(reply: Any) -> bool:
    """Whether a reply is vLLM's refusal to tokenise because it was started with
    ``--skip-tokenizer-init`` (it then reads token-id prompts only)."""
    return isinstance(reply, ServerStatusError) and reply.status_code == 400 and "skip_tokenizer_init" in str(reply)


def detokenize_call(model: str, tokens: Sequence[int]) -> Request:
    """Turn token ids back into text."""
    return ("POST", "/detokenize", {"model": model, "tokens": list(tokens)})


def parse_detokenize(reply: Any) -> str:
    """The text of a ``/detokenize`` reply."""
    return _text(reply, "prompt", "/detokenize reply")


def _text(reply: Any, key: str, what: str) -> str:
    """``reply[key]`` as text, or a :class:`ResponseFormatError` saying ``what`` lacks it."""
    try:
        text = reply[key]
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"{what} lacks its text: {exc!r}") from None
    if not isinstance(text, str):
        raise ResponseFormatError(f"{what}'s text is {type(text).__name__}")
    return text


# -- /v1/completions and /classify -------------------------------------------------------
def classify_call(
    plan: ClassifierPlan, model: str, step: int, prompts: Sequence[Prompt] | Callable[[], Sequence[Prompt]]
) -> Request:
    """The request that asks ``step`` of a group of rendered prompts, or of the prompts a
    function gives, called when the request is sent (see :data:`~langchain_qwen_fast._core.transport.Request`)."""
    path = "/classify" if plan.scoring == "head" else "completions"
    if callable(prompts):
        make = prompts
        return ("POST", path, lambda: classify_call(plan, model, step, make())[2])
    if plan.scoring == "head":
        return ("POST", path, {"model": model, "input": prompt_field(plan, prompts)})
    return ("POST", path, completions_body(plan, model, step, prompts))


def prompt_field(plan: ClassifierPlan, prompts: Sequence[Prompt]) -> Any:
    """A group's prompts as a request carries them: a list, or for a server that takes one
    prompt a request (``plan.takes_prompt_lists`` False) that prompt alone, a string or one
    token-id list, which every vLLM frontend reads as a single prompt."""
    if plan.takes_prompt_lists:
        return list(prompts)
    if len(prompts) != 1:
        raise QwenFastError(f"this server takes one prompt a request; {len(prompts)} were to be sent in one")
    return prompts[0]


def completions_body(plan: ClassifierPlan, model: str, step: int, prompts: Sequence[Prompt]) -> dict[str, Any]:
    """The ``/v1/completions`` body asking ``step`` of a group of rendered prompts."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": prompt_field(plan, prompts),
        "max_tokens": plan.max_tokens,
        "temperature": 0.0,
        "stream": False,
    }
    if plan.scoring == "constrained_choice":
        body["structured_outputs"] = {"choice": list(plan.label_set.labels)}
        return body
    allowed = list(plan.steps[step].allowed)
    body["return_tokens_as_token_ids"] = True
    if plan.has_logprob_token_ids:
        # Every answer token's logprob comes back whatever token is sampled, so the sampled
        # one is not read and not restricted: vLLM's allowed_token_ids costs its engine a
        # vocabulary-sized mask row per prompt, built on the CPU and copied every step.
        body["logprobs"] = 1
        body["logprob_token_ids"] = allowed
    else:
        body["allowed_token_ids"] = allowed
        body["logprobs"] = TOP_LOGPROBS_FALLBACK  # answers outside the top-k get probability 0
    return body


def reply_items(plan: ClassifierPlan, reply: Any) -> dict[int, Any]:
    """The reply's per-prompt items, by prompt index within the group."""
    try:
        items = reply["data" if plan.scoring == "head" else "choices"]
        return {int(item["index"]): item for item in items}
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"reply lacks its per-prompt items: {exc!r}") from None


#: One step's scores for one text: token -> logprob (for a head, class -> probability; under
#: constrained choice, the chosen label's index -> 0.0).
StepScores = dict[int, float]


def parse_item(plan: ClassifierPlan, step: int, item: Any) -> StepScores:
    """One reply item as the step's :data:`StepScores`, or a typed error naming the problem."""
    if plan.scoring == "head":
        return parse_head(plan, item)
    if plan.scoring == "constrained_choice":
        return parse_constrained(plan, item)
    return parse_choice(plan, step, item)


def token_id(token: str) -> int:
    """The id in a token string of the form ``token_id:123`` (``return_tokens_as_token_ids``)."""
    return int(token.rpartition(":")[2])


def parse_constrained(plan: ClassifierPlan, choice: Any) -> StepScores:
    """A constrained-choice completion: the label it spelt."""
    text = _text(choice, "text", "completion choice")
    reply = strip_think(text)
    if reply not in plan.label_set.labels:
        raise LabelParseError(f"model replied {reply[:80]!r}, which is none of the labels", reply=text)
    return {plan.label_set.labels.index(reply): 0.0}


def parse_choice(plan: ClassifierPlan, step: int, choice: Any) -> StepScores:
    """A one-token completion: the logprobs of the step's answer tokens. Asked with
    ``logprob_token_ids``, those are all there and the sampled token is not read; otherwise
    the sampled token (limited to the answer tokens) and the top-k are."""
    allowed = plan.steps[step].allowed
    if plan.has_logprob_token_ids:
        # Every text's reply names the same answer tokens: they are looked up by their keys,
        # made once a step, rather than every key of every reply parsed.
        try:
            top = choice["logprobs"]["top_logprobs"][0]
            return {t: float(top[key]) for t, key in zip(allowed, _token_keys(allowed), strict=True)}
        except _REPLY_ERRORS:
            pass  # said precisely below
    text = _text(choice, "text", "completion choice")
    try:
        logprobs = choice["logprobs"]
        answer = {token_id(k): float(v) for k, v in (logprobs["top_logprobs"][0] or {}).items()}
        if not plan.has_logprob_token_ids:
            chosen = token_id(logprobs["tokens"][0])
            answer.setdefault(chosen, float(logprobs["token_logprobs"][0]))
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"completion choice lacks expected fields: {exc!r}") from None
    if plan.has_logprob_token_ids:
        missing = [t for t in allowed if t not in answer]
        if missing:
            raise ResponseFormatError(f"completion choice has no logprob for answer tokens {missing[:5]}")
        return {t: answer[t] for t in allowed}
    if chosen not in allowed:
        raise LabelParseError(
            f"model replied token {chosen} ({text!r}), which answers no label "
            "(the server did not honour allowed_token_ids?)",
            reply=text,
        )
    return answer


@functools.lru_cache(maxsize=256)
def _token_keys(tokens: tuple[int, ...]) -> tuple[str, ...]:
    """The keys a reply gives ``tokens``' logprobs under (``return_tokens_as_token_ids``)."""
    return tuple(f"token_id:{t}" for t in tokens)


def parse_head(plan: ClassifierPlan, item: Any) -> StepScores:
    """A ``/classify`` item: class i's probability (class i is label i)."""
    try:
        probs = [float(p) for p in item["probs"]]
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"classify item lacks probabilities: {exc!r}") from None
    labels = plan.label_set.labels
    if len(probs) != len(labels):
        raise ResponseFormatError(f"head gave {len(probs)} class probabilities for {len(labels)} labels")
    if not all(0.0 <= p <= 1.0 for p in probs) or not (plan.label_set.multi_label or sum(probs) > 0):
        raise ResponseFormatError(f"head gave values that are not probabilities: {probs[:8]}")
    return dict(enumerate(probs))


def combine(plan: ClassifierPlan, answers: Sequence[StepScores]) -> Prediction:
    """A text's prediction from its steps' answers, or a typed error."""
    try:
        return plan.combine(answers)
    except (ValueError, ResponseFormatError) as exc:
        raise ResponseFormatError(f"the server's answers give no usable label probabilities: {exc}") from None


def parse_num_classes(reply: Any) -> int:
    """The number of classes of a head model, from a ``/classify`` reply."""
    try:
        return int(reply["data"][0]["num_classes"])
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"/classify reply lacks num_classes: {exc!r}") from None


def probe_step(plan: ClassifierPlan) -> int:
    """The step to probe ``logprob_token_ids`` with: the one with the most answer tokens."""
    return max(range(len(plan.steps)), key=lambda k: len(plan.steps[k].allowed))


def probe_has_logprob_token_ids(plan: ClassifierPlan, reply: Any) -> bool:
    """Whether a probe completion of :func:`probe_step` asked with ``logprob_token_ids`` got
    every answer token's logprob back (older vLLM ignores the field and returns only the
    chosen token's)."""
    try:
        step: Mapping[str, Any] = reply["choices"][0]["logprobs"]["top_logprobs"][0] or {}
        got = {token_id(k) for k in step}
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"probe completion lacks logprobs: {exc!r}") from None
    return set(plan.steps[probe_step(plan)].allowed) <= got
