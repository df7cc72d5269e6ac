"""Multi-label, few-shot examples, hierarchies, dedup, caches, the Runnable protocol, save and
load, and argument checking, against the canned vLLM (no network)."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from langchain_core.example_selectors import BaseExampleSelector
from langchain_core.runnables import RunnableLambda, RunnableParallel

from langchain_qwen_fast import Classification, InvalidInputError, QwenClassifier, QwenFastError
from langchain_qwen_fast._core.prompting import PROMPT_SUFFIX
from langchain_qwen_fast.caches import ClassificationCache, InMemoryCache, SQLiteCache
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, headlines
from tests.support.fake_vllm import FakeVLLM, logit, softmax, toy_tokenize

LABELS = list(AG_NEWS_LABELS)
URL = "http://vllm.test/v1"


def make(fake: FakeVLLM, **kwargs: Any) -> QwenClassifier:
    settings: dict[str, Any] = {"labels": LABELS, "base_url": URL, "model": "qwen3", "http_transport": fake.transport}
    return QwenClassifier(**{**settings, **kwargs})


def prompts_sent(fake: FakeVLLM, since: int = 0) -> list[Any]:
    return [p for r in fake.calls("/v1/completions")[since:] for p in r.body["prompt"]]


@pytest.fixture
def fake() -> FakeVLLM:
    return FakeVLLM()


# -- multi-label --------------------------------------------------------------------------------
def test_multi_label_scores_each_label_with_a_yes_no_step(fake: FakeVLLM) -> None:
    classifier = make(fake, multi_label=True, threshold={"Sports": 0.9})
    plan = classifier.prepare()
    yes, no = toy_tokenize("yes")[0], toy_tokenize("no")[0]
    assert plan.scoring == "yes_no" and all(s.allowed == (yes, no) for s in plan.steps)
    text = "Stocks rally after the final"
    result = classifier.invoke(text)
    want = {label: softmax([logit(plan.render(text, k), yes), logit(plan.render(text, k), no)])[0]
            for k, label in enumerate(LABELS)}  # fmt: skip
    assert result.multi_label and result.scoring == "yes_no" and result.scores == pytest.approx(want)
    thresholds = {"World": 0.5, "Sports": 0.9, "Business": 0.5, "Sci/Tech": 0.5}
    assert result.labels == [x for x in LABELS if want[x] >= thresholds[x]]
    assert result.label == (max(result.labels, key=want.__getitem__) if result.labels else None)


def test_a_texts_label_questions_share_its_prefix_and_request(fake: FakeVLLM) -> None:
    classifier = make(fake, multi_label=True, batch_size=64)
    plan = classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    results = classifier.batch(["first text", "second text"])
    (request,) = fake.calls("/v1/completions")[before:]  # 2 texts x 4 labels: one request
    assert len(request.body["prompt"]) == 8
    yes, no = toy_tokenize("yes")[0], toy_tokenize("no")[0]
    for text, result in zip(["first text", "second text"], results, strict=True):
        shared = plan.head + "<|im_start|>user\n" + text
        prompts = [plan.render(text, k) for k in range(len(LABELS))]
        assert [p[len(shared) :] for p in prompts] == [plan.label_set.question(x) for x in LABELS]  # question last
        want = [softmax([logit(p, yes), logit(p, no)])[0] for p in prompts]  # what the server answers them
        assert result.scores is not None and list(result.scores.values()) == pytest.approx(want)


def test_multi_label_head_keeps_sigmoid_probabilities(fake: FakeVLLM) -> None:
    fake.head_classes, fake.head_sigmoid = 4, True
    result = make(fake, mode="head", multi_label=True).invoke("x")
    want = [1 / (1 + __import__("math").exp(5 - logit("x", k))) for k in range(4)]
    assert result.scores is not None and list(result.scores.values()) == pytest.approx(want)
    assert result.labels == [x for x, p in zip(LABELS, want) if p >= 0.5]


def test_head_kind_must_match_multi_label(fake: FakeVLLM) -> None:
    fake.head_classes = 4  # softmax
    with pytest.raises(QwenFastError, match=r"single-label \(softmax\) head; use multi_label=False"):
        make(fake, mode="head", multi_label=True).invoke("x")
    sigmoid = FakeVLLM(head_classes=4, head_sigmoid=True)
    with pytest.raises(QwenFastError, match="multi_label=True"):
        make(sigmoid, mode="head").invoke("x")


def test_thresholds_are_checked() -> None:
    with pytest.raises(ValueError, match=r"within 0\.\.1"):
        QwenClassifier(labels=LABELS, multi_label=True, threshold=1.5)
    with pytest.raises(ValueError, match="unknown labels: \\['Weather'\\]"):
        QwenClassifier(labels=LABELS, multi_label=True, threshold={"Weather": 0.3})


# -- few-shot -----------------------------------------------------------------------------------
def test_static_examples_sit_in_the_shared_head(fake: FakeVLLM) -> None:
    examples = [("Late goal wins the cup", "Sports"), ("Shares slide", "Business")]
    classifier = make(fake, examples=examples)
    classifier.batch(["one", "two"])
    prompts = prompts_sent(fake, 1)
    head = classifier.prepare().head
    assert all(p.startswith(head) for p in prompts)
    assert head.count("<|im_start|>assistant\nSports<|im_end|>") == 1 and "Shares slide" in head


class FirstWordSelector(BaseExampleSelector):
    """Picks the examples that share the input's first word."""

    def __init__(self, examples: list[dict[str, str]]) -> None:
        self.examples = examples

    def add_example(self, example: dict[str, str]) -> None:
        self.examples.append(example)

    def select_examples(self, input_variables: dict[str, str]) -> list[dict[str, str]]:
        first = input_variables["text"].split()[0]
        return [e for e in self.examples if e["text"].split()[0] == first]


async def test_selected_examples_follow_the_head_in_sync_and_async(fake: FakeVLLM) -> None:
    selector = FirstWordSelector([{"text": "Stocks fall", "label": "Business"}, {"text": "Goal!", "label": "Sports"}])
    classifier = make(fake, example_selector=selector)
    plan = classifier.prepare()

    def answered(text: str, examples: str) -> list[float]:
        """The server's label probabilities for ``text`` asked after ``examples``."""
        return softmax([logit(plan.render(text, examples=examples), t) for t in plan.answer_token_ids])

    shown = plan.label_set.render_examples([("Stocks fall", ("Business",))])
    assert shown.startswith("<|im_start|>user\nStocks fall<|im_end|>\n<|im_start|>assistant\nBusiness")
    sync = classifier.invoke("Stocks rise")
    assert sync.scores is not None and list(sync.scores.values()) == pytest.approx(answered("Stocks rise", shown))
    assert sync != make(FakeVLLM()).invoke("Stocks rise")  # the selected example changed the answer
    assert await classifier.ainvoke("Stocks rise") == sync
    alone = classifier.invoke("Weather today")  # no example shares its first word
    assert alone == make(FakeVLLM()).invoke("Weather today")
    assert alone.scores is not None and list(alone.scores.values()) == pytest.approx(answered("Weather today", ""))


class FlakySelector(FirstWordSelector):
    """Fails for texts that start with "boom", and picks an unknown label for "weird"."""

    def select_examples(self, input_variables: dict[str, str]) -> list[dict[str, str]]:
        if input_variables["text"].startswith("boom"):
            raise RuntimeError("vector store down")
        if input_variables["text"].startswith("weird"):
            return [{"text": "x", "label": "Weather"}]
        return super().select_examples(input_variables)


async def test_a_failing_selection_fails_only_its_item(fake: FakeVLLM) -> None:
    classifier = make(fake, example_selector=FlakySelector([{"text": "Stocks fall", "label": "Business"}]))
    inputs = ["Stocks rise", "boom goes the market", "weird one", "Goal!"]
    for results in (
        classifier.batch(inputs, return_exceptions=True),
        await classifier.abatch(inputs, return_exceptions=True),
    ):
        assert isinstance(results[0], Classification) and isinstance(results[3], Classification)
        assert isinstance(results[1], QwenFastError) and "vector store down" in str(results[1])
        assert isinstance(results[2], QwenFastError) and "Weather" in str(results[2])


def test_an_example_with_an_unknown_label_is_refused() -> None:
    with pytest.raises(ValueError, match="lacks: \\['Weather'\\]"):
        QwenClassifier(labels=LABELS, examples=[("rain", "Weather")])


# -- hierarchy ----------------------------------------------------------------------------------
def test_hierarchical_labels_return_the_path_and_each_levels_scores(fake: FakeVLLM) -> None:
    tree = {"Sports": ["Football", "Tennis"], "Business": ["Markets", "Deals"], "World": []}
    classifier = make(fake, labels=tree)
    texts = headlines(30)
    results = classifier.batch(texts)
    top = make(FakeVLLM(), labels=["Sports", "Business", "World"]).batch(texts)
    for text, result, first in zip(texts, results, top):
        assert result.path is not None and result.path[0] == first.label
        assert result.path_scores is not None and result.path_scores[0] == first.scores
        if first.label == "World":
            assert result.path == ["World"] and result.label == "World"
            continue
        children = tree[first.label]  # type: ignore[index]
        second = make(FakeVLLM(), labels=children).invoke(text)
        assert result.label == second.label and result.path == [first.label, second.label]
        assert result.path_scores[1] == second.scores and result.scores == second.scores
    assert classifier.label_names == ["Sports", "Business", "World", "Football", "Tennis", "Markets", "Deals"]


def test_hierarchy_rules() -> None:
    with pytest.raises(ValueError, match="distinct across the hierarchy"):
        QwenClassifier(labels={"A": ["x", "y"], "B": ["x", "z"]})
    with pytest.raises(ValueError, match="single-label"):
        QwenClassifier(labels={"A": ["x", "y"], "B": ["w", "z"]}, multi_label=True)


# -- dedup and cache ----------------------------------------------------------------------------
def test_identical_texts_are_sent_once_and_answered_everywhere(fake: FakeVLLM) -> None:
    classifier = make(fake)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    texts = ["same", "other", "same", {"text": "same"}, "other", ""]
    results = classifier.batch(texts, return_exceptions=True)
    assert len(prompts_sent(fake, before)) == 2
    assert results[0] == results[2] == results[3] and results[1] == results[4]
    assert isinstance(results[5], InvalidInputError)


def test_cache_hits_never_touch_the_network(fake: FakeVLLM) -> None:
    cache = InMemoryCache()
    classifier = make(fake, cache=cache)
    first = classifier.batch(["a", "b", "c"])
    sent = len(fake.requests)
    assert classifier.batch(["c", "a", "b"]) == [first[2], first[0], first[1]]
    assert len(fake.requests) == sent and (cache.hits, cache.misses) == (3, 3)
    classifier.invoke("d")
    assert len(fake.requests) == sent + 1 and cache.misses == 4


@pytest.mark.parametrize(
    "change",
    [
        {"labels": ["World", "Sports", "Business", "Science"]},
        {"label_descriptions": {"World": "international news"}},
        {"instructions": "Pick the topic."},
        {"examples": [("Goal!", "Sports")]},
        {"model": "qwen3-b"},
        {"abstain_below": 0.3},
        {"temperature": 1.5},
        {"prompt_layout": "compact"},
    ],
)
def test_every_key_part_changes_the_cache_key(change: dict[str, Any]) -> None:
    cache = InMemoryCache()
    fake = FakeVLLM(models={"qwen3": 512, "qwen3-b": 512})
    make(fake, cache=cache).invoke("a text")
    make(fake, cache=cache, **change).invoke("a text")
    assert (cache.hits, cache.misses) == (0, 2)
    make(fake, cache=cache, **change).invoke("a text")
    assert cache.hits == 1


@pytest.mark.parametrize(
    "change",
    [
        {"base_url": ["http://other.test/v1", "http://third.test/v1"]},
        {"timeout": 5.0},
        {"max_retries": 0},
        {"deadline": 60.0},
        {"batch_size": 8},
        {"max_concurrency": 2},
        {"api_key": "sk-other"},
    ],
)
def test_how_the_servers_are_reached_leaves_the_cache_key_alone(change: dict[str, Any]) -> None:
    # replicas serving the same weights answer alike: another URL, key or timeout finds the entry
    cache = InMemoryCache()
    fake = FakeVLLM()
    first = make(fake, cache=cache).invoke("a text")
    assert make(fake, cache=cache, **change).invoke("a text") == first
    assert (cache.hits, cache.misses) == (1, 1)


def test_sqlite_cache_persists_across_classifiers(fake: FakeVLLM, tmp_path: Path) -> None:
    path = tmp_path / "labels.db"
    cache = SQLiteCache(path)
    first = make(fake, cache=cache).invoke("persist me")
    cache.flush()  # written by the cache's own thread; another process sees it once on disk
    again = make(fake, cache=SQLiteCache(path))
    again.prepare()
    before = len(fake.requests)
    assert again.invoke("persist me") == first
    assert len(fake.requests) == before  # answered from the file, without a request
    assert len(SQLiteCache(path)) == 1


def test_in_memory_cache_evicts_the_least_recently_used() -> None:
    cache = InMemoryCache(maxsize=2)
    cache.update({"a": {"x": 1}, "b": {"x": 2}})
    cache.lookup(["a"])
    cache.update({"c": {"x": 3}})
    assert set(cache.lookup(["a", "b", "c"])) == {"a", "c"} and len(cache) == 2


# -- the Runnable protocol ----------------------------------------------------------------------
def test_batch_as_completed_keeps_grouping_and_yields_every_item(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=10)
    classifier.prepare()
    before = len(fake.calls("/v1/completions"))
    texts = headlines(45)
    got = dict(classifier.batch_as_completed([*texts, ""], return_exceptions=True))
    assert sorted(got) == list(range(46)) and isinstance(got[45], InvalidInputError)
    assert [got[i] for i in range(45)] == classifier.batch(texts)
    assert len(fake.calls("/v1/completions")) - before == 5 + 5  # 5 groups each time


async def test_abatch_as_completed(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=10)
    texts = headlines(25)
    got = {i: r async for i, r in classifier.abatch_as_completed(texts)}
    assert [got[i] for i in range(25)] == await classifier.abatch(texts)
    with pytest.raises(InvalidInputError):
        async for _ in classifier.abatch_as_completed(["fine", ""]):
            pass


async def test_protocol_stream_map_retry_fallbacks_parallel_schemas(fake: FakeVLLM) -> None:
    classifier = make(fake, batch_size=50)
    one = classifier.invoke("x")
    assert list(classifier.stream("x")) == [one]
    assert [c async for c in classifier.astream("x")] == [one]
    before = len(fake.calls("/v1/completions"))
    assert classifier.map().invoke(["x", "y", "z"])[0] == one
    assert len(fake.calls("/v1/completions")) == before + 1  # map hands over the list: one request
    assert classifier.with_retry(stop_after_attempt=2).batch(["x", "y"])[0] == one
    broken = make(FakeVLLM(models={"other": 512}))
    assert broken.with_fallbacks([classifier]).invoke("x") == one
    both = RunnableParallel(label=classifier | RunnableLambda(lambda r: r.label), raw=classifier)
    assert both.invoke("x") == {"label": one.label, "raw": one}
    named = classifier.with_config(run_name="topic")
    events = [e async for e in named.astream_events("x", version="v2")]
    assert {e["name"] for e in events} == {"topic"} and events[-1]["data"]["output"] == one
    assert "Classification" in json.dumps(classifier.get_output_jsonschema())
    assert classifier.get_input_jsonschema()
    assert len(classifier.get_graph().nodes) == 3


# -- save, load and arguments ---------------------------------------------------------------------
def test_save_and_load_round_trip_without_the_key(fake: FakeVLLM, tmp_path: Path) -> None:
    classifier = make(
        fake,
        label_descriptions={"World": "international"},
        instructions="Pick one.",
        examples=[("Goal!", "Sports")],
        abstain_below=0.2,
        batch_size=16,
        api_key="sk-never-saved",
        base_url=[URL, "http://b.test/v1"],
    )
    path = classifier.save(tmp_path)
    assert "sk-never-saved" not in path.read_text()
    loaded = QwenClassifier.load(tmp_path, http_transport=fake.transport, api_key="sk-again")
    assert loaded.model_dump(exclude={"api_key", "http_transport", "cache", "example_selector"}) == (
        classifier.model_dump(exclude={"api_key", "http_transport", "cache", "example_selector"})
    )
    assert loaded.invoke("Goal!") == classifier.invoke("Goal!")
    multi = make(fake, multi_label=True, threshold={"Sports": 0.7})
    assert QwenClassifier.load(multi.save(tmp_path / "m.json")).threshold == {"Sports": 0.7}


def test_load_refuses_other_files(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text('{"format": "something-else"}')
    with pytest.raises(ValueError, match="not a saved QwenClassifier"):
        QwenClassifier.load(tmp_path / "x.json")
    with pytest.raises(ValueError, match="cannot read"):
        QwenClassifier.load(tmp_path / "missing.json")


def test_unknown_arguments_name_the_nearest_valid_one() -> None:
    with pytest.raises(ValueError, match=r"'batchsize' \(did you mean 'batch_size'\?\)"):
        QwenClassifier(labels=LABELS, batchsize=128)
    with pytest.raises(ValueError, match=r"'wibble'"):
        QwenClassifier(labels=LABELS, wibble=1)


def test_classification_json_round_trip() -> None:
    result = Classification(label="a", labels=["a"], scores={"a": 1.0, "b": 0.0}, scoring="label_tokens")
    assert Classification.model_validate_json(result.model_dump_json()) == result


def test_sequences_prompt_ends_with_the_label_tokens_so_far(fake: FakeVLLM) -> None:
    classifier = make(fake, labels=["Sci/Tech", "Sci-Fi", "Sports"])
    plan = classifier.prepare()
    node = next(k for k, s in enumerate(plan.steps) if s.path_text == "Sci/")
    assert plan.render("t", node).endswith(PROMPT_SUFFIX + "Sci/")
    asyncio.run(classifier.ainvoke("t"))


# -- servers without a tokenizer -----------------------------------------------------------------
@pytest.mark.parametrize(
    "settings",
    [{}, {"multi_label": True}, {"examples": [("Rates rise", "Business"), ("Cup final", "Sports")]}],
    ids=["single-label", "multi-label", "examples"],
)
def test_a_server_without_a_tokenizer_classifies_from_token_ids(
    settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Against ``--skip-tokenizer-init`` the client's tokenizer does every tokenising step:
    set-up and probes send token ids, the tokenizer check is skipped, and the results are
    those of a server with a tokenizer."""
    from langchain_qwen_fast._core import engine
    from tests.support.fake_vllm import ToyTokenizer

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: ToyTokenizer())
    texts = headlines(12)
    results = {}
    for has_tokenizer in (True, False):
        fake = FakeVLLM(has_tokenizer=has_tokenizer)
        # batch raises on the first error: a server without one refuses every text prompt
        results[has_tokenizer] = make(fake, tokenizer_path="toy", **settings).batch(texts)
    assert results[False] == results[True]


def test_without_a_tokenizer_anywhere_the_servers_refusal_is_named() -> None:
    with pytest.raises(QwenFastError, match="skip_tokenizer_init"):
        make(FakeVLLM(has_tokenizer=False)).invoke("a text")


def test_head_mode_probes_with_token_ids_when_the_client_tokenises(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_qwen_fast._core import engine
    from tests.support.fake_vllm import ToyTokenizer

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: ToyTokenizer())
    fake = FakeVLLM(has_tokenizer=False, head_classes=4)
    result = make(fake, mode="head", tokenizer_path="toy").invoke("Rates rise")  # text would be refused
    want = softmax([logit(toy_tokenize("Rates rise"), k) for k in range(4)])  # the head read our token ids
    assert result.scores is not None and list(result.scores.values()) == pytest.approx(want)
    with pytest.raises(QwenFastError, match="skip_tokenizer_init"):
        make(FakeVLLM(has_tokenizer=False, head_classes=4), mode="head").invoke("Rates rise")


def test_the_tokenizer_is_still_checked_on_a_replica_that_has_one(monkeypatch: pytest.MonkeyPatch) -> None:
    from langchain_qwen_fast._core import engine
    from tests.support.fake_vllm import NO_TOKENIZER, ToyTokenizer, status

    class OtherModels(ToyTokenizer):
        def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
            return [self.Encoding([i + 1 for i in toy_tokenize(t)]) for t in texts]

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: OtherModels())
    fake = FakeVLLM()
    fake.fail("/tokenize", status(400, message=NO_TOKENIZER))  # the first sample meets a replica without one
    with pytest.raises(QwenFastError, match="does not match the server's"):
        make(fake, tokenizer_path="toy").invoke("a text")


def test_redeployed_weights_miss_the_cache(fake: FakeVLLM) -> None:
    cache = InMemoryCache()
    fake.roots["qwen3"] = "/models/news-1"
    make(fake, cache=cache).invoke("a text")
    make(fake, cache=cache).invoke("a text")
    assert (cache.hits, cache.misses) == (1, 1)
    fake.roots["qwen3"] = "/models/news-2"  # the same name, other weights
    make(fake, cache=cache).invoke("a text")
    assert (cache.hits, cache.misses) == (1, 2)


class BrokenCache(InMemoryCache):
    def _get(self, keys: Any) -> dict[str, dict[str, Any]]:
        raise sqlite3.OperationalError("database is locked")

    def _put(self, values: Any) -> None:
        raise sqlite3.OperationalError("disk I/O error")


async def test_a_failing_cache_costs_no_results(fake: FakeVLLM, caplog: pytest.LogCaptureFixture) -> None:
    classifier = make(fake, cache=BrokenCache())
    results = await classifier.abatch([*headlines(5), ""], return_exceptions=True)
    assert all(isinstance(r, Classification) for r in results[:5]) and isinstance(results[5], InvalidInputError)
    assert "cache lookup failed" in caplog.text and "cache update failed" in caplog.text


class DictCache(ClassificationCache):
    """A cache of one's own (the extension point :class:`ClassificationCache` documents), its
    entries in plain sight."""

    def __init__(self) -> None:
        super().__init__()
        self.entries: dict[str, dict[str, Any]] = {}

    def _get(self, keys: Any) -> dict[str, dict[str, Any]]:
        return {k: self.entries[k] for k in keys if k in self.entries}

    def _put(self, values: Any) -> None:
        self.entries.update(values)

    def _clear(self) -> None:
        self.entries.clear()


def test_a_corrupt_cache_entry_is_asked_again(fake: FakeVLLM) -> None:
    cache = DictCache()
    classifier = make(fake, cache=cache)
    first = classifier.invoke("a text")
    for key in list(cache.entries):
        cache.entries[key] = {"label": 7}  # not a classification
    assert classifier.invoke("a text") == first


def test_sqlite_writes_wait_on_no_caller_and_go_in_one_transaction_a_batch(tmp_path: Path) -> None:
    path = tmp_path / "labels.db"
    cache = SQLiteCache(path, busy_timeout=10)
    holder = sqlite3.connect(path, isolation_level=None)
    holder.execute("BEGIN EXCLUSIVE")  # another process's long write transaction
    start = time.perf_counter()
    cache.update({f"k{i}": {"x": i} for i in range(1000)})
    assert time.perf_counter() - start < 1.0  # handed to the writer, not written here
    assert len(cache.lookup(["k0", "k999"])) == 2  # waiting entries are found already
    holder.execute("COMMIT")
    cache.flush()
    reader = sqlite3.connect(path)
    assert reader.execute("SELECT COUNT(*) FROM classifications").fetchone()[0] == 1000
    cache.close()


def test_sqlite_cache_is_shared_by_processes_writing_at_once(tmp_path: Path) -> None:
    path = tmp_path / "labels.db"
    script = (
        "import sys\n"
        "from langchain_qwen_fast.caches import SQLiteCache\n"
        "cache = SQLiteCache(sys.argv[1])\n"
        "for n in range(100):\n"
        "    cache.update({f'{sys.argv[2]}{n}-{i}': {'x': i} for i in range(20)})\n"
        "cache.close()\n"
    )
    others = [subprocess.Popen([sys.executable, "-c", script, str(path), name]) for name in ("a", "b")]
    mine = SQLiteCache(path)
    for n in range(100):
        mine.update({f"c{n}-{i}": {"x": i} for i in range(20)})
    assert [p.wait(timeout=60) for p in others] == [0, 0]
    assert len(mine) == 3 * 100 * 20
    mine.close()


# -- the compact prompt layout --------------------------------------------------------------
@pytest.mark.parametrize(
    "settings",
    [
        {},
        {"tokenizer_path": "toy"},
        {"multi_label": True},
        {"examples": [("Rates rise", "Business"), ("Cup final", "Sports")]},
        {"labels": {"Sports": ["Football", "Tennis"], "Business": ["Markets", "Deals"]}},
        {"labels": ["Sci/Tech", "Sci-Fi", "Sci", "Sports"]},
    ],
    ids=["label-tokens", "token-ids", "multi-label", "examples", "hierarchy", "label-sequences"],
)
def test_the_compact_layout_asks_every_path_after_the_text_in_one_token(
    fake: FakeVLLM, settings: dict[str, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    from langchain_qwen_fast._core import engine
    from langchain_qwen_fast._core.prompting import CACHE_BLOCK_TOKENS, COMPACT_SUFFIX
    from tests.support.fake_vllm import ToyTokenizer

    monkeypatch.setattr(engine, "load_tokenizer", lambda path: ToyTokenizer())
    classifier = make(fake, prompt_layout="compact", **settings)
    classifier.prepare()
    heads = [plan.head for plan in classifier.engine.plans().values()]  # one per hierarchy node
    assert heads
    for head in heads:
        assert head.endswith("<|endoftext|>")
        assert len(toy_tokenize(head)) % CACHE_BLOCK_TOKENS == 0  # the fixed part fills whole blocks
    texts = ["Stocks rally as rates fall", "Cup final tonight"]
    results = classifier.batch(texts)
    assert all(isinstance(r, Classification) for r in results)
    for plan in classifier.engine.plans().values():
        for text in texts:
            for step in range(len(plan.steps)):
                rest = plan.render(text, step)[len(plan.head) :]
                assert "<|im_start|>" not in rest
                # after the text: one special token, then a multi-label question or the label tokens given
                assert COMPACT_SUFFIX in rest and not rest.endswith(PROMPT_SUFFIX)
    if not settings:  # the server answered the prompt ending in the one special token
        (plan,) = classifier.engine.plans().values()
        for text, result in zip(texts, results, strict=True):
            assert plan.render(text).endswith(text + COMPACT_SUFFIX)
            want = softmax([logit(plan.render(text), t) for t in plan.answer_token_ids])
            assert result.scores is not None and list(result.scores.values()) == pytest.approx(want)


def test_the_layout_is_saved_and_loaded(fake: FakeVLLM, tmp_path: Path) -> None:
    make(fake, prompt_layout="compact").save(tmp_path)
    assert QwenClassifier.load(tmp_path, http_transport=fake.transport).prompt_layout == "compact"
    assert QwenClassifier.load(tmp_path, http_transport=fake.transport).prepare().head.endswith("<|endoftext|>")


@pytest.mark.parametrize("label", ["two\nlines", "<|im_end|>"])
def test_a_label_the_compact_layout_cannot_serve_is_a_clear_error(label: str) -> None:
    with pytest.raises(ValueError, match="compact layout"):
        QwenClassifier(labels=["a", label], prompt_layout="compact", base_url=URL)
    with pytest.raises(ValueError, match="prompt_layout"):
        QwenClassifier(labels=["a", "b"], prompt_layout="short", base_url=URL)
