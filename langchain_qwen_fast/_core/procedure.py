"""The classifier's request procedure, written once for sync and async (sans-I/O).

Each procedure is a generator: it yields batches of calls (:data:`~langchain_qwen_fast._core.transport.Call`),
receives their results (decoded JSON, or the exception the call ended with) and returns its
value. ``drive``/``adrive`` in the transport run it with blocking or async I/O.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from langchain_qwen_fast._core import vllm_api
from langchain_qwen_fast._core.classification import Classification, Decided, classification_of, text_of
from langchain_qwen_fast._core.decisions import DecisionPlan, UsageLedger
from langchain_qwen_fast._core.dispatch import PromptBatch
from langchain_qwen_fast._core.prompting import (
    ClassifierPlan,
    LabelSet,
    Prediction,
    Prompt,
    Step,
    constrained_choice_max_tokens,
    plan_steps,
    yes_no_steps,
)
from langchain_qwen_fast._core.replies import (
    Finisher,
    Group,
    combined,
    one_step,
    prediction_of,
    read_group,
    record,
)
from langchain_qwen_fast._core.result_cache import ResultCache
from langchain_qwen_fast._core.settings import EngineSettings, Node, Rules
from langchain_qwen_fast._core.temperature import apply_temperature
from langchain_qwen_fast._core.transport import Call, Steps
from langchain_qwen_fast.errors import (
    ConfigurationError,
    InvalidInputError,
    QwenFastError,
    ServerStatusError,
    splits_group,
)

# Prompts tokenised client-side per slice, with a yield between slices: a slice is short
# enough not to stall the event loop, long enough that the yields cost next to nothing.
_ENCODE_SLICE = 1024
# Prompts whose token ids the set-up compares with the server's, to catch a wrong tokenizer.
_TOKENIZER_SAMPLES = ("Check: 1,234 naïve café — 東京 <b>bold</b>\n\tend", "\n  starts with whitespace")


class Procedure:
    """The classifier's requests, from the set-up to the results: the logic over an engine's
    :class:`~langchain_qwen_fast._core.settings.EngineSettings` (see the module docstring).

    Args:
        settings: the engine's settings.
        tokenizer: the ``tokenizers`` tokenizer at ``settings.tokenizer_path``, if any.
    """

    def __init__(self, settings: EngineSettings, tokenizer: Any = None) -> None:
        self.settings = settings
        self.model = settings.model
        self.rules: Rules = settings.rules
        #: the results in the settings' cache, if any
        self.results = ResultCache(settings)
        self.tokenizer = tokenizer
        #: the servers, as messages name them
        self.servers = tuple(u.rstrip("/") for u in settings.base_urls)

    # -- set-up -----------------------------------------------------------------------------
    def setup_steps(self) -> Steps[dict[Node, ClassifierPlan]]:
        """Every node's plan, learnt from the server, and whether the server takes a list of
        prompts in one request (the first probe finds out; see :meth:`probe_steps`)."""
        models_reply = _raise_any((yield [vllm_api.models_call()]))[0]
        served = vllm_api.parse_models(models_reply)
        if self.model not in served:
            where = ", ".join(self.servers) or "the server"
            raise ConfigurationError(f"model {self.model!r} is not served at {where}; it serves {sorted(served)}")
        plans = {}
        lists = PromptLists()
        for node, label_set in self.settings.label_sets.items():
            if self.settings.mode == "head":
                plan = yield from self._head_plan_steps(label_set, served[self.model], lists)
            else:
                plan = yield from self._generate_plan_steps(label_set, served[self.model], lists)
            if self.tokenizer is not None:
                plan = plan.with_tokenizer(self.tokenizer)
                yield from self._check_tokenizer_steps(plan)
            plans[node] = plan
        if lists.taken is None:  # no plan needed a probe (constrained choice): one for this alone
            yield from self.probe_steps(plans[()], 0, lists)
        identity = vllm_api.model_identity(models_reply, self.model)
        return {
            node: dataclasses.replace(plan, takes_prompt_lists=bool(lists.taken), served=identity)
            for node, plan in plans.items()
        }

    def probe_steps(self, plan: ClassifierPlan, step: int, lists: PromptLists) -> Steps[Any]:
        """The server's reply to a one-prompt request for ``step``, learning on the way whether
        it takes a list of prompts in one request. vLLM's Python API server does; its Rust
        frontend refuses a list with HTTP 400 and answers the same prompt sent alone, so a
        refused list whose prompt is then answered alone means one prompt a request from then
        on. Once learnt (``lists``), a probe is asked in that form only."""
        prompt = self._probe_prompt(plan, step)
        alone = dataclasses.replace(plan, takes_prompt_lists=False)
        ask = alone if lists.taken is False else plan
        reply = (yield [vllm_api.classify_call(ask, self.model, step, [prompt])])[0]
        if lists.taken is None and splits_group(reply):
            single = (yield [vllm_api.classify_call(alone, self.model, step, [prompt])])[0]
            if isinstance(single, Exception):
                raise reply  # refused alone too: the list was not what it refused
            lists.taken = False
            return single
        _raise_any([reply])
        if lists.taken is None:
            lists.taken = True
        return reply

    def tokenize_steps(self, texts: Sequence[str]) -> Steps[list[list[int]]]:
        """The token ids of ``texts``, as the server tokenises them in a prompt."""
        if self.tokenizer is not None:
            # The local tokenizer, checked against the server's where it has one
            # (_check_tokenizer_steps): no round trips, and servers without a tokenizer work.
            return [e.ids for e in self.tokenizer.encode_batch(list(texts), add_special_tokens=False)]
        replies = _raise_any((yield [vllm_api.tokenize_call(self.model, t) for t in texts]))
        return [vllm_api.parse_tokenize(r) for r in replies]

    def _probe_prompt(self, plan: ClassifierPlan, step: int = 0) -> Prompt:
        """A short prompt for a set-up probe: token ids with a local tokenizer (a server started
        with ``--skip-tokenizer-init`` reads nothing else), else text."""
        if self.tokenizer is None:
            return plan.render("probe", step)
        return plan.with_tokenizer(self.tokenizer).encode(["probe"], step)[0]

    def _generate_plan_steps(self, labels: LabelSet, max_model_len: int, lists: PromptLists) -> Steps[ClassifierPlan]:
        if labels.layout == "compact":  # its head padded to whole cache blocks
            head_tokens = yield from self.tokenize_steps([labels.unpadded_head()])
            labels = labels.padded(len(head_tokens[0]))
        scoring: Any
        paths: tuple[tuple[int, ...], ...] = ()
        text_prompts_work = True
        end_token = None
        if labels.multi_label:
            yes_no = yield from self.tokenize_steps(["yes", "no"])
            scoring, steps = "yes_no", yes_no_steps(labels, yes_no, "on this server")
        else:
            *label_tokens, end = yield from self.tokenize_steps([*labels.labels, "<|im_end|>"])
            end_token = end[0]
            scoring, steps, paths = plan_steps(label_tokens, end_token, labels.answer_suffix)
            if scoring == "label_sequences":
                with_text = yield from self.path_texts_steps(steps)
                text_prompts_work = with_text is not None  # each label prefix survives a round trip as text
                steps = with_text or steps
        distinct_tails = sorted({s.tail for s in steps})
        counts = yield from self.tokenize_steps([labels.render_head(), *distinct_tails])
        tail_tokens = dict(zip(distinct_tails, map(len, counts[1:]), strict=True))
        overhead = len(counts[0]) + max(tail_tokens[s.tail] + len(s.path) for s in steps)
        plan = ClassifierPlan.generate(
            labels, scoring, steps, overhead, max_model_len or overhead + 4096, label_paths=paths, end_token=end_token
        )
        if max_model_len and overhead + plan.max_tokens >= max_model_len:
            raise QwenFastError(
                f"the prompt's fixed part (instructions, {len(labels.labels)} labels, examples) takes {overhead} "
                f"tokens, leaving no room in the server's context of {max_model_len}; serve the model with a "
                "longer --max-model-len, or shorten the labels, descriptions or examples"
            )
        if not text_prompts_work:
            return _constrained_choice(plan)
        # vLLM versions differ: ask for the answer tokens' logprobs and see if they come back.
        k = vllm_api.probe_step(plan)
        probe = yield from self.probe_steps(plan, k, lists)
        if vllm_api.probe_has_logprob_token_ids(plan, probe):
            return plan
        if scoring == "label_sequences":  # top-k logprobs cannot score every node's tokens
            return _constrained_choice(plan)
        return dataclasses.replace(plan, has_logprob_token_ids=False)

    def path_texts_steps(self, steps: tuple[Step, ...]) -> Steps[tuple[Step, ...] | None]:
        """Each trie node's label tokens as text, checked to tokenise back to those tokens
        (after the prompt's closing newlines, a label's tokens start a fresh word). None when
        one does not: those labels cannot be continued from a text prompt."""
        inner = [s for s in steps if s.path]
        if self.tokenizer is not None:
            texts = [self.tokenizer.decode(list(s.path)) for s in inner]
        else:
            replies = yield [vllm_api.detokenize_call(self.model, s.path) for s in inner]
            try:
                texts = [vllm_api.parse_detokenize(_raise_any([r])[0]) for r in replies]
            except QwenFastError:
                return None
        back = yield from self.tokenize_steps(texts)
        if any(tuple(ids) != s.path for ids, s in zip(back, inner, strict=True)):
            return None
        by_path = {s.path: t for s, t in zip(inner, texts, strict=True)}
        return tuple(dataclasses.replace(s, path_text=by_path.get(s.path, "")) for s in steps)

    def _head_plan_steps(self, labels: LabelSet, max_model_len: int, lists: PromptLists) -> Steps[ClassifierPlan]:
        plan = ClassifierPlan(
            label_set=labels,
            scoring="head",
            head="",
            steps=(Step(""),),
            max_tokens=0,
            overhead_tokens=0,
            max_model_len=max_model_len or 4096,
            has_logprob_token_ids=False,
        )
        try:
            probe = yield from self.probe_steps(plan, 0, lists)
        except ServerStatusError as exc:
            if exc.status_code != 404:
                raise
            raise ServerStatusError(
                f"{exc}: the server serves no /classify there, which head mode needs (vLLM's Python API "
                "server with the head model; vLLM's Rust frontend answers 404 to /classify)",
                status_code=404,
            ) from None
        classes = vllm_api.parse_num_classes(probe)
        if classes != len(labels.labels):
            raise QwenFastError(
                f"model {self.model!r} has a {classes}-class head but {len(labels.labels)} labels were given"
            )
        # A softmax head's probabilities sum to 1; a multi-label (sigmoid) head's almost never do.
        total = sum(vllm_api.parse_head(plan, vllm_api.reply_items(plan, probe)[0]).values())
        if labels.multi_label == (abs(total - 1.0) < 1e-3):
            kind = "a single-label (softmax)" if labels.multi_label else "a multi-label (sigmoid)"
            fix = "multi_label=False" if labels.multi_label else "multi_label=True"
            raise QwenFastError(f"model {self.model!r} has {kind} head; use {fix}")
        return plan

    def _check_tokenizer_steps(self, plan: ClassifierPlan) -> Steps[None]:
        """Raise unless our token ids for sample prompts are exactly the server's (a tokenizer
        of another model would otherwise classify garbage without a sound)."""
        replies = yield [vllm_api.tokenize_call(self.model, plan.render(s)) for s in _TOKENIZER_SAMPLES]
        # A server started with --skip-tokenizer-init has none to compare with: ours is the
        # only tokenizer there (replicas may differ, so each sample is checked where it can be).
        checked = [
            (s, r) for s, r in zip(_TOKENIZER_SAMPLES, replies, strict=True) if not vllm_api.is_tokenizer_unavailable(r)
        ]
        served = [vllm_api.parse_tokenize(r) for r in _raise_any([r for _, r in checked])]
        bodies = plan.encode_bodies([plan.body(s) for s, _ in checked])
        for body, theirs in zip(bodies, served, strict=True):
            ours = plan.prompt_ids(body, 0)
            if ours != theirs:
                at = next((k for k, (a, b) in enumerate(zip(ours, theirs)) if a != b), min(len(ours), len(theirs)))
                raise QwenFastError(
                    f"the tokenizer at {self.settings.tokenizer_path} does not match the server's for model "
                    f"{self.model!r}: token {at} differs ({ours[at : at + 3]} here, {theirs[at : at + 3]} "
                    "on the server); point tokenizer_path at the served model's tokenizer"
                )

    # -- classification ---------------------------------------------------------------------
    def classify_steps(
        self,
        inputs: Sequence[Any],
        plans: Mapping[Node, ClassifierPlan],
        examples: Sequence[str | Exception] | None = None,
        *,
        batch_size: int | None = None,
        usage: UsageLedger | None = None,
    ) -> Steps[list[Any]]:
        """Classify ``inputs`` down the hierarchy; every slot ends as a Classification (a
        :class:`Decided` under a decision plan) or an exception, in input order.
        ``examples``: each input's selected examples, rendered. Prompts per request:
        ``batch_size``, else the settings', else as the transport cuts them. ``usage``: each
        body's share of the replies' token counts goes there."""
        sizes = _Sizes(batch_size or self.settings.batch_size, usage)
        results = yield from self._level_steps(inputs, plans[()], (), examples, sizes)
        if len(plans) > 1:  # a hierarchy: every result carries its path
            results = [_with_path(r) if isinstance(r, Classification) else r for r in results]
            yield from self._descend(inputs, plans, (), results, examples, sizes)
        return results

    def _descend(
        self,
        inputs: Sequence[Any],
        plans: Mapping[Node, ClassifierPlan],
        node: Node,
        results: list[Any],
        examples: Sequence[str | Exception] | None,
        sizes: _Sizes,
    ) -> Steps[None]:
        for label in plans[node].label_set.labels:
            child = (*node, label)
            if child not in plans:
                continue
            here = [i for i, r in enumerate(results) if isinstance(r, Classification) and r.label == label]
            if not here:
                continue
            sub_examples = [examples[i] for i in here] if examples is not None else None
            sub = yield from self._level_steps([inputs[i] for i in here], plans[child], child, sub_examples, sizes)
            for i, result in zip(here, sub, strict=True):
                results[i] = result if isinstance(result, Exception) else _below(results[i], result)
            yield from self._descend(inputs, plans, child, results, examples, sizes)

    def _level_steps(
        self,
        inputs: Sequence[Any],
        plan: ClassifierPlan,
        node: Node,
        examples: Sequence[str | Exception] | None,
        sizes: _Sizes,
    ) -> Steps[list[Any]]:
        """One level of the hierarchy for ``inputs``: each distinct prompt body is looked up
        in the cache, checked for length, asked and combined into its result once, and the
        result goes to every input with that body."""
        level = _Level(inputs, plan, examples)
        keys = self.results.keys(plan, node, level.bodies)
        outcome: dict[str, Any] = self.results.lookup(plan, keys)
        #: token ids of bodies tokenised here for their length check, to send as they are
        prompt_of: dict[str, list[int]] = {}
        unsure = [b for b in level.bodies if b not in outcome and _may_be_too_long(plan, b)]
        if plan.tokenizer is None:
            yield from self._server_length_steps(plan, unsure, outcome)
        else:
            yield from _local_length_steps(plan, unsure, outcome, prompt_of)
        pending = [b for b in level.bodies if outcome.get(b) is None]
        finisher = Finisher(functools.partial(self._made, plan)) if one_step(plan) else None
        answers = yield from self._ask_steps(plan, pending, prompt_of, sizes, finisher)
        made = finisher.finish() if finisher is not None else {}
        for body in pending:
            outcome[body] = made[body] if body in made else self._combined(plan, [step[body] for step in answers])
        self.results.store(keys, pending, outcome)
        return level.results(outcome)

    def _server_length_steps(self, plan: ClassifierPlan, unsure: list[str], outcome: dict[str, Any]) -> Steps[None]:
        """The server's token count of each body that may be too long: its length error (or
        the count's failure) into ``outcome``, None where it fits."""
        if unsure:
            counts = yield [vllm_api.tokenize_call(self.model, b) for b in unsure]
            for body, count in zip(unsure, counts, strict=True):
                outcome[body] = count if isinstance(count, Exception) else _length_error(plan, count)

    def _combined(self, plan: ClassifierPlan, answers: list[Any]) -> Any:
        """A body's result from its steps' answers, or the error one of them ended with."""
        if not isinstance(plan, DecisionPlan):
            return self._made(plan, prediction_of(plan, answers))
        return combined(
            answers,
            lambda got: Decided(
                answers=[self._result(_predicted(part, steps), part) for part, steps in plan.split(got)]
            ),
        )

    def _made(self, plan: ClassifierPlan, prediction: Prediction | Exception) -> Any:
        """A body's result from its prediction, or the error it ended with."""
        if isinstance(prediction, Exception):
            return prediction
        try:
            return self._result(prediction, plan)
        except QwenFastError as exc:
            return exc

    def _ask_steps(
        self,
        plan: ClassifierPlan,
        bodies: list[str],
        prompt_of: Mapping[str, list[int]],
        sizes: _Sizes,
        finisher: Finisher | None = None,
    ) -> Steps[list[dict[str, Any]]]:
        """Every step of every body, asked as one :class:`PromptBatch` a kind of step (the
        transport cuts each into requests as the servers' windows allow); each answer, or the
        exception that ended its request, by step and body (and, with a ``finisher``, each
        reply's predictions handed to it where the reply arrives). A request refused for its
        content is asked again in halves until the bad prompt stands alone."""
        answers: list[dict[str, Any]] = [{} for _ in plan.steps]
        runs = [(run, sizes.per_request(plan)) for run in _runs(plan, bodies)]
        while runs:
            batches: list[Call | PromptBatch] = [
                PromptBatch(len(run), functools.partial(self._run_call, plan, run, prompt_of, finisher), per_request)
                for run, per_request in runs
            ]
            replies = yield batches
            again: list[tuple[Group, int | None]] = []
            for (run, _), pieces in zip(runs, replies, strict=True):
                for piece in pieces:
                    group = run[piece.start : piece.stop]
                    if splits_group(piece.result) and len(group) > 1:
                        again.append((group, len(group) // 2))
                        continue
                    record(plan, group, piece, answers, sizes.usage)
            runs = again
        return answers

    def _run_call(
        self,
        plan: ClassifierPlan,
        run: Group,
        prompt_of: Mapping[str, list[int]],
        finisher: Finisher | None,
        start: int,
        stop: int,
    ) -> Call:
        """The request for prompts ``start:stop`` of ``run``."""
        return self._group_call(plan, run[start:stop], prompt_of, finisher)

    def _group_call(
        self,
        plan: ClassifierPlan,
        group: Group,
        prompt_of: Mapping[str, list[int]],
        finisher: Finisher | None = None,
    ) -> Call:
        """The request for ``group``, its reply read as
        :class:`~langchain_qwen_fast._core.replies.GroupReply` where it arrives.
        With a local tokenizer, prompts not yet tokenised are tokenised when the request is
        sent. With a ``finisher`` (a one-step plan: each answer is all a body's prediction
        needs) the reader makes the predictions too and hands them to it: made while the other
        requests are still out, they and their results are not left for after the last reply,
        when the servers have nothing more to do."""
        step = group[0][1]
        if plan.tokenizer is None or all(b in prompt_of for b, _ in group):
            prompts: Any = [_prompt(plan, prompt_of, b, k) for b, k in group]
        else:
            prompts = functools.partial(_encoded, plan, group, prompt_of)
        method, path, body = vllm_api.classify_call(plan, self.model, step, prompts)
        read = functools.partial(read_group, plan, tuple(group), finisher)
        return method, path, body, read

    def _result(self, prediction: Prediction, plan: ClassifierPlan) -> Classification:
        labels = plan.label_set.labels
        scoring = plan.scoring
        if prediction.scores is None:
            label = labels[prediction.best]
            return classification_of({"label": label, "labels": [label], "scoring": scoring})
        values = prediction.scores
        if self.rules.temperature != 1.0:
            values = tuple(apply_temperature(values, self.rules.temperature, plan.label_set.multi_label))
        scores = dict(zip(labels, values, strict=True))
        if plan.label_set.multi_label:
            thresholds = self.rules.thresholds
            chosen = [x for x in labels if scores[x] >= thresholds.get(x, 0.5)]
            best = max(chosen, key=scores.__getitem__) if chosen else None
            fields = {"label": best, "labels": chosen, "scores": scores, "scoring": scoring, "multi_label": True}
            return classification_of(fields)
        if self.rules.abstain_below is not None and max(values) < self.rules.abstain_below:
            fields = {"label": None, "labels": [], "scores": scores, "abstained": True, "scoring": scoring}
            return classification_of(fields)
        label = labels[prediction.best]
        return classification_of({"label": label, "labels": [label], "scores": scores, "scoring": scoring})


@dataclass
class PromptLists:
    """What the set-up has learnt of the server's request shape: whether it takes a list of
    prompts in one request (None: not yet known)."""

    taken: bool | None = None


@dataclass(frozen=True)
class _Sizes:
    """How one classification's prompts are sent: prompts per request (None: as the transport
    cuts them), and where the token counts go."""

    batch_size: int | None
    #: where each body's share of the replies' token counts goes, if anything
    usage: UsageLedger | None = None

    def per_request(self, plan: ClassifierPlan) -> int | None:
        """The most prompts a request carries under ``plan``: one where the server takes one
        prompt a request, else the fixed batch size, if any."""
        return self.batch_size if plan.takes_prompt_lists else 1


class _Level:
    """A level's inputs, deduplicated: identical texts (with identical examples) are asked
    once and answered in every place; an input that cannot be asked keeps its error."""

    def __init__(self, inputs: Sequence[Any], plan: ClassifierPlan, examples: Sequence[str | Exception] | None) -> None:
        self._results: list[Any] = [None] * len(inputs)
        self._where: dict[str, list[int]] = {}
        for i, value in enumerate(inputs):
            selected = examples[i] if examples else ""
            try:
                text = text_of(value)
            except InvalidInputError as exc:
                self._results[i] = exc
                continue
            if isinstance(selected, Exception):
                self._results[i] = selected
                continue
            self._where.setdefault(plan.body(text, selected), []).append(i)
        #: the distinct prompt bodies, in first-seen order
        self.bodies = list(self._where)

    def results(self, outcome: Mapping[str, Any]) -> list[Any]:
        """Every input's result: its body's ``outcome``, or its own error."""
        for body, places in self._where.items():
            for i in places:
                self._results[i] = outcome[body]
        return self._results


def _predicted(part: ClassifierPlan, answers: Sequence[Any]) -> Prediction:
    """A decision question's prediction from its steps' answers; a one-label choice, which
    has no steps, is certain."""
    return vllm_api.combine(part, answers) if part.steps else Prediction(0, (1.0,))


def _may_be_too_long(plan: ClassifierPlan, body: str) -> bool:
    """Whether ``body`` may not fit the plan's budget: UTF-8 bytes bound byte-level BPE tokens
    from above, so only bodies with more bytes than the budget need an exact count."""
    budget = plan.text_token_budget
    return len(body) * 4 > budget and len(body.encode()) > budget


def _local_length_steps(
    plan: ClassifierPlan, unsure: list[str], outcome: dict[str, Any], prompt_of: dict[str, list[int]]
) -> Steps[None]:
    """With a local tokenizer: each body that may be too long tokenised now (a slice at a
    time, the event loop runs between), its ids kept to send and its length error (None: it
    fits) into ``outcome``. The rest are tokenised group by group as their requests go out."""
    for start in range(0, len(unsure), _ENCODE_SLICE):
        part = unsure[start : start + _ENCODE_SLICE]
        for body, ids in zip(part, plan.encode_bodies(part), strict=True):
            prompt_of[body] = ids
            outcome[body] = plan.length_error(len(ids))
        yield []


#: Characters of text whose prompts of every kind are asked before the next texts' (see
#: :func:`_runs`): a few thousand tokens, which a server's prefix cache holds many times over.
_TEXT_BLOCK_CHARS = 16384


def _runs(plan: ClassifierPlan, bodies: list[str]) -> list[Group]:
    """Every step of every body, in runs the transport sends in turn: steps asked with the
    same answer tokens share requests (a multi-label text's label questions sit side by side,
    so the server's prefix cache keeps the text for all). Where the steps ask for answer
    tokens of several kinds (a decision's questions), the texts go in blocks of about
    ``_TEXT_BLOCK_CHARS``, a run a kind each: a text's first prompt is answered before its
    next kind is asked, so the server computes the text once and reads it from its prefix
    cache for the others (asked at once, they would be computed side by side, each in full;
    asked a whole batch apart, the cache would have let the text go)."""
    kinds = list(dict.fromkeys(step.allowed for step in plan.steps))
    runs: list[Group] = []
    start = 0
    while start < len(bodies):
        stop, chars = start, 0
        while stop < len(bodies) and (len(kinds) == 1 or chars < _TEXT_BLOCK_CHARS):
            chars += len(bodies[stop])
            stop += 1
        of_kind: dict[tuple[int, ...], Group] = {kind: [] for kind in kinds}
        for body in bodies[start:stop]:
            for k, step in enumerate(plan.steps):
                of_kind[step.allowed].append((body, k))
        runs += of_kind.values()
        start = stop
    return runs


def _prompt(plan: ClassifierPlan, prompt_of: Mapping[str, list[int]], body: str, step: int) -> Prompt:
    """The prompt that asks ``step`` of ``body``: token ids where they are known, else text."""
    if body in prompt_of:
        return plan.prompt_ids(prompt_of[body], step)
    if plan.scoring == "head":
        return body
    tail = plan.steps[step]
    return plan.head + body + tail.tail + tail.path_text


def _encoded(plan: ClassifierPlan, group: Group, prompt_of: Mapping[str, list[int]]) -> list[Prompt]:
    """A group's prompts as token ids, its bodies not yet tokenised tokenised now."""
    fresh = [b for b in dict.fromkeys(b for b, _ in group) if b not in prompt_of]
    ids = dict(zip(fresh, plan.encode_bodies(fresh), strict=True))
    return [plan.prompt_ids(ids[b] if b in ids else prompt_of[b], k) for b, k in group]


def _constrained_choice(plan: ClassifierPlan) -> ClassifierPlan:
    """``plan`` falling back to the server's constrained choice of a whole label (no scores)."""
    return dataclasses.replace(
        plan,
        scoring="constrained_choice",
        steps=(Step(plan.label_set.answer_suffix),),
        max_tokens=constrained_choice_max_tokens(plan.label_set),
        has_logprob_token_ids=False,
    )


def _with_path(result: Classification) -> Classification:
    """A top-level result of a hierarchy, with its one-level path."""
    return result.model_copy(
        update={"path": [result.label] if result.label else [], "path_scores": [result.scores or {}]}
    )


def _below(parent: Classification, child: Classification) -> Classification:
    """A child level's result under its parent's: the leaf label with the path and each
    level's probabilities."""
    return child.model_copy(
        update={
            "path": [*(parent.path or []), *([child.label] if child.label else [])],
            "path_scores": [*(parent.path_scores or []), child.scores or {}],
        }
    )


def _length_error(plan: ClassifierPlan, reply: Any) -> QwenFastError | None:
    try:
        return plan.length_error(len(vllm_api.parse_tokenize(reply)))
    except QwenFastError as exc:
        return exc


def _raise_any(results: list[Any]) -> list[Any]:
    for result in results:
        if isinstance(result, Exception):
            raise result
    return results


__all__ = ["Node", "Procedure", "PromptLists", "Rules"]
