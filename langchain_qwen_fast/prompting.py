"""Labels, prompt layout and label scoring. Pure: no I/O, no knowledge of HTTP endpoints.

The prompt is pre-rendered in Qwen3's chat format with thinking off (the empty
``<think></think>`` block the Qwen3 template adds for ``enable_thinking=False``), so the
server only tokenises it. Fixed instructions and the label list come first and the text
last, so vLLM's prefix cache reuses the shared part across every request.

With a tokenizer (``QwenClassifier.tokenizer_path``) the prompts travel as token ids, so
the server's API process does not tokenise them either.

Scoring: when every label (or, failing that, every letter alias) starts with a distinct
token, one generated token decides the label, constrained to those tokens with
``allowed_token_ids``, and the logprobs of exactly those tokens give a probability per
label from the same single decode step. Otherwise the server's constrained choice picks a
whole label and no probabilities are given.
"""

from __future__ import annotations

import dataclasses
import math
import re
import string
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_qwen_fast.classification import Scoring
from langchain_qwen_fast.errors import ContextLengthError

DEFAULT_INSTRUCTIONS = "Classify the text. Answer with one label only."

# Tokenisation at a boundary between prompt parts can differ by a token from the parts
# counted apart; keep this much room when a text's tokens are counted on their own.
_BOUNDARY_MARGIN = 2

#: A rendered prompt: text, or the token ids of that text.
Prompt = str | list[int]

# Qwen3 chat format; the assistant turn opens with an empty think block (thinking off).
_SYSTEM_OPEN = "<|im_start|>system\n"
_USER_OPEN = "<|im_end|>\n<|im_start|>user\n"
PROMPT_SUFFIX = "<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n"

# Text that spells a Qwen control token (<|im_start|>, </think>, <tool_call>, ...) would be
# read as that token by the server and could forge a turn. A word joiner after "<" keeps the
# characters visible but breaks the match.
_CONTROL_TOKEN = re.compile(r"<(?=\|[a-z_]{1,30}\|>|/?(?:think|tool_call|tool_response)>)")
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)


@dataclass(frozen=True)
class LabelSet:
    """The labels, their optional descriptions and the instructions the prompt gives."""

    labels: tuple[str, ...]
    descriptions: Mapping[str, str]
    instructions: str

    @classmethod
    def build(
        cls,
        labels: Sequence[str],
        descriptions: Mapping[str, str] | None = None,
        instructions: str | None = None,
    ) -> LabelSet:
        """Validate labels: at least two, distinct, non-empty, no surrounding whitespace."""
        labels = tuple(labels)
        if len(labels) < 2:
            raise ValueError(f"need at least two labels, got {list(labels)!r}")
        for label in labels:
            if not isinstance(label, str) or not label.strip():
                raise ValueError(f"every label must be a non-empty string, got {label!r}")
            if label != label.strip():
                raise ValueError(f"label {label!r} has leading or trailing whitespace")
        duplicates = sorted({x for x in labels if labels.count(x) > 1})
        if duplicates:
            raise ValueError(f"labels must be distinct; repeated: {duplicates}")
        descriptions = dict(descriptions or {})
        unknown = sorted(set(descriptions) - set(labels))
        if unknown:
            raise ValueError(f"descriptions given for unknown labels: {unknown}")
        return cls(labels, descriptions, (instructions or DEFAULT_INSTRUCTIONS).strip())

    def letters(self) -> tuple[str, ...] | None:
        """Letter aliases A, B, C, ... (None past 26 labels)."""
        if len(self.labels) > len(string.ascii_uppercase):
            return None
        return tuple(string.ascii_uppercase[: len(self.labels)])

    def render_prefix(self, scoring: Scoring) -> str:
        """Everything before the text: system turn with instructions and labels, user turn open."""
        if scoring == "letter_tokens":
            aliases = self.letters() or ()
            lines = [f"{self.instructions} Answer with the label's letter."]
            lines += [f"{a}: {self._describe(label)}" for a, label in zip(aliases, self.labels)]
        elif self.descriptions:
            lines = [self.instructions, "Labels:"]
            lines += [f"- {self._describe(label)}" for label in self.labels]
        else:
            lines = [self.instructions, "Labels: " + ", ".join(self.labels)]
        return _SYSTEM_OPEN + "\n".join(lines) + _USER_OPEN

    def _describe(self, label: str) -> str:
        desc = self.descriptions.get(label)
        return f"{label} ({desc})" if desc else label


def neutralize_control_tokens(text: str) -> str:
    """Keep user text from spelling Qwen control tokens (prompt-format injection)."""
    if "<" not in text:
        return text
    return _CONTROL_TOKEN.sub("<\u2060", text)


def strip_think(reply: str) -> str:
    """Remove any ``<think>...</think>`` block (closed or not) and surrounding whitespace."""
    if "<think>" in reply:
        reply = _THINK_BLOCK.sub("", reply)
    return reply.replace("</think>", "").strip()


@dataclass(frozen=True)
class ClassifierPlan:
    """Everything decided once per classifier and server: prompt, tokens, request shape."""

    label_set: LabelSet
    scoring: Scoring
    prefix: str
    #: label index -> the one token that answers it (token scorings only)
    answer_token_ids: tuple[int, ...]
    max_tokens: int
    #: tokens of prefix + suffix, i.e. the prompt without the text
    overhead_tokens: int
    max_model_len: int
    #: the server returns logprobs for chosen token ids (vLLM ``logprob_token_ids``)
    has_logprob_token_ids: bool
    #: a ``tokenizers.Tokenizer`` equal to the server's: prompts are sent as token ids
    tokenizer: Any = None
    #: token ids of the prefix and the suffix (with a tokenizer)
    prefix_ids: tuple[int, ...] = ()
    suffix_ids: tuple[int, ...] = ()

    def with_tokenizer(self, tokenizer: Any) -> ClassifierPlan:
        """This plan sending token ids made with ``tokenizer``."""
        plan = dataclasses.replace(self, tokenizer=tokenizer)
        if self.scoring == "head":
            return plan
        prefix, suffix = plan._encode_batch([self.prefix, PROMPT_SUFFIX])
        return dataclasses.replace(plan, prefix_ids=tuple(prefix), suffix_ids=tuple(suffix))

    @property
    def text_token_budget(self) -> int:
        """Most text tokens that fit beside the prompt and the answer."""
        return self.max_model_len - self.overhead_tokens - _BOUNDARY_MARGIN - self.max_tokens

    def length_error(self, text_tokens: int) -> ContextLengthError | None:
        """The error for a text of ``text_tokens`` tokens that does not fit, else None."""
        budget = self.text_token_budget
        if text_tokens <= budget:
            return None
        return ContextLengthError(
            f"text has {text_tokens} tokens; at most {budget} fit in the server's "
            f"context of {self.max_model_len} beside the prompt",
            tokens=text_tokens,
            limit=budget,
        )

    def encode(self, texts: list[str]) -> list[list[int]]:
        """Token ids of the prompts for ``texts``, exactly as the server would tokenise
        :meth:`render`'s text.

        Only the texts are tokenised, and set between the fixed parts' ids. That is exact
        because the suffix starts with a special token, which always splits, and the prefix
        ends in a newline that is a token of its own unless the text starts with whitespace
        (Qwen's pre-split joins whitespace that ends in a newline): those texts are tokenised
        within the whole prompt.
        """
        if self.scoring == "head":
            return self._encode_batch([neutralize_control_tokens(t) for t in texts])
        whole = [t[:1].isspace() for t in texts]
        parts = [self.render(t) if w else neutralize_control_tokens(t) for t, w in zip(texts, whole)]
        prefix, suffix = list(self.prefix_ids), list(self.suffix_ids)
        return [ids if w else prefix + ids + suffix for ids, w in zip(self._encode_batch(parts), whole)]

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast skips character offsets we do not use (about a third less CPU).
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def render(self, text: str) -> str:
        if self.scoring == "head":  # a classification head reads the bare text
            return neutralize_control_tokens(text)
        return self.prefix + neutralize_control_tokens(text) + PROMPT_SUFFIX


def plan_scoring(
    label_set: LabelSet,
    label_tokens: Sequence[Sequence[int]],
    letter_tokens: Sequence[Sequence[int]] | None,
) -> tuple[Scoring, tuple[int, ...], int]:
    """Choose how to score from each label's (and letter's) tokenisation.

    Returns the scoring, the answer token per label (empty for constrained choice) and the
    ``max_tokens`` a reply needs.
    """
    firsts = tuple(tokens[0] for tokens in label_tokens)
    if len(set(firsts)) == len(firsts):
        return "label_tokens", firsts, 1
    if letter_tokens is not None and all(len(t) == 1 for t in letter_tokens):
        letters = tuple(t[0] for t in letter_tokens)
        if len(set(letters)) == len(letters):
            return "letter_tokens", letters, 1
    # Under a grammar the model may spell a label in non-canonical tokens (down to one byte
    # each), so the label's UTF-8 length, not its canonical token count, bounds the reply.
    return "constrained_choice", (), max(len(label.encode()) for label in label_set.labels)


@dataclass(frozen=True)
class Prediction:
    """A parsed reply: the label index, and label probabilities when the scoring gives them."""

    index: int
    scores: tuple[float, ...] | None


def label_probabilities(logprobs: Mapping[int, float], token_ids: Sequence[int]) -> tuple[float, ...]:
    """Softmax over the labels' token logprobs (labels with no logprob, or a non-finite one,
    get 0). Raises ``ValueError`` when no label has a finite logprob."""
    values = [logprobs.get(t, -math.inf) for t in token_ids]
    values = [v if math.isfinite(v) else -math.inf for v in values]
    top = max(values)
    if top == -math.inf:
        raise ValueError("no label token has a finite logprob")
    weights = [math.exp(v - top) for v in values]
    total = sum(weights)
    return tuple(w / total for w in weights)
