"""The one place that knows vLLM's HTTP endpoints: request bodies and reply parsing for
``/v1/models``, ``/tokenize``, ``/v1/completions`` and ``/classify``.

Pure functions; the transport sends what they build. A request is a :data:`Call`:
(HTTP method, path, JSON body or None). Paths under ``/v1`` are relative (``"completions"``);
server routes hang off the root (``"/tokenize"``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from langchain_qwen_fast._transport import Call
from langchain_qwen_fast.errors import LabelParseError, QwenFastError, ResponseFormatError
from langchain_qwen_fast.prompting import ClassifierPlan, Prediction, Prompt, label_probabilities, strip_think

#: Servers that cannot return the logprobs of chosen tokens give the top-k instead.
TOP_LOGPROBS_FALLBACK = 20

_REPLY_ERRORS = (KeyError, IndexError, TypeError, ValueError, AttributeError)


# -- /v1/models --------------------------------------------------------------------------
def models_call() -> Call:
    return ("GET", "models", None)


def parse_models(reply: Any) -> dict[str, int]:
    """Served model name -> its context length (0 when the server does not say)."""
    try:
        return {str(m["id"]): int(m.get("max_model_len") or 0) for m in reply["data"]}
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"/v1/models reply lacks its model list: {exc!r}") from None


# -- /tokenize ---------------------------------------------------------------------------
def tokenize_call(model: str, text: str) -> Call:
    """Tokenise ``text`` exactly as a completion prompt is tokenised (no special tokens added)."""
    return ("POST", "/tokenize", {"model": model, "prompt": text, "add_special_tokens": False})


def parse_tokenize(reply: Any) -> list[int]:
    """The token ids of a ``/tokenize`` reply."""
    try:
        tokens = reply["tokens"]
        return [int(t) for t in tokens]
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"/tokenize reply lacks its tokens: {exc!r}") from None


# -- /v1/completions and /classify -------------------------------------------------------
def classify_call(plan: ClassifierPlan, model: str, prompts: Sequence[Prompt]) -> Call:
    """The request that classifies a group of rendered prompts."""
    if plan.scoring == "head":
        return ("POST", "/classify", {"model": model, "input": list(prompts)})
    return ("POST", "completions", completions_body(plan, model, prompts))


def completions_body(plan: ClassifierPlan, model: str, prompts: Sequence[Prompt]) -> dict[str, Any]:
    """The ``/v1/completions`` body for a group of rendered prompts (generate mode)."""
    body: dict[str, Any] = {
        "model": model,
        "prompt": list(prompts),
        "max_tokens": plan.max_tokens,
        "temperature": 0.0,
        "stream": False,
    }
    if plan.scoring == "constrained_choice":
        body["structured_outputs"] = {"choice": list(plan.label_set.labels)}
        return body
    body["allowed_token_ids"] = list(plan.answer_token_ids)
    body["return_tokens_as_token_ids"] = True
    if plan.has_logprob_token_ids:
        body["logprobs"] = 1
        body["logprob_token_ids"] = list(plan.answer_token_ids)
    else:
        body["logprobs"] = TOP_LOGPROBS_FALLBACK  # labels outside the top-k get probability 0
    return body


def reply_items(plan: ClassifierPlan, reply: Any) -> dict[int, Any]:
    """The reply's per-prompt items, by prompt index within the group."""
    try:
        items = reply["data" if plan.scoring == "head" else "choices"]
        return {int(item["index"]): item for item in items}
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"reply lacks its per-prompt items: {exc!r}") from None


def parse_item(plan: ClassifierPlan, item: Any) -> Prediction:
    """One reply item as a :class:`Prediction`, or a typed error naming the problem."""
    return parse_head(plan, item) if plan.scoring == "head" else parse_choice(plan, item)


def token_id(token: str) -> int:
    """The id in a token string of the form ``token_id:123`` (``return_tokens_as_token_ids``)."""
    return int(token.rpartition(":")[2])


def parse_choice(plan: ClassifierPlan, choice: Any) -> Prediction:
    """Turn one completion choice into a :class:`Prediction`, or raise naming the problem."""
    try:
        text = choice["text"]
        if not isinstance(text, str):
            raise TypeError(f"choice text is {type(text).__name__}")
        if plan.scoring == "constrained_choice":
            reply = strip_think(text)
            if reply in plan.label_set.labels:
                return Prediction(plan.label_set.labels.index(reply), None)
            raise LabelParseError(f"model replied {reply[:80]!r}, which is none of the labels", reply=text)
        logprobs = choice["logprobs"]
        chosen = token_id(logprobs["tokens"][0])
        step = {token_id(k): float(v) for k, v in (logprobs["top_logprobs"][0] or {}).items()}
        step.setdefault(chosen, float(logprobs["token_logprobs"][0]))
    except QwenFastError:
        raise
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"completion choice lacks expected fields: {exc!r}") from None
    try:
        index = plan.answer_token_ids.index(chosen)
    except ValueError:
        raise LabelParseError(
            f"model replied token {chosen} ({text!r}), which answers no label "
            "(the server did not honour allowed_token_ids?)",
            reply=text,
        ) from None
    try:
        scores = label_probabilities(step, plan.answer_token_ids)
    except ValueError as exc:
        raise ResponseFormatError(f"completion choice has no usable label logprobs: {exc}") from None
    return Prediction(index, scores)


def parse_head(plan: ClassifierPlan, item: Any) -> Prediction:
    """Turn one ``/classify`` item into a :class:`Prediction` (class i is label i)."""
    try:
        probs = [float(p) for p in item["probs"]]
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"classify item lacks probabilities: {exc!r}") from None
    labels = plan.label_set.labels
    if len(probs) != len(labels):
        raise ResponseFormatError(f"head gave {len(probs)} class probabilities for {len(labels)} labels")
    total = sum(probs)
    if not (total > 0 and all(p >= 0 for p in probs)) or total == float("inf"):
        raise ResponseFormatError(f"head gave probabilities that are not a distribution: {probs[:8]}")
    scores = tuple(p / total for p in probs)
    return Prediction(max(range(len(scores)), key=scores.__getitem__), scores)


def parse_num_classes(reply: Any) -> int:
    """The number of classes of a head model, from a ``/classify`` reply."""
    try:
        return int(reply["data"][0]["num_classes"])
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"/classify reply lacks num_classes: {exc!r}") from None


def probe_has_logprob_token_ids(plan: ClassifierPlan, reply: Any) -> bool:
    """Whether a probe completion asked with ``logprob_token_ids`` got every label's logprob
    back (older vLLM ignores the field and returns only the chosen token's)."""
    try:
        step: Mapping[str, Any] = reply["choices"][0]["logprobs"]["top_logprobs"][0] or {}
        got = {token_id(k) for k in step}
    except _REPLY_ERRORS as exc:
        raise ResponseFormatError(f"probe completion lacks logprobs: {exc!r}") from None
    return set(plan.answer_token_ids) <= got
