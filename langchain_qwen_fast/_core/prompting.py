"""Labels, prompt layout and scoring plans. Pure: no I/O, no knowledge of HTTP endpoints.

A prompt is pre-rendered client-side in the served model's chat format, so the server only
tokenises it (or, with a client-side tokenizer, receives token ids). Two formats are known
(:class:`PromptFormat`): Qwen3's with thinking off (ChatML turns and the empty
``<think></think>`` block the Qwen3 template adds for ``enable_thinking=False``), and plain
ChatML, the same turns without that block, for a ChatML model with no thinking mode (Qwen2.5,
SmolLM2, ...). :func:`fit_format` picks one from the served vocabulary; a model whose
vocabulary lacks ChatML's turn tokens is refused. The chat layout:

    head                 system turn (instructions, labels[, multi-label examples]) + example turns
    [selected examples]  turns chosen per text by an example selector
    body                 "<|im_start|>user\\n" + the text
    tail                 one per decode step: the assistant turn's opening (+ a label question,
                         or the label tokens already given)

The fixed head comes first and the text after it, so vLLM's prefix cache reuses the head across
every request, and a text's body across its steps.

That is the ``chat`` layout, the one an untrained chat model understands. A model trained for
the task (``qwen-fast train``) can take the ``compact`` layout, which asks the same question in
fewer tokens a text, all of them after the text computed for every text:

    head                 instructions, labels[, examples], padded with ``<|endoftext|>`` to
                         whole prefix-cache blocks (so no shared token is computed again)
    [selected examples]  as in the head
    body                 the text
    tail                 ``<|im_end|>`` (+ a multi-label question, or the label tokens given)

It has no chat turns, so it fits any vocabulary in which ``<|im_end|>`` and ``<|endoftext|>``
are tokens of their own (the model must be trained in it all the same).

Scoring, chosen once per classifier from the labels' tokens:

* ``label_tokens``: every label starts with a distinct token. One decode step, limited to those
  tokens; their logprobs, renormalised over the labels, are the label probabilities.
* ``label_sequences``: labels share first tokens, or there are many. One step per node of the
  labels' token trie (the step's prompt ends with the label tokens given so far); a label's
  probability is the product of its tokens' probabilities, normalised over the labels.
* ``yes_no``: multi-label. One yes/no step per label; each label's probability is
  P(yes) / (P(yes) + P(no)), independent of the others.
* ``constrained_choice``: the fallback for servers that cannot return chosen tokens' logprobs
  and labels that one token cannot tell apart: the server's constrained choice picks a whole
  label, and no probabilities are given.
* ``head``: a classification head (``/classify``) gives the probabilities.
"""

from __future__ import annotations

import dataclasses
import math
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from langchain_qwen_fast.errors import ConfigurationError, ContextLengthError, ResponseFormatError

#: How a label is read from the server (see above).
Scoring = Literal["label_tokens", "label_sequences", "yes_no", "constrained_choice", "head"]
#: How a prompt is laid out (see above): ``chat`` for any chat model, ``compact`` for a model
#: trained in it.
PromptLayout = Literal["chat", "compact"]
LAYOUTS: tuple[PromptLayout, ...] = ("chat", "compact")
#: Tokens in one of vLLM's prefix-cache blocks (its default block size): a compact head is
#: padded to a whole number of them.
CACHE_BLOCK_TOKENS = 16

DEFAULT_INSTRUCTIONS = "Classify the text. Answer with one label only."
DEFAULT_MULTI_LABEL_INSTRUCTIONS = "Decide which of the labels apply to the text. Answer each question with yes or no."
DEFAULT_COMPACT_INSTRUCTIONS = "Label the text."
DEFAULT_COMPACT_MULTI_LABEL_INSTRUCTIONS = "Does each label apply? yes or no."

# Tokenisation at a boundary between prompt parts can differ by a token from the parts
# counted apart; keep this much room when a text's tokens are counted on their own.
_BOUNDARY_MARGIN = 2

#: A rendered prompt: text, or the token ids of that text.
Prompt = str | list[int]

SYSTEM_OPEN = "<|im_start|>system\n"
TURN_END = "<|im_end|>\n"
USER_OPEN = "<|im_start|>user\n"
ASSISTANT_OPEN = "<|im_start|>assistant\n"
#: What Qwen3's template writes after the assistant turn's opening with thinking off.
EMPTY_THINK = "<think>\n\n</think>\n\n"
#: Closes the user turn and opens the assistant's with an empty think block (Qwen3, thinking off).
PROMPT_SUFFIX = TURN_END + ASSISTANT_OPEN + EMPTY_THINK
#: The compact layout's end of a text: one special token, which no text can spell and which
#: splits the tokenisation on both sides.
COMPACT_SUFFIX = "<|im_end|>"
#: What pads a compact head: a special token, so the head's own tokens never change with it.
COMPACT_PAD = "<|endoftext|>"

# Text that spells a Qwen control token (<|im_start|>, </think>, <tool_call>, ...) would be
# read as that token by the server and could forge a turn. A word joiner after "<" keeps the
# characters visible but breaks the match.
_CONTROL_TOKEN = re.compile(r"<(?=\|[a-z_]{1,30}\|>|/?(?:think|tool_call|tool_response)>)")
_THINK_BLOCK = re.compile(r"<think>.*?(?:</think>|$)", re.DOTALL)

#: A few-shot example: (text, label), or (text, [labels]) for a multi-label classifier.
Example = tuple[str, str | Sequence[str]]


@dataclass(frozen=True)
class PromptFormat:
    """How a chat-layout prompt writes its turns: the served model's chat template, rendered
    client-side. The turns are ChatML's in both known formats; they differ in what follows the
    assistant turn's opening (Qwen3's empty think block, or nothing)."""

    name: str
    #: what the template writes after the assistant turn's opening when no thinking is wanted
    thinking_off: str = ""

    @property
    def answer_suffix(self) -> str:
        """Closes the user turn and opens the assistant's."""
        return TURN_END + ASSISTANT_OPEN + self.thinking_off

    @property
    def special_tokens(self) -> tuple[str, ...]:
        """What must be a token of its own in the served vocabulary for this format to be the
        model's own: the turn markers, and the think tags when the format writes them."""
        return (*CHATML_TOKENS, *(THINK_TOKENS if self.thinking_off else ()))


#: ChatML's turn markers, and Qwen3's think tags.
CHATML_TOKENS = ("<|im_start|>", "<|im_end|>")
THINK_TOKENS = ("<think>", "</think>")
#: The tokens the compact layout is made of.
COMPACT_TOKENS = (COMPACT_SUFFIX, COMPACT_PAD)
#: Every token :func:`fit_format` asks about, each on its own.
FORMAT_PROBE_TOKENS = tuple(dict.fromkeys((*CHATML_TOKENS, *THINK_TOKENS, *COMPACT_TOKENS)))
#: Qwen3 with thinking off (the default), and ChatML without a thinking mode.
QWEN3 = PromptFormat("qwen3", EMPTY_THINK)
CHATML = PromptFormat("chatml")


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
class LabelSet:
    """The labels, their descriptions, the instructions and the fixed examples of a prompt."""

    labels: tuple[str, ...]
    descriptions: Mapping[str, str]
    instructions: str
    multi_label: bool = False
    #: (text, labels) pairs; one label each unless multi-label
    examples: tuple[tuple[str, tuple[str, ...]], ...] = ()
    layout: PromptLayout = "chat"
    #: compact layout: pad tokens that end the head (at least one; see :meth:`padded`)
    head_padding: int = 0
    #: chat layout: the served model's turn format (the set-up fits it: :func:`fit_format`)
    prompt_format: PromptFormat = QWEN3

    @classmethod
    def build(
        cls,
        labels: Sequence[str],
        descriptions: Mapping[str, str] | None = None,
        instructions: str | None = None,
        *,
        multi_label: bool = False,
        examples: Sequence[Example] = (),
        layout: PromptLayout = "chat",
    ) -> LabelSet:
        """Validate labels (at least two, distinct, non-empty, no surrounding whitespace),
        descriptions (of known labels) and examples (texts with known labels)."""
        if layout not in LAYOUTS:
            raise ConfigurationError(f"prompt_layout must be one of {list(LAYOUTS)}, got {layout!r}")
        labels = tuple(labels)
        if len(labels) < 2:
            raise ConfigurationError(f"need at least two labels, got {list(labels)!r}")
        for label in labels:
            if not isinstance(label, str) or not label.strip():
                raise ConfigurationError(f"every label must be a non-empty string, got {label!r}")
            if label != label.strip():
                raise ConfigurationError(f"label {label!r} has leading or trailing whitespace")
        duplicates = sorted({x for x in labels if labels.count(x) > 1})
        if duplicates:
            raise ConfigurationError(f"labels must be distinct; repeated: {duplicates}")
        descriptions = dict(descriptions or {})
        unknown = sorted(set(descriptions) - set(labels))
        if unknown:
            raise ConfigurationError(f"descriptions given for unknown labels: {unknown}")
        if layout == "compact":
            for label in labels:
                # The compact head lists the labels on one line, and a label is the answer
                # itself: neither may break the line or spell a control token.
                if "\n" in label or neutralize_control_tokens(label) != label:
                    raise ConfigurationError(
                        f"label {label!r} cannot be served in the compact layout (a line break or a "
                        "control token); use prompt_layout='chat' or rename the label"
                    )
            default = DEFAULT_COMPACT_MULTI_LABEL_INSTRUCTIONS if multi_label else DEFAULT_COMPACT_INSTRUCTIONS
        else:
            default = DEFAULT_MULTI_LABEL_INSTRUCTIONS if multi_label else DEFAULT_INSTRUCTIONS
        return cls(
            labels,
            descriptions,
            (instructions or default).strip(),
            multi_label,
            tuple(check_example(e, labels, multi_label) for e in examples),
            layout,
        )

    def padded(self, head_tokens: int) -> LabelSet:
        """This label set with its compact head padded to whole cache blocks, given how many
        tokens the unpadded head (:meth:`render_head` with ``head_padding`` 0) takes. At least
        one pad token always ends it, so the text after it tokenises as it would alone. A
        chat head is left as it is: an untrained model reads every token of it."""
        if self.layout != "compact":
            return self
        return dataclasses.replace(self, head_padding=1 + (-(head_tokens + 1)) % CACHE_BLOCK_TOKENS)

    def unpadded_head(self) -> str:
        """:meth:`render_head` without padding (what :meth:`padded` counts)."""
        return dataclasses.replace(self, head_padding=0).render_head()

    @property
    def answer_suffix(self) -> str:
        """What follows the text and asks for its label."""
        return COMPACT_SUFFIX if self.layout == "compact" else self.prompt_format.answer_suffix

    @property
    def body_open(self) -> str:
        """What opens a text's part of the prompt."""
        return "" if self.layout == "compact" else USER_OPEN

    def render_head(self) -> str:
        """The fixed start of every prompt: the system turn, then the example turns (compact:
        the instructions, the labels, the examples and the padding)."""
        if self.layout == "compact":
            labels = [self._describe(label) for label in self.labels]
            return (
                f"{self.instructions}\nLabels: {', '.join(labels)}\n"
                + self.render_examples(self.examples)
                + COMPACT_PAD * self.head_padding
            )
        lines = [self.instructions]
        if self.descriptions:
            lines += ["Labels:", *(f"- {self._describe(label)}" for label in self.labels)]
        else:
            lines.append("Labels: " + ", ".join(self.labels))
        return SYSTEM_OPEN + "\n".join(lines) + TURN_END + self.render_examples(self.examples)

    def render_examples(self, examples: Sequence[tuple[str, tuple[str, ...]]]) -> str:
        """Examples as turns: single-label, a user turn with the text and an assistant turn
        answering its label; multi-label, one user turn listing each text with its labels."""
        if not examples:
            return ""
        if self.layout == "compact":  # each as the prompt that asks it, then its answer
            return "".join(
                f"{neutralize_control_tokens(text)}{COMPACT_SUFFIX}{', '.join(labels) or 'none'}\n"
                for text, labels in examples
            )
        if self.multi_label:
            lines = ["Examples:"]
            for text, labels in examples:
                lines += [f"Text: {neutralize_control_tokens(text)}", f"Labels: {', '.join(labels) or 'none'}"]
            return USER_OPEN + "\n".join(lines) + TURN_END
        return "".join(
            f"{USER_OPEN}{neutralize_control_tokens(text)}{TURN_END}{ASSISTANT_OPEN}{labels[0]}{TURN_END}"
            for text, labels in examples
        )

    def question(self, label: str) -> str:
        """A multi-label step's tail: the yes/no question for ``label``, then the answer's opening.

        Short on purpose: the head (which asks for yes or no) and the text are cached, so a
        step computes only its tail, once per label, and every token left out of the question
        is a token less for each label of each text (docs/performance.md compares it with a
        longer wording)."""
        if self.layout == "compact":
            return f"{COMPACT_SUFFIX}{label}?"
        return f"{TURN_END}{USER_OPEN}Does {label!r} apply?{self.answer_suffix}"

    def _describe(self, label: str) -> str:
        desc = self.descriptions.get(label)
        return f"{label} ({desc})" if desc else label


def fit_format(label_set: LabelSet, token_counts: Mapping[str, int], whose: str) -> LabelSet:
    """``label_set`` written in the served model's format, from how many tokens each of
    :data:`FORMAT_PROBE_TOKENS` takes in its vocabulary: Qwen3's where the think tags are
    tokens of their own, plain ChatML where only the turn markers are.

    Raises:
        ConfigurationError: naming ``whose`` vocabulary it is ("model 'x'") and the missing
            tokens, where the turn markers (chat layout) or the compact layout's tokens are not
            tokens of their own: the prompt would reach the model as text it was never trained on.
    """
    if label_set.layout == "compact":
        lacking = _lacking(COMPACT_TOKENS, token_counts)
        if lacking:
            raise ConfigurationError(
                f"{whose} cannot take the compact prompt layout: {lacking} "
                f"{'is' if len(lacking) == 1 else 'are'} not a single token of its vocabulary, and the "
                "layout is made of them; use prompt_layout='chat'"
            )
        return label_set
    lacking = _lacking(CHATML_TOKENS, token_counts)
    if lacking:
        raise ConfigurationError(
            f"{whose} has no ChatML chat template: {lacking} {'is' if len(lacking) == 1 else 'are'} "
            "not a single token of its vocabulary. Classifiers and decision models write their chat prompts in "
            "ChatML (Qwen3's, or without the think block for ChatML models such as Qwen2.5 and SmolLM2); serve a "
            "ChatML chat model, or for a classifier a classification head (mode='head'), which reads the bare text"
        )
    fitted = QWEN3 if not _lacking(THINK_TOKENS, token_counts) else CHATML
    return label_set if fitted == label_set.prompt_format else dataclasses.replace(label_set, prompt_format=fitted)


def format_token_counts(encoded: Sequence[Sequence[int]]) -> dict[str, int]:
    """How many tokens each of :data:`FORMAT_PROBE_TOKENS` takes, from their token ids (in
    that order), as :func:`fit_format` reads them."""
    return {token: len(ids) for token, ids in zip(FORMAT_PROBE_TOKENS, encoded, strict=True)}


def fit_format_to_tokenizer(label_set: LabelSet, tokenizer: Any, whose: str = "this tokenizer's model") -> LabelSet:
    """:func:`fit_format` with a local ``tokenizers.Tokenizer``: the format the classifier's
    set-up picks on a server of that tokenizer, so that a model is trained on the prompts it
    is served with."""
    encoded = tokenizer.encode_batch(list(FORMAT_PROBE_TOKENS), add_special_tokens=False)
    return fit_format(label_set, format_token_counts([e.ids for e in encoded]), whose)


def _lacking(tokens: Sequence[str], token_counts: Mapping[str, int]) -> list[str]:
    return [t for t in tokens if token_counts.get(t) != 1]


#: The conversation the set-up has the server's chat template render, to check that it
#: writes what :func:`render_template_probe` writes: a system turn and a user turn.
TEMPLATE_PROBE = ({"role": "system", "content": "Classify the text."}, {"role": "user", "content": "probe"})


def render_template_probe(prompt_format: PromptFormat) -> str:
    """:data:`TEMPLATE_PROBE` as the classifier renders it in ``prompt_format``, with the
    assistant turn opened."""
    system, user = (m["content"] for m in TEMPLATE_PROBE)
    return SYSTEM_OPEN + system + TURN_END + USER_OPEN + user + prompt_format.answer_suffix


def check_example(example: Any, labels: Sequence[str], multi_label: bool) -> tuple[str, tuple[str, ...]]:
    """An example as (text, labels), or :class:`ConfigurationError` naming what is wrong with it."""
    if isinstance(example, Mapping):
        example = (example.get("text"), example.get("labels", example.get("label")))
    try:
        text, answer = example
    except (TypeError, ValueError):
        raise ConfigurationError(f"an example must be (text, label), got {example!r}") from None
    if not isinstance(text, str) or not text.strip():
        raise ConfigurationError(f"an example's text must be non-empty text, got {text!r}")
    given = (answer,) if isinstance(answer, str) else tuple(answer or ())
    if not multi_label and len(given) != 1:
        raise ConfigurationError(f"a single-label example needs exactly one label, got {answer!r}")
    unknown = [x for x in given if x not in labels]
    if unknown:
        raise ConfigurationError(f"example {text[:40]!r} names labels the classifier lacks: {unknown}")
    return text, given


@dataclass(frozen=True)
class Step:
    """One constrained decode question asked of every text."""

    #: what follows the text in the prompt (then ``path_text``)
    tail: str
    #: the tokens the answer may be (empty under constrained choice and for a head)
    allowed: tuple[int, ...] = ()
    #: ``label_sequences``: the label tokens the prompt already ends with, and their text
    path: tuple[int, ...] = ()
    path_text: str = ""
    #: the tail's token ids, path included (with a tokenizer)
    tail_ids: tuple[int, ...] = ()


@dataclass(frozen=True)
class ClassifierPlan:
    """Everything decided once per classifier and server: prompt, steps, request shape."""

    label_set: LabelSet
    scoring: Scoring
    head: str
    steps: tuple[Step, ...]
    max_tokens: int
    #: tokens of the head and the longest tail, i.e. the longest prompt without the body
    overhead_tokens: int
    max_model_len: int
    #: the server returns logprobs for chosen token ids (vLLM ``logprob_token_ids``)
    has_logprob_token_ids: bool
    #: ``label_sequences``: each label's tokens
    label_paths: tuple[tuple[int, ...], ...] = ()
    #: ``label_sequences``: the token that ends an answer (for labels that prefix others)
    end_token: int | None = None
    #: a ``tokenizers.Tokenizer`` equal to the server's: prompts are sent as token ids
    tokenizer: Any = None
    head_ids: tuple[int, ...] = ()
    #: the server reads a list of prompts in one request; vLLM's Rust frontend takes one prompt
    #: a request (see :meth:`~langchain_qwen_fast._core.procedure.Procedure.setup_steps`)
    takes_prompt_lists: bool = True
    #: what the server says of the weights it serves (its ``/v1/models`` entry): part of the
    #: cache key, so that redeployed weights never answer from an old entry
    served: str = ""

    @classmethod
    def generate(
        cls,
        label_set: LabelSet,
        scoring: Scoring,
        steps: tuple[Step, ...],
        overhead_tokens: int,
        max_model_len: int,
        *,
        label_paths: tuple[tuple[int, ...], ...] = (),
        end_token: int | None = None,
    ) -> ClassifierPlan:
        """A plan that reads the labels from one-token decode steps after the label set's
        head, asking for the answer tokens' logprobs (every scoring but ``head``)."""
        return cls(
            label_set=label_set,
            scoring=scoring,
            head=label_set.render_head(),
            steps=steps,
            max_tokens=1,
            overhead_tokens=overhead_tokens,
            max_model_len=max_model_len,
            has_logprob_token_ids=True,
            label_paths=label_paths,
            end_token=end_token,
        )

    def answer_tokens(self, index: int) -> tuple[int, ...]:
        """The tokens that answer label ``index`` as :meth:`combine` reads them (a training
        target): the first token under ``label_tokens``; the whole label, and the end token
        where other labels continue it, under ``label_sequences``."""
        if self.scoring == "label_tokens":
            return self.steps[0].allowed[index : index + 1]
        if self.scoring != "label_sequences":
            raise ConfigurationError(f"{self.scoring} scoring has no answer tokens")
        path = self.label_paths[index]
        nodes = {step.path for step in self.steps}
        return (*path, self.end_token) if path in nodes and self.end_token is not None else path

    @property
    def answer_token_ids(self) -> tuple[int, ...]:
        """The first step's answer tokens (for ``label_tokens``, one per label)."""
        return self.steps[0].allowed if self.steps else ()

    def with_tokenizer(self, tokenizer: Any) -> ClassifierPlan:
        """This plan sending token ids made with ``tokenizer``."""
        plan = dataclasses.replace(self, tokenizer=tokenizer)
        if self.scoring == "head":
            return plan
        head, *tails = plan._encode_batch([self.head, *(s.tail for s in self.steps)])
        steps = tuple(
            dataclasses.replace(s, tail_ids=tuple(ids) + s.path) for s, ids in zip(self.steps, tails, strict=True)
        )
        return dataclasses.replace(plan, head_ids=tuple(head), steps=steps)

    @property
    def text_token_budget(self) -> int:
        """Most body tokens (the user turn's opening and the text) that fit beside the rest."""
        return self.max_model_len - self.overhead_tokens - _BOUNDARY_MARGIN - self.max_tokens

    def length_error(self, body_tokens: int) -> ContextLengthError | None:
        """The error for a body of ``body_tokens`` tokens that does not fit, else None."""
        budget = self.text_token_budget
        if body_tokens <= budget:
            return None
        return ContextLengthError(
            f"text has {body_tokens} tokens with its turn; at most {budget} fit in the server's "
            f"context of {self.max_model_len} beside the prompt",
            tokens=body_tokens,
            limit=budget,
        )

    def body(self, text: str, examples: str = "") -> str:
        """Everything between the head and a step's tail: selected examples, the user turn's
        opening and the (defused) text. A head model reads the bare text."""
        if self.scoring == "head":
            return neutralize_control_tokens(text)
        return examples + self.label_set.body_open + neutralize_control_tokens(text)

    def render(self, text: str, step: int = 0, examples: str = "") -> str:
        """The full text prompt of ``text`` for ``step``."""
        if self.scoring == "head":
            return self.body(text)
        tail = self.steps[step]
        return self.head + self.body(text, examples) + tail.tail + tail.path_text

    def encode_bodies(self, bodies: list[str]) -> list[list[int]]:
        """Token ids of bodies, exactly as the server tokenises them inside a prompt: each body
        starts with a special token (or, for a head, is the whole input) and each tail too, and
        special tokens always split, so the parts tokenise apart as they would together."""
        return self._encode_batch(bodies)

    def encode(self, texts: list[str], step: int = 0) -> list[list[int]]:
        """Token ids of ``texts``' prompts for ``step``, as the server would tokenise :meth:`render`'s."""
        return [self.prompt_ids(ids, step) for ids in self.encode_bodies([self.body(t) for t in texts])]

    def prompt_ids(self, body_ids: list[int], step: int) -> list[int]:
        """A prompt's token ids for ``step`` from its body's ids."""
        if self.scoring == "head":
            return body_ids
        return [*self.head_ids, *body_ids, *self.steps[step].tail_ids]

    def _encode_batch(self, texts: list[str]) -> list[list[int]]:
        # encode_batch_fast skips the character offsets we do not use, work done per token.
        encode = getattr(self.tokenizer, "encode_batch_fast", self.tokenizer.encode_batch)
        return [e.ids for e in encode(texts, add_special_tokens=False)]

    def combine(self, answers: Sequence[Mapping[int, float]]) -> Prediction:
        """A text's label probabilities from its steps' answers (token -> logprob; for a head,
        class -> probability; under constrained choice, the chosen label's index -> 0)."""
        if self.scoring == "label_tokens":  # the default scoring first: this runs once a text
            return Prediction.of(label_probabilities(answers[0], self.answer_token_ids))
        labels = self.label_set.labels
        if self.scoring == "constrained_choice":
            (index,) = answers[0]
            return Prediction(index, None)
        if self.scoring == "head":
            probs = [answers[0].get(i, 0.0) for i in range(len(labels))]
            if not self.label_set.multi_label:
                total = sum(probs)
                probs = [p / total for p in probs]
            return Prediction.of(probs)
        if self.scoring == "yes_no":
            yes, no = self.steps[0].allowed
            return Prediction.of([yes_probability(a.get(yes, -math.inf), a.get(no, -math.inf)) for a in answers])
        # label_sequences
        node = {step.path: k for k, step in enumerate(self.steps)}
        totals = []
        for path in self.label_paths:
            total = sum(answers[node[path[:i]]].get(path[i], -math.inf) for i in range(len(path)))
            if path in node:  # a label that other labels continue: it must also end here
                total += answers[node[path]].get(self.end_token or -1, -math.inf)
            totals.append(total)
        return Prediction.of(softmax(totals))


class Prediction(NamedTuple):
    """A text's best label and, when the scoring gives them, every label's probability.

    A tuple of numbers, so the cyclic garbage collector stops tracking it at its first pass:
    a batch's predictions, made while its other requests are out, never add to the heap that
    its full passes walk."""

    #: the best label's index
    best: int
    scores: tuple[float, ...] | None

    @classmethod
    def of(cls, scores: Sequence[float]) -> Prediction:
        """The prediction with these scores (the best label is the likeliest; the first of
        equals)."""
        held = tuple(scores)
        return cls(held.index(max(held)), held)


def yes_no_steps(labels: LabelSet, yes_no: Sequence[Sequence[int]], where: str) -> tuple[Step, ...]:
    """The multi-label steps, from the token ids of ``yes`` and ``no``: one step per label, its
    question as the step's tail, ``yes`` and ``no`` as the step's answer tokens.
    :class:`ConfigurationError` when they are not single distinct tokens (``where`` says whose
    tokens: "on this server", "for this tokenizer")."""
    if len(yes_no) != 2 or any(len(t) != 1 for t in yes_no) or yes_no[0] == yes_no[1]:
        raise ConfigurationError(f"'yes' and 'no' must be single distinct tokens {where}, got {list(yes_no)}")
    allowed = (yes_no[0][0], yes_no[1][0])
    return tuple(Step(labels.question(label), allowed) for label in labels.labels)


def plan_steps(
    label_tokens: Sequence[Sequence[int]], end_token: int, suffix: str = PROMPT_SUFFIX
) -> tuple[Scoring, tuple[Step, ...], tuple[tuple[int, ...], ...]]:
    """A single-label set's scoring and steps from each label's tokenisation.

    Distinct first tokens: one step over them. Otherwise one step per node of the labels'
    token trie (``Step.path`` holds the node; the caller fills in ``path_text``); a label that
    other labels continue may also end at its node, with ``end_token``. Each step's tail is
    ``suffix`` (the label set's :attr:`LabelSet.answer_suffix`). Also returns the label paths.
    """
    paths = tuple(tuple(tokens) for tokens in label_tokens)
    if any(not p for p in paths):
        raise ConfigurationError("every label must tokenise to at least one token")
    firsts = tuple(p[0] for p in paths)
    if len(set(firsts)) == len(firsts):
        return "label_tokens", (Step(suffix, firsts),), paths
    if len(set(paths)) != len(paths):
        raise ConfigurationError("two labels tokenise identically")
    children: dict[tuple[int, ...], set[int]] = {}
    for path in paths:
        for i in range(len(path)):
            children.setdefault(path[:i], set()).add(path[i])
    for path in paths:
        if path in children:
            children[path].add(end_token)
    steps = tuple(Step(suffix, tuple(sorted(c)), node) for node, c in sorted(children.items()))
    return "label_sequences", steps, paths


def local_plan(label_set: LabelSet, tokenizer: Any, max_model_len: int = 4096) -> ClassifierPlan:
    """A single-label generate plan made with a local ``tokenizers.Tokenizer`` instead of a
    server (for training, and for checking a trained model against its server): the same
    prompt, label tokens and steps the classifier learns from a server of that tokenizer."""
    if label_set.multi_label:
        raise ConfigurationError("local plans are single-label")
    label_set = fit_format_to_tokenizer(label_set, tokenizer)
    parts = [*label_set.labels, "<|im_end|>", label_set.unpadded_head()]
    encoded = tokenizer.encode_batch(parts, add_special_tokens=False)
    *label_tokens, end, head = (e.ids for e in encoded)
    label_set = label_set.padded(len(head))
    scoring, steps, paths = plan_steps(label_tokens, end[0], label_set.answer_suffix)
    if scoring == "label_sequences":
        steps = tuple(dataclasses.replace(s, path_text=tokenizer.decode(list(s.path))) for s in steps)
    plan = ClassifierPlan.generate(label_set, scoring, steps, 0, max_model_len, label_paths=paths, end_token=end[0])
    return plan.with_tokenizer(tokenizer)


def constrained_choice_max_tokens(label_set: LabelSet) -> int:
    """Under a grammar the model may spell a label in non-canonical tokens (down to one byte
    each), so the label's UTF-8 length, not its canonical token count, bounds the reply."""
    return max(len(label.encode()) for label in label_set.labels)


def softmax(logprobs: Sequence[float]) -> tuple[float, ...]:
    """Normalised probabilities from logprobs (non-finite ones count as 0). Raises
    :class:`ResponseFormatError` when none is finite."""
    # A sum is finite only when every term is (logprobs are far from overflowing it), so the
    # usual all-finite reply skips the per-value check.
    values = logprobs if math.isfinite(sum(logprobs)) else [v if math.isfinite(v) else -math.inf for v in logprobs]
    top = max(values, default=-math.inf)
    if top == -math.inf:
        raise ResponseFormatError("no label has a finite logprob")
    weights = [math.exp(v - top) for v in values]
    total = sum(weights)
    return tuple([w / total for w in weights])


def label_probabilities(logprobs: Mapping[int, float], token_ids: Sequence[int]) -> tuple[float, ...]:
    """Softmax over the labels' token logprobs (labels with no logprob, or a non-finite one,
    get 0). Raises :class:`ResponseFormatError` when no label has a finite logprob."""
    return softmax([logprobs.get(t, -math.inf) for t in token_ids])


def yes_probability(yes: float, no: float) -> float:
    """P(yes) / (P(yes) + P(no)) from their logprobs."""
    return softmax([yes, no])[0]
