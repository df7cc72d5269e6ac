"""QwenClassifier's request procedure, sync and async, against a canned vLLM (no network)."""

from __future__ import annotations

import asyncio
import copy
import dataclasses
import itertools
import math
import pickle
import time
from typing import Any

import httpx
import pydantic
import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.prompts import ChatPromptTemplate

from langchain_qwen_fast import (
    Classification,
    ContextLengthError,
    InvalidInputError,
    QwenClassifier,
    QwenFastError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
)
from langchain_qwen_fast._core import replies
from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX
from langchain_qwen_fast._core.settings import EngineSettings
from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.support.fake_vllm import FakeVLLM, logit, raw, reset, softmax, status, timeout, toy_tokenize

LABELS = list(AG_NEWS_LABELS)
URL = "http://vllm.test/v1"


def make(fake: FakeVLLM, **kwargs: Any) -> QwenClassifier:
    settings: dict[str, Any] = {"labels": LABELS, "base_url": URL, "model": "qwen3", "http_transport": fake.transport}
    return QwenClassifier(**{**settings, **kwargs})


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


def expected(classifier: QwenClassifier, text: str) -> list[float]:
    """The fake server's label probabilities for ``text``, computed on our side."""
    plan = classifier.prepare()
    return softmax([logit(plan.render(text), t) for t in plan.answer_token_ids])


def sequence_expected(classifier: QwenClassifier, text: str, labels: list[str]) -> list[float]:
    """Label-sequence probabilities: each label's tokens' probabilities multiplied, normalised."""
    plan = classifier.prepare()
    steps = {s.path: k for k, s in enumerate(plan.steps)}
    end = toy_tokenize("<|im_end|>")[0]

    def p(node: tuple[int, ...], token: int) -> float:
        step = plan.steps[steps[node]]
        probs = softmax([logit(plan.render(text, steps[node]), t) for t in step.allowed])
        return probs[step.allowed.index(token)]

    totals = []
    for path in (tuple(toy_tokenize(label)) for label in labels):
        total = math.prod(p(path[:i], path[i]) for i in range(len(path)))
        if path in steps:  # other labels continue this one: it must end here
            total *= p(path, end)
        totals.append(total)
    return [t / sum(totals) for t in totals]


# -- set-up ----------------------------------------------------------------------------------
def test_setup_learns_label_tokens_and_budget_from_the_server(fake: FakeVLLM) -> None:
    classifier = make(fake)
    plan = classifier.prepare()
    assert plan.scoring == "label_tokens"
    assert plan.answer_token_ids == tuple(toy_tokenize(label)[0] for label in LABELS)
    assert plan.overhead_tokens == len(toy_tokenize(plan.head + PROMPT_SUFFIX))
    assert plan.max_model_len == 512 and plan.has_logprob_token_ids
    sent = len(fake.requests)
    assert classifier.prepare() == plan and len(fake.requests) == sent  # learnt once, then kept


async def test_async_setup_matches_sync(fake: FakeVLLM) -> None:
    assert await make(fake).aprepare() == make(FakeVLLM()).prepare()


def test_model_not_served_is_a_configuration_error_naming_the_served_ones(fake: FakeVLLM) -> None:
    classifier = make(fake, model="qwen3-typo")
    with pytest.raises(ConfigurationError, match=r"'qwen3-typo' is not served .* serves \['qwen3'\]"):
        classifier.invoke("text")


def test_labels_sharing_first_tokens_are_scored_as_token_sequences(fake: FakeVLLM) -> None:
    labels = ["Sci/Tech", "Sci-Fi", "Sci", "Sports"]
    classifier = make(fake, labels=labels)
    plan = classifier.prepare()
    assert plan.scoring == "label_sequences"
    assert {s.path_text for s in plan.steps} == {"", "Sci", "Sci/", "Sci-"}  # the trie's inner nodes
    text = "A film about robots"
    result = classifier.invoke(text)
    want = sequence_expected(classifier, text, labels)
    assert result.scoring == "label_sequences" and result.scores is not None
    assert [result.scores[x] for x in labels] == pytest.approx(want)
    assert result.label == labels[want.index(max(want))]


def test_many_labels_have_no_cap(fake: FakeVLLM) -> None:
    labels = [f"Topic {i}" for i in range(40)]  # all start with "Topic": 40 > 26 letters
    result = make(fake, labels=labels).invoke("a text")
    assert result.scoring == "label_sequences" and result.scores is not None and len(result.scores) == 40
    assert math.isclose(sum(result.scores.values()), 1.0)


def test_server_without_logprob_token_ids_falls_back_to_top_k(fake: FakeVLLM) -> None:
    fake.logprob_token_ids = False
    classifier = make(fake)
    assert not classifier.prepare().has_logprob_token_ids
    text = "Markets wobble"
    result = classifier.invoke(text)
    # Such a server samples among the answer tokens and returns the chosen one's logprob: the
    # label is its greedy pick, and the only label with a score (the body: test_vllm_api).
    want = expected(classifier, text)
    assert result.label == LABELS[want.index(max(want))]
    assert result.scores is not None and result.scores[result.label] == 1.0


def test_setup_failure_fails_every_item_and_is_retried_after_its_cool_down(
    fake: FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_qwen_fast._core import engine

    monkeypatch.setattr(engine, "SETUP_RETRY_COOLDOWN", 0.05)
    fake.fail("/v1/models", status(404, message="no models route"))
    classifier = make(fake, max_retries=0)
    results = classifier.batch(["a", "b"], return_exceptions=True)
    assert all(isinstance(r, ServerStatusError) and r.status_code == 404 for r in results)
    time.sleep(0.06)
    assert classifier.invoke("a").label in LABELS  # set-up is tried again, and works


# -- results ---------------------------------------------------------------------------------
def test_invoke_scores_are_the_servers_label_probabilities(fake: FakeVLLM) -> None:
    classifier = make(fake)
    text = "Stocks rally as the central bank cuts rates"
    result = classifier.invoke(text)
    want = expected(classifier, text)
    assert result.scores is not None and list(result.scores) == LABELS
    assert [result.scores[label] for label in LABELS] == pytest.approx(want, rel=1e-9)
    assert result.label == LABELS[want.index(max(want))]
    assert math.isclose(sum(result.scores.values()), 1.0) and result.confidence == max(want)


async def test_batch_and_abatch_keep_input_order(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=7, max_concurrency=3)
    texts = headlines(100)
    sync = classifier.batch(texts)
    asynchronous = await classifier.abatch(texts)
    for text, s, a in zip(texts, sync, asynchronous):
        want = expected(classifier, text)
        assert s == a
        assert s.scores is not None and [s.scores[label] for label in LABELS] == pytest.approx(want)


def test_batch_groups_prompts_per_request(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=50)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    classifier.batch(headlines(200))
    grouped = fake.calls("/v1/completions")[before:]
    assert sorted(len(r.body["prompt"]) for r in grouped) == [50, 50, 50, 50]


#: Marks the texts after the first slice of a batch, in the requests that carry them.
LATER = "zqx-later-slice"


@pytest.mark.parametrize("labels", [LABELS, ["Sci/Tech", "Sci-Fi", "Sci", "Sports"]], ids=["one step", "steps"])
def test_batch_as_completed_yields_the_first_slice_while_later_ones_wait(labels: list[str]) -> None:
    """The server holds every request of the later slices until the caller has the first
    slice's results: ``batch_as_completed`` gives them (right) while the rest are still out,
    as it would not if it waited for the whole batch (under several steps a text waits for all
    of its own requests)."""
    import threading

    texts = [*headlines(16), *(f"{h} {LATER}" for h in headlines(48))]
    want = make(FakeVLLM(), labels=labels).batch(texts)
    fake = FakeVLLM()
    first_landed = threading.Event()
    in_time: list[bool] = []

    def holding_later(request: httpx.Request) -> httpx.Response:
        if LATER.encode() in request.content:
            in_time.append(first_landed.wait(5))
        return fake(request)

    classifier = make(fake, labels=labels, batch_size=16, http_transport=httpx.MockTransport(holding_later))
    got: dict[int, Any] = {}
    for index, result in classifier.batch_as_completed(texts):
        got[index] = result
        first_landed.set()
    assert [got[i] for i in range(len(texts))] == want
    assert in_time and all(in_time)


@pytest.mark.parametrize("labels", [LABELS, ["Sci/Tech", "Sci-Fi", "Sci", "Sports"]], ids=["one step", "steps"])
async def test_abatch_as_completed_yields_the_first_slice_while_later_ones_wait(labels: list[str]) -> None:
    """:func:`test_batch_as_completed_yields_the_first_slice_while_later_ones_wait`, async."""
    texts = [*headlines(16), *(f"{h} {LATER}" for h in headlines(48))]
    want = make(FakeVLLM(), labels=labels).batch(texts)
    fake = FakeVLLM()
    first_landed = asyncio.Event()
    in_time: list[bool] = []

    async def holding_later(request: httpx.Request) -> httpx.Response:
        if LATER.encode() in request.content:
            try:
                await asyncio.wait_for(first_landed.wait(), 5)
                in_time.append(True)
            except TimeoutError:
                in_time.append(False)
        return await fake.transport.handle_async_request(request)

    classifier = make(fake, labels=labels, batch_size=16, http_transport=httpx.MockTransport(holding_later))
    got: dict[int, Any] = {}
    async for index, result in classifier.abatch_as_completed(texts):
        got[index] = result
        first_landed.set()
    assert [got[i] for i in range(len(texts))] == want
    assert in_time and all(in_time)


def test_results_made_in_blocks_on_the_sync_path_s_threads_are_every_text_s(
    fake: FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``batch`` reads replies on several threads at once: blocks of results made there lose,
    repeat and swap nothing."""
    texts = headlines(200) + headlines(40)  # duplicates share a body and its result
    want = make(FakeVLLM(), batch_size=7, max_concurrency=4).batch(texts)
    monkeypatch.setattr(replies, "RESULTS_PER_BLOCK", 5)
    assert make(fake, batch_size=7, max_concurrency=4).batch(texts) == want


def opened(classifier: QwenClassifier) -> QwenClassifier:
    """``classifier`` once its servers' windows have opened fully: a fake server answers at
    once, so a few large batches grow each window to its ceiling."""
    for _ in range(3):
        classifier.batch(headlines(2048 * classifier.engine.replica_count))
    return classifier


@pytest.mark.parametrize(
    ("replicas", "items", "sizes"),
    [
        (1, 4096, [128] * 32),  # a big batch: requests of 128
        (1, 200, [25] * 8),  # a small one: a share for each of the 8 in flight
        (1, 40, [16, 16, 8]),  # never under 16 a request
        (3, 960, [40] * 24),  # 8 in flight per replica
    ],
)
def test_default_load_follows_the_batch_and_the_replicas_once_their_windows_are_open(
    fake: FakeVLLM, replicas: int, items: int, sizes: list[int]
) -> None:
    urls = [f"http://r{k}.test/v1" for k in range(replicas)]
    classifier = opened(make(fake, base_url=urls if replicas > 1 else URL))
    before = len(fake.calls("/v1/completions"))
    classifier.batch(headlines(items))
    grouped = fake.calls("/v1/completions")[before:]
    assert sorted((len(r.body["prompt"]) for r in grouped), reverse=True) == sizes
    if replicas > 1:  # no replica left out (how evenly depends on which answers first)
        hosts = [httpx.URL(r.url).host for r in grouped]
        assert min(hosts.count(f"r{k}.test") for k in range(replicas)) >= 1


@pytest.mark.parametrize(
    ("replicas", "settings", "config", "peak"),
    [(1, {}, None, 8), (3, {}, None, 24), (3, {}, {"max_concurrency": 5}, 5), (1, {"max_concurrency": 3}, None, 3)],
)
async def test_default_in_flight_is_eight_per_replica(
    fake: FakeVLLM, replicas: int, settings: dict[str, Any], config: Any, peak: int
) -> None:
    seen = {"now": 0, "peak": 0, "armed": 0}
    urls = [f"http://r{k}.test/v1" for k in range(replicas)]
    classifier = make(fake, base_url=urls, http_transport=holding(fake, peak, seen), **settings)
    await classifier.aprepare()
    for _ in range(3):  # the windows open: the fake answers at once until armed
        await classifier.abatch(headlines(1024 * replicas))
    seen["armed"] = 1
    await classifier.abatch(headlines(2000), config=config)
    assert seen["peak"] == peak


def holding(fake: FakeVLLM, peak: int, seen: dict[str, int]) -> httpx.MockTransport:
    """An async transport to ``fake`` that, once ``seen["armed"]`` (the set-up's requests go
    one at a time), counts the requests in flight (``seen["now"]``, most at once in
    ``seen["peak"]``), holding each until ``peak`` were in flight at once (or for 2 s)."""

    async def counting(request: httpx.Request) -> httpx.Response:
        if not seen["armed"]:
            return await fake.transport.handle_async_request(request)
        seen["now"] += 1
        seen["peak"] = max(seen["peak"], seen["now"])
        for _ in range(200):
            if seen["peak"] >= peak:
                break
            await asyncio.sleep(0.01)
        await asyncio.sleep(0.01)
        seen["now"] -= 1
        return await fake.transport.handle_async_request(request)

    return httpx.MockTransport(counting)


def test_texts_follow_a_shared_head_and_every_label_is_scored_whatever_is_sampled(fake: FakeVLLM) -> None:
    classifier = make(fake)
    texts = ["a headline", "another headline"]
    results = classifier.batch(texts)
    # The fake server samples a token that answers no label: the scores come from every answer
    # token's logprob alone, for the prompt the plan renders (the body: test_vllm_api).
    for text, result in zip(texts, results, strict=True):
        assert result.scores is not None
        assert [result.scores[label] for label in LABELS] == pytest.approx(expected(classifier, text))
    plan = classifier.prepare()
    first, second = (plan.render(text) for text in texts)
    assert first.endswith("a headline<|im_end|>\n<|im_start|>assistant\n<think>\n\n</think>\n\n")
    assert first.split("a headline")[0] == second.split("another headline")[0]  # a shared prefix
    assert first.startswith(plan.head)


def test_abstain_below(fake: FakeVLLM) -> None:
    classifier = make(fake, abstain_below=0.99)
    result = classifier.invoke("anything at all")
    assert result.abstained and result.label is None and result.scores is not None
    assert make(FakeVLLM(), abstain_below=0.01).invoke("anything at all").label in LABELS


def test_input_shapes(fake: FakeVLLM) -> None:
    classifier = make(fake)
    text = "Oil prices climb after the summit"
    by_str = classifier.invoke(text)
    assert classifier.invoke({"text": text, "other": 1}) == by_str
    prompt = ChatPromptTemplate.from_messages([("human", "{text}")])
    assert (prompt | classifier).invoke({"text": text}) == by_str


def test_constrained_choice_when_the_server_cannot_score_sequences(fake: FakeVLLM) -> None:
    fake.logprob_token_ids = False
    labels = [f"Topic {i}" for i in range(30)]
    classifier = make(fake, labels=labels)
    result = classifier.invoke("a text")
    assert result.scoring == "constrained_choice" and result.scores is None
    # the label the server spelt when held to the labels (the body: test_vllm_api)
    picks = [logit(classifier.prepare().render("a text"), k) for k in range(len(labels))]
    assert result.label == labels[picks.index(max(picks))]


# -- bad input and faults stay with their item ---------------------------------------------
def test_bad_items_fail_alone_and_keep_order(fake: FakeVLLM) -> None:
    classifier = make(fake)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    inputs: list[Any] = ["good one", "", None, {"title": "x"}, b"bytes", "\ud800", "good two", "   "]
    results = classifier.batch(inputs, return_exceptions=True)
    kinds = [type(r).__name__ for r in results]
    assert kinds == ["Classification", *["InvalidInputError"] * 5, "Classification", "InvalidInputError"]
    assert "dict input needs a 'text' key" in str(results[3]) and "decode bytes first" in str(results[4])
    assert results[0] == classifier.invoke("good one") and results[6] == classifier.invoke("good two")
    asked = sum(len(r.body["prompt"]) for r in fake.calls("/v1/completions")[before:])
    assert asked == 2 + 2  # the batch's two good texts, then the two invokes: bad items never reach the server


def test_without_return_exceptions_the_first_error_raises(fake: FakeVLLM) -> None:
    with pytest.raises(InvalidInputError):
        make(fake).batch(["fine", ""])


def test_a_bad_prompt_in_a_group_fails_only_its_item(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=8)
    texts = headlines(8)
    texts[5] = "POISON pill"
    results = classifier.batch(texts, return_exceptions=True)
    assert isinstance(results[5], ServerStatusError) and results[5].status_code == 400
    assert all(isinstance(r, Classification) for i, r in enumerate(results) if i != 5)


def test_too_long_text_is_rejected_before_sending(fake: FakeVLLM) -> None:
    classifier = make(fake)
    long_text = "word " * 600
    results = classifier.batch(["short", long_text], return_exceptions=True)
    assert isinstance(results[0], Classification)
    assert isinstance(results[1], ContextLengthError) and results[1].limit < results[1].tokens
    counted = [r.body["prompt"] for r in fake.calls("/tokenize")]
    assert counted[-1] == "<|im_start|>user\n" + long_text  # only the unsure text is counted
    assert not any("short" in c for c in counted)


@pytest.mark.parametrize("fault", [status(503), status(429, {"retry-after": "0"}), reset(), timeout()])
def test_transient_faults_are_retried(fake: FakeVLLM, fault: Any) -> None:
    classifier = make(fake)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    fake.fail("/v1/completions", fault)
    assert classifier.invoke("retry me") == make(FakeVLLM()).invoke("retry me")
    assert len(fake.calls("/v1/completions")) - before == 2  # the fault, then one retry


@pytest.mark.parametrize(
    ("fault", "error"),
    [(status(503), ServerStatusError), (reset(), ServerConnectionError), (timeout(), ServerTimeoutError)],
)
def test_retries_run_out_into_a_typed_error_per_item(fake: FakeVLLM, fault: Any, error: type) -> None:
    classifier = make(fake, max_retries=1)
    classifier.prepare()
    fake.fail("/v1/completions", fault, fault)
    results = classifier.batch(["one", "two"], return_exceptions=True)
    assert all(isinstance(r, error) for r in results)


def test_client_errors_are_not_retried(fake: FakeVLLM) -> None:
    classifier = make(fake)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    fake.fail("/v1/completions", status(404, message="gone"))
    with pytest.raises(ServerStatusError, match=r"HTTP 404 .*gone"):
        classifier.invoke("once")
    assert len(fake.calls("/v1/completions")) == before + 1


def test_malformed_reply_is_a_format_error(fake: FakeVLLM) -> None:
    classifier = make(fake)
    classifier.prepare()
    fake.fail("/v1/completions", raw(b'{"choices": [tru'))
    with pytest.raises(ResponseFormatError, match="malformed JSON"):
        classifier.invoke("x")


def test_missing_and_off_label_choices_fail_only_their_items(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=3)
    plan = classifier.prepare()

    def tamper(request: httpx.Request) -> httpx.Response:
        reply = FakeVLLM()(request).json()  # the same server's answer, then tampered with
        reply["choices"] = [c for c in reply["choices"] if c["index"] != 1]  # lose item 1
        top = reply["choices"][1]["logprobs"]["top_logprobs"][0]
        del top[f"token_id:{plan.answer_token_ids[0]}"]  # item 2 lacks an answer token's logprob
        return httpx.Response(200, json=reply)

    fake.fail("/v1/completions", tamper)
    results = classifier.batch(["a", "b", "c"], return_exceptions=True)
    assert isinstance(results[0], Classification)
    assert isinstance(results[1], ResponseFormatError) and "no choice for prompt 1" in str(results[1])
    assert isinstance(results[2], ResponseFormatError) and "no logprob for answer tokens" in str(results[2])


# -- head mode -------------------------------------------------------------------------------
def test_head_mode_reads_classify_probabilities(fake: FakeVLLM) -> None:
    fake.head_classes = 4
    classifier = make(fake, mode="head")
    result = classifier.invoke("Stocks rally")
    want = softmax([logit("Stocks rally", k) for k in range(4)])
    assert result.scoring == "head" and result.scores is not None
    assert [result.scores[label] for label in LABELS] == pytest.approx(want)  # the head read the bare text


def test_head_with_the_wrong_number_of_classes_is_refused(fake: FakeVLLM) -> None:
    fake.head_classes = 3
    with pytest.raises(QwenFastError, match="3-class head but 4 labels"):
        make(fake, mode="head").invoke("x")


# -- replicas, keys, callbacks ----------------------------------------------------------------
def test_replicas_take_turns_and_a_down_one_costs_a_retry(fake: FakeVLLM) -> None:
    urls = ["http://a.test/v1", "http://b.test/v1"]
    # One request at a time, so that every pick is a tie on outstanding requests and the turn
    # alone decides; with requests in flight the pick follows which server answers first.
    classifier = make(fake, base_url=urls, batch_size=10, max_concurrency=1)
    classifier.batch(headlines(100))
    hosts = [httpx.URL(r.url).host for r in fake.calls("/v1/completions")]
    assert all(a != b for a, b in itertools.pairwise(hosts)), hosts
    assert abs(hosts.count("a.test") - hosts.count("b.test")) <= 1
    fake.requests.clear()
    make(fake, base_url=urls, batch_size=10).batch(headlines(100))
    assert {httpx.URL(r.url).host for r in fake.calls("/v1/completions")} == {"a.test", "b.test"}
    fake.down_hosts.add("a.test")
    results = classifier.batch(headlines(100), return_exceptions=True)
    assert all(isinstance(r, Classification) for r in results)


def keyed(fake: FakeVLLM, key: str) -> httpx.MockTransport:
    """``fake`` behind ``--api-key key``: vLLM answers 401 to a request without the header."""

    def check(request: httpx.Request) -> httpx.Response:
        if request.headers.get("authorization") != f"Bearer {key}":
            return httpx.Response(401, json={"error": "Unauthorized"})
        return fake(request)

    return httpx.MockTransport(check)


def test_api_key_travels_in_the_header_only(fake: FakeVLLM) -> None:
    with pytest.raises(ServerStatusError, match="HTTP 401"):
        make(fake, http_transport=keyed(fake, "sk-secret-123"), max_retries=0).invoke("x")
    classifier = make(fake, api_key="sk-secret-123", max_retries=0, http_transport=keyed(fake, "sk-secret-123"))
    assert classifier.invoke("x") == make(FakeVLLM()).invoke("x")
    assert "sk-secret-123" not in repr(classifier) and "sk-secret-123" not in str(classifier.to_json())
    fake.fail("/v1/completions", status(401, message="bad key"))
    with pytest.raises(ServerStatusError) as info:
        classifier.invoke("y")
    assert "sk-secret-123" not in str(info.value)


def test_one_run_per_item_in_callbacks(fake: FakeVLLM) -> None:
    class Recorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts = 0
            self.ends = 0
            self.errors = 0

        def on_chain_start(self, *args: Any, **kwargs: Any) -> None:
            self.starts += 1

        def on_chain_end(self, *args: Any, **kwargs: Any) -> None:
            self.ends += 1

        def on_chain_error(self, *args: Any, **kwargs: Any) -> None:
            self.errors += 1

    recorder = Recorder()
    make(fake).batch(["one", "", "three"], config={"callbacks": [recorder]}, return_exceptions=True)
    assert (recorder.starts, recorder.ends, recorder.errors) == (3, 2, 1)


@pytest.mark.parametrize("batch_kind", ["batch", "abatch"])
def test_per_item_runs_are_kept_for_global_handlers_and_skipped_without_any(
    fake: FakeVLLM, batch_kind: str, capsys: pytest.CaptureFixture[str]
) -> None:
    from langchain_core.globals import set_debug

    classifier = make(fake)

    def run() -> list[Any]:
        if batch_kind == "batch":
            return classifier.batch(["one", "", "three"], return_exceptions=True)
        return asyncio.run(classifier.abatch(["one", "", "three"], return_exceptions=True))

    quiet = run()
    assert "[chain/start]" not in capsys.readouterr().out
    set_debug(True)  # a handler set up globally, as tracing would be: every item's run is seen
    try:
        observed = run()
    finally:
        set_debug(False)
    out = capsys.readouterr().out
    assert out.count("[chain/start]") == 3 and out.count("[chain/end]") == 2 and out.count("[chain/error]") == 1
    assert observed[0] == quiet[0] and observed[2] == quiet[2] and isinstance(observed[1], InvalidInputError)


def test_from_chat_model_takes_the_chat_models_settings() -> None:
    from langchain_qwen_fast import ChatQwenFast

    chat = ChatQwenFast(base_url="http://chat.test/v1", model="m", api_key="k", max_retries=1, timeout=7)
    classifier = QwenClassifier.from_chat_model(chat, labels=LABELS, batch_size=9)
    assert (classifier.base_url, classifier.model, classifier.max_retries, classifier.timeout) == (
        "http://chat.test/v1",
        "m",
        1,
        7.0,
    )
    assert classifier.api_key is not None and classifier.api_key.get_secret_value() == "k"
    assert classifier.batch_size == 9


def test_temperature_scales_scores_keeps_the_label_and_changes_abstention(fake: FakeVLLM) -> None:
    from langchain_qwen_fast.calibration import apply_temperature

    texts = headlines(12)
    raw = make(fake).batch(texts)
    soft = make(fake, temperature=3.0).batch(texts)
    for r, s in zip(raw, soft):
        assert s.label == r.label
        assert list(s.scores.values()) == pytest.approx(apply_temperature(list(r.scores.values()), 3.0))
    # A threshold the raw scores pass can fail once softened: calibration moves abstention.
    cut = min(r.confidence for r in raw) - 1e-9
    assert not any(r.abstained for r in make(fake, abstain_below=cut).batch(texts))
    assert any(r.abstained for r in make(fake, abstain_below=cut, temperature=3.0).batch(texts))


def test_a_file_saved_by_the_release_before_the_deadline_loads_without_its_retry_deadline(
    fake: FakeVLLM, tmp_path: Any
) -> None:
    import json

    path = make(fake, deadline=12.0).save(tmp_path / "c.json")
    saved = json.loads(path.read_text())
    assert saved["version"] == 2 and saved["config"]["deadline"] == 12.0
    del saved["config"]["deadline"]
    old = tmp_path / "old.json"
    old.write_text(json.dumps({**saved, "version": 1, "config": {**saved["config"], "retry_deadline": 60.0}}))
    loaded = QwenClassifier.load(old, http_transport=fake.transport)
    assert loaded.deadline is None and loaded.batch(["a headline"])[0].label in LABELS
    old.write_text(json.dumps({**saved, "version": 3}))
    with pytest.raises(DataFileError, match="version 3; this release reads 2 and earlier"):
        QwenClassifier.load(old)


def test_temperature_is_saved_and_must_be_positive(fake: FakeVLLM, tmp_path: Any) -> None:
    path = make(fake, temperature=0.7).save(tmp_path / "c.json")
    assert QwenClassifier.load(path, http_transport=fake.transport).temperature == 0.7
    with pytest.raises(ConfigurationError, match="temperature"):
        make(fake, temperature=0)


# -- servers that take one prompt a request (vLLM's Rust frontend) -----------------------------
def single_prompts(fake: FakeVLLM, path: str = "/v1/completions") -> list[Any]:
    """Every prompt sent alone to ``path``, after checking that the only list of prompts sent
    there was the set-up's probe (the one request that finds out that lists are refused)."""
    field = "input" if path == "/classify" else "prompt"
    sent, lists = [], []
    for r in fake.calls(path):
        value = r.body[field]
        if isinstance(value, str) or all(isinstance(t, int) for t in value):
            sent.append(value)
        else:
            lists.append(value)
    assert len(lists) == 1 and len(lists[0]) == 1, f"lists of prompts sent to a server that takes none: {lists}"
    return sent


def test_setup_learns_that_the_server_takes_one_prompt_a_request() -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    classifier = make(fake)
    plan = classifier.prepare()
    assert not plan.takes_prompt_lists and plan.has_logprob_token_ids
    listed = make(FakeVLLM())
    assert listed.prepare().takes_prompt_lists
    texts = headlines(5)
    assert classifier.batch(texts) == listed.batch(texts)  # the refused list cost no result


@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"labels": ["Sci/Tech", "Sci-Fi", "Sci", "Sports"]},
        {"multi_label": True},
        {"examples": [("Rates rise", "Business"), ("Cup final", "Sports")]},
        {"labels": {"Sports": ["Football", "Tennis"], "Business": ["Markets", "Deals"]}},
        {"tokenizer_path": "toy"},
        {"tokenizer_path": "toy", "multi_label": True},
    ],
    ids=["label-tokens", "label-sequences", "multi-label", "examples", "hierarchy", "token-ids", "token-ids-multi"],
)
async def test_one_prompt_a_request_gives_the_list_paths_results(
    settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_qwen_fast._core import engine
    from tests.support.fake_vllm import ToyTokenizer

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: ToyTokenizer())
    texts = [*headlines(40), "Cup final tonight"]
    listed, single = FakeVLLM(), FakeVLLM(takes_prompt_lists=False)
    want = make(listed, **settings).batch(texts)
    one = make(single, **settings)
    assert one.batch(texts) == want
    assert await one.abatch(texts) == want
    assert one.invoke(texts[0]) == want[0] and await one.ainvoke(texts[1]) == want[1]
    # every prompt went alone, one request each (the list server got them in groups)
    sent = single_prompts(single)
    assert len(sent) == len(single.calls("/v1/completions")) - 1  # all but the refused probe
    assert len(listed.calls("/v1/completions")) < len(sent) // 4


@pytest.mark.parametrize("sigmoid", [False, True], ids=["softmax", "multi-label"])
async def test_head_mode_sends_one_input_a_request_where_lists_are_refused(sigmoid: bool) -> None:
    texts = headlines(30)
    settings: dict[str, Any] = {"mode": "head", "multi_label": sigmoid}
    listed = FakeVLLM(head_classes=4, head_sigmoid=sigmoid)
    single = FakeVLLM(head_classes=4, head_sigmoid=sigmoid, takes_prompt_lists=False)
    want = make(listed, **settings).batch(texts)
    one = make(single, **settings)
    assert not one.prepare().takes_prompt_lists
    assert one.batch(texts) == want
    assert len(single_prompts(single, "/classify")) == len(texts) + 1  # the probe, then one a text
    assert await one.abatch(texts) == want


def test_constrained_choice_learns_the_request_shape_too() -> None:
    # 30 labels sharing a first token on a server without logprob_token_ids: constrained choice
    labels = [f"Topic {i}" for i in range(30)]
    fake = FakeVLLM(logprob_token_ids=False, takes_prompt_lists=False)
    classifier = make(fake, labels=labels)
    plan = classifier.prepare()
    assert plan.scoring == "constrained_choice" and not plan.takes_prompt_lists
    want = make(FakeVLLM(logprob_token_ids=False), labels=labels).batch(headlines(10))
    assert classifier.batch(headlines(10)) == want


def test_one_prompt_a_request_keeps_per_item_errors_and_order() -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    classifier = make(fake)
    texts: list[Any] = headlines(12)
    texts[3], texts[7], texts[9] = "POISON pill", "", None
    results = classifier.batch(texts, return_exceptions=True)
    assert isinstance(results[3], ServerStatusError) and results[3].status_code == 400
    assert isinstance(results[7], InvalidInputError) and isinstance(results[9], InvalidInputError)
    want = make(FakeVLLM()).batch([t for i, t in enumerate(texts) if i not in (3, 7, 9)])
    assert [r for i, r in enumerate(results) if i not in (3, 7, 9)] == want
    # the poisoned prompt was asked once: alone, it has no group to be split out of
    assert sum("POISON" in p for p in single_prompts(fake)) == 1


def test_one_prompt_a_request_keeps_malformed_replies_to_their_item() -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    classifier = make(fake, max_retries=0)
    classifier.prepare()
    fake.fail("/v1/completions", raw(b'{"choices": [tru'))
    results = classifier.batch(headlines(6), return_exceptions=True, config={"max_concurrency": 1})
    assert isinstance(results[0], ResponseFormatError)
    assert all(isinstance(r, Classification) for r in results[1:])


@pytest.mark.parametrize("fault", [status(503), status(429, {"retry-after": "0"}), reset(), timeout()])
async def test_one_prompt_requests_are_retried(fault: Any) -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    classifier = make(fake)
    classifier.prepare()
    fake.fail("/v1/completions", fault)
    texts = headlines(8)
    assert classifier.batch(texts) == make(FakeVLLM()).batch(texts)
    fake.fail("/v1/completions", fault)
    assert await classifier.abatch(texts) == make(FakeVLLM()).batch(texts)


def test_one_prompt_retries_run_out_into_the_items_error_alone() -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    texts = headlines(5)
    tries: list[str] = []

    def failing_one(request: httpx.Request) -> httpx.Response:
        if request.url.path.endswith("/completions") and texts[0] in request.content.decode():
            tries.append(texts[0])
            return httpx.Response(503, json={"error": {"message": "down for this one"}})
        return fake(request)

    classifier = make(fake, max_retries=1, http_transport=httpx.MockTransport(failing_one))
    results = classifier.batch(texts, return_exceptions=True, config={"max_concurrency": 1})
    assert isinstance(results[0], ServerStatusError) and results[0].status_code == 503 and len(tries) == 2
    assert all(isinstance(r, Classification) for r in results[1:])


@pytest.mark.parametrize("kind", ["batch", "abatch"])
def test_one_prompt_requests_fail_over_to_a_live_replica(kind: str) -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    tried: list[str] = []

    def recording(request: httpx.Request) -> httpx.Response:
        tried.append(request.url.host)
        return fake(request)

    urls = ["http://a.test/v1", "http://b.test/v1"]
    classifier = make(fake, base_url=urls, http_transport=httpx.MockTransport(recording))
    assert not classifier.prepare().takes_prompt_lists
    fake.down_hosts.add("a.test")
    tried.clear()
    texts = headlines(40)
    run = classifier.batch if kind == "batch" else lambda t: asyncio.run(classifier.abatch(t))
    assert run(texts) == make(FakeVLLM()).batch(texts)
    # a.test was tried, refused the connection and rested; every text was answered by b.test
    assert "a.test" in tried and tried.count("b.test") == len(texts)


@pytest.mark.parametrize(
    ("replicas", "settings", "config", "peak"),
    [(1, {}, None, 256), (2, {}, None, 512), (2, {}, {"max_concurrency": 5}, 5), (1, {"max_concurrency": 3}, None, 3)],
)
async def test_one_prompt_in_flight_bound(replicas: int, settings: dict[str, Any], config: Any, peak: int) -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    seen = {"now": 0, "peak": 0, "armed": 0}
    urls = [f"http://r{k}.test/v1" for k in range(replicas)]
    classifier = make(fake, base_url=urls, http_transport=holding(fake, peak, seen), **settings)
    await classifier.aprepare()
    for _ in range(3):  # the windows open: the fake answers at once until armed
        await classifier.abatch(headlines(1024 * replicas))
    seen["armed"] = 1
    texts = headlines(peak + 24)  # more than the bound: a few texts wait for a slot
    assert await classifier.abatch(texts, config=config) == make(FakeVLLM()).batch(texts)
    assert seen["peak"] == peak


@pytest.mark.parametrize("kind", ["batch", "batch_as_completed"])
def test_one_prompt_in_flight_bound_holds_in_sync_calls(kind: str) -> None:
    import threading
    import time

    fake = FakeVLLM(takes_prompt_lists=False)
    lock = threading.Lock()
    seen = {"now": 0, "peak": 0}

    def counting(request: httpx.Request) -> httpx.Response:
        with lock:
            seen["now"] += 1
            seen["peak"] = max(seen["peak"], seen["now"])
        time.sleep(0.002)  # long enough for the other threads' requests to overlap this one
        with lock:
            seen["now"] -= 1
        return fake(request)

    classifier = make(fake, http_transport=httpx.MockTransport(counting), max_concurrency=6)
    classifier.prepare()
    texts = headlines(120)
    if kind == "batch":
        results = classifier.batch(texts)
    else:
        results = [r for _, r in sorted(classifier.batch_as_completed(texts))]
    assert results == make(FakeVLLM()).batch(texts)
    assert 1 < seen["peak"] <= 6


async def test_abatch_as_completed_shares_the_bound_between_its_groups() -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    seen = {"now": 0, "peak": 0}

    async def counting(request: httpx.Request) -> httpx.Response:
        seen["now"] += 1
        seen["peak"] = max(seen["peak"], seen["now"])
        await asyncio.sleep(0.01)
        seen["now"] -= 1
        return await fake.transport.handle_async_request(request)

    classifier = make(fake, http_transport=httpx.MockTransport(counting), max_concurrency=20)
    texts = headlines(300)
    results = [r async for r in classifier.abatch_as_completed(texts)]
    assert [r for _, r in sorted(results)] == make(FakeVLLM()).batch(texts)
    assert 1 < seen["peak"] <= 20


def test_head_mode_on_a_server_without_classify_says_so() -> None:
    fake = FakeVLLM(head_classes=4, takes_prompt_lists=False)
    fake.fail("/classify", status(404, message=""), status(404, message=""))  # vLLM's Rust frontend
    with pytest.raises(ServerStatusError, match=r"HTTP 404 .*serves no /classify.*Python API server"):
        make(fake, mode="head").prepare()


async def test_simultaneous_ainvoke_calls_widen_to_the_one_prompt_bound() -> None:
    fake = FakeVLLM(takes_prompt_lists=False)
    seen = {"now": 0, "peak": 0, "armed": 0}
    classifier = make(fake, http_transport=holding(fake, 256, seen))
    await classifier.ainvoke("set-up first")
    seen["armed"] = 1
    texts = headlines(400)
    results = await asyncio.gather(*(classifier.ainvoke(t) for t in texts))
    assert results == make(FakeVLLM()).batch(texts)
    assert seen["peak"] == 256


@pytest.mark.parametrize("code", [401, 403, 404, 400, 413, 422])
def test_only_answers_about_a_prompt_split_the_request(fake: FakeVLLM, code: int) -> None:
    """A 401/403/404 after set-up is the same for every prompt: one request, every item its
    error. A 400/413/422 may be one bad prompt's: the request is split to find it."""
    classifier = make(fake, batch_size=4, max_retries=0)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    fake.fail("/v1/completions", status(code, message="no"), status(code, message="no"), status(code, message="no"))
    results = classifier.batch(headlines(4), return_exceptions=True)
    sent = len(fake.calls("/v1/completions")) - before
    assert sent == 1 if code in (401, 403, 404) else sent > 1
    if code in (401, 403, 404):
        assert all(isinstance(r, ServerStatusError) and r.status_code == code for r in results)


async def test_a_failed_setup_is_shared_by_its_waiters_then_tried_again_after_a_cool_down(
    fake: FakeVLLM, monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_qwen_fast._core import engine

    monkeypatch.setattr(engine, "SETUP_RETRY_COOLDOWN", 0.2)
    classifier = make(fake, max_retries=0)
    fake.fail("/v1/models", *[status(503, message="starting")] * 50)
    results = await asyncio.gather(*(classifier.ainvoke(t) for t in headlines(20)), return_exceptions=True)
    assert all(isinstance(r, ServerStatusError) and r.status_code == 503 for r in results)
    assert len(fake.calls("/v1/models")) == 1  # one set-up failed; its 19 waiters heard of it
    assert all(isinstance(r, ServerStatusError) for r in classifier.batch(headlines(3), return_exceptions=True))
    assert len(fake.calls("/v1/models")) == 1  # still within the cool-down
    await asyncio.sleep(0.25)
    fake.faults["/v1/models"].clear()
    assert (await classifier.ainvoke("Stocks rally")).label in LABELS  # tried again, and it worked
    assert len(fake.calls("/v1/models")) == 2


# -- settings, copies and LangChain's own arguments -----------------------------------------
def test_every_engine_setting_of_the_classifiers_name_reaches_the_engine(fake: FakeVLLM) -> None:
    given = {"timeout": 7.0, "max_retries": 1, "batch_size": 9, "max_concurrency": 5}
    classifier = make(fake, mode="head", api_key="k", **given)
    settings = classifier.engine.settings
    shared = {f.name for f in dataclasses.fields(EngineSettings)} & set(QwenClassifier.model_fields) - {"api_key"}
    assert shared >= {*given, "model", "mode", "tokenizer_path", "client_processes", "cache", "http_transport"}
    assert all(getattr(settings, name) == getattr(classifier, name) for name in shared)
    assert settings.api_key == "k" and settings.base_urls == (URL,)


@pytest.mark.parametrize(
    ("settings", "field"),
    [({"timeout": 0}, "timeout"), ({"batch_size": 0}, "batch_size"), ({"mode": "other"}, "mode")],
)
def test_bad_settings_are_configuration_errors_naming_the_field(
    fake: FakeVLLM, settings: dict[str, Any], field: str
) -> None:
    with pytest.raises(ConfigurationError, match=rf"^{field}: ") as info:
        make(fake, **settings)
    assert isinstance(info.value.__cause__, pydantic.ValidationError)


def test_a_bad_api_key_is_refused_without_showing_it(fake: FakeVLLM) -> None:
    with pytest.raises(ConfigurationError, match="api_key") as info:
        make(fake, api_key=12345)
    assert "12345" not in str(info.value)


def test_a_copy_behaves_as_its_fields_say(fake: FakeVLLM) -> None:
    classifier = make(fake)
    assert not classifier.invoke("anything at all").abstained
    strict = classifier.model_copy(update={"abstain_below": 0.99})
    assert strict.abstain_below == 0.99 and strict.invoke("anything at all").abstained
    moved = classifier.model_copy(update={"http_transport": FakeVLLM().transport})
    fake.down_hosts.add("vllm.test")  # the first server goes away; the copy talks to the other
    assert moved.invoke("x") == make(FakeVLLM()).invoke("x")
    with pytest.raises(ServerConnectionError):
        classifier.invoke("y")
    with pytest.raises(ConfigurationError, match="abstain_belw"):
        classifier.model_copy(update={"abstain_belw": 0.5})


def test_deepcopy_and_pickle_give_working_classifiers(fake: FakeVLLM) -> None:
    classifier = make(fake, labels={"Sports": ["Football", "Tennis"], "Business": ["Markets", "Deals"]})
    deep = copy.deepcopy(classifier)
    assert deep.http_transport is classifier.http_transport  # the caller's objects are shared
    assert deep.invoke("Cup final") == classifier.invoke("Cup final")
    plain = QwenClassifier(labels=LABELS, base_url=URL, api_key="k", threshold=0.3)
    back = pickle.loads(pickle.dumps(plain))
    assert back.model_dump() == plain.model_dump() and back.api_key == plain.api_key
    assert back.engine is not plain.engine


def test_pickling_with_an_object_that_cannot_be_pickled_names_it(fake: FakeVLLM) -> None:
    with pytest.raises(ConfigurationError, match=r"its http_transport \(MockTransport\) cannot"):
        pickle.dumps(make(fake))


def test_as_tool_honours_name_and_description_and_refuses_the_rest(fake: FakeVLLM) -> None:
    tool = make(fake).as_tool(name="news_topic", description="The news topic of a text.")
    assert (tool.name, tool.description) == ("news_topic", "The news topic of a text.")
    assert tool.invoke({"text": "Stocks rally"})["label"] in LABELS
    for argument in ({"args_schema": dict}, {"arg_types": {"text": str}}, {"return_direct": True}):
        with pytest.raises(ConfigurationError, match=f"cannot honour {next(iter(argument))}"):
            make(fake).as_tool(**argument)


def test_as_router_can_send_outages_to_the_default_branch(fake: FakeVLLM) -> None:
    fake.down_hosts.add("vllm.test")
    routes = {label: (lambda x, label=label: label) for label in LABELS}
    raising = make(fake, max_retries=0).as_router(routes, default=lambda x: "default")
    with pytest.raises(ServerConnectionError, match=r"could not connect to http://vllm\.test/v1/models"):
        raising.invoke("Stocks rally")
    routed = make(fake, max_retries=0).as_router(routes, default=lambda x: "default", outages_to_default=True)
    assert routed.invoke("Stocks rally") == "default"
