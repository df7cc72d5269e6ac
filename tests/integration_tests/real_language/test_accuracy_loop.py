"""The accuracy loop on real language: SmolLM2-135M-Instruct, a real pretrained model, trained
on generated headlines (a head, and an SFT adapter by the quickstart stand-in's recipe), served
by vLLM, and measured through ``qwen-fast eval`` on natural headlines written by hand apart from
the generator (:data:`~langchain_qwen_fast.testing.samples.NATURAL_NEWS`); then calibrated.

The tiny random model scores about chance on those headlines whatever it is trained on: what is
checked here is that training keeps what the pretrained model reads, so that a label means the
same on text the generator never wrote.

Calibration is fitted on one natural set (the review pool) and checked on another (the held-out
headlines): the temperature must lower the calibration error on text it was not fitted on.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.cli import main
from langchain_qwen_fast.testing.samples import (
    NATURAL_NEWS,
    NATURAL_REVIEW_POOL,
    SAMPLE_EXAMPLES,
    SAMPLE_HEADLINES,
    labelled_news,
)
from langchain_qwen_fast.training.data import write_labelled
from tests.integration_tests.real_language.conftest import LABELS, background_jobs, work_dir
from tests.integration_tests.real_language.test_smollm2 import HEADLINES

__all__ = ["background_jobs"]  # the integration conftest plans this module's training runs through it

#: The accuracy a model trained on generated headlines must reach on the natural ones.
MIN_NATURAL_ACCURACY = 0.85


def _eval(data: Path, base_url: str, classifier: Path, out: Path, *extra: str) -> dict[str, Any]:
    assert main(["eval", str(data), "--classifier", str(classifier), "--base-url", base_url, "--out", str(out),
                 "--latency-samples", "2", "--bootstrap", "200", *extra]) == 0  # fmt: skip
    return dict(json.loads((out / "report.json").read_text()))


@pytest.fixture(scope="module")
def natural() -> Path:
    """The held-out natural headlines, as the labelled file ``qwen-fast eval`` reads."""
    return write_labelled(work_dir() / "natural.csv", NATURAL_NEWS)


def test_the_natural_sets_are_apart_from_the_generator_the_samples_and_each_other() -> None:
    """The held-out set and the review pool: each label equally often, no headline twice, none
    shared with each other, with the zero-shot test's headlines, the samples or the generated
    headlines the models train on."""
    held_out, pool = [t for t, _ in NATURAL_NEWS], [t for t, _ in NATURAL_REVIEW_POOL]
    for items in (NATURAL_NEWS, NATURAL_REVIEW_POOL):
        assert sorted(label for _, label in items) == sorted(LABELS * (len(items) // len(LABELS)))
    assert len(set(held_out)) == len(held_out) and len(set(pool)) == len(pool)
    others = {*[t for group in HEADLINES.values() for t in group], *SAMPLE_HEADLINES, *[t for t, _ in SAMPLE_EXAMPLES]}
    generated = {text for seed in range(3) for text, _ in labelled_news(1200, seed)}
    assert not set(held_out) & set(pool)
    assert not (set(held_out) | set(pool)) & (others | generated)


def _calibrated_on_the_pool(classifier: Path, url: str, name: str) -> tuple[Path, dict[str, Any]]:
    """A copy of the saved classifier with a temperature fitted on the review pool
    (``--calibrate --save-calibration``), and the fitting report."""
    saved = work_dir() / f"{name}-calibrated" / "classifier.json"
    saved.parent.mkdir(exist_ok=True)
    shutil.copyfile(classifier / "classifier.json", saved)
    pool = write_labelled(work_dir() / "pool.csv", NATURAL_REVIEW_POOL)
    report = _eval(pool, url, saved, work_dir() / f"eval-{name}-fit", "--calibrate", "--save-calibration")
    return saved, report


@pytest.mark.parametrize("method", ["head", "sft"])
def test_trained_on_generated_headlines_labels_natural_ones_and_calibrates(
    method: str, natural: Path, request: pytest.FixtureRequest
) -> None:
    """Trained on generated headlines, served, evaluated through ``qwen-fast eval`` on natural
    held-out headlines: accuracy at least :data:`MIN_NATURAL_ACCURACY`; a temperature fitted
    on other natural headlines lowers the held-out calibration error."""
    model, url = (
        (request.getfixturevalue("head_model")[0], request.getfixturevalue("head_url"))
        if method == "head"
        else (request.getfixturevalue("sft_adapter")[0], request.getfixturevalue("smollm2_url"))
    )
    raw = _eval(natural, url, model, work_dir() / f"eval-{method}")
    print(f"{method}: natural held-out accuracy {raw['accuracy']:.3f}, ECE {raw['ece']:.4f}")
    assert raw["failed"] == 0 and raw["items"] == len(NATURAL_NEWS)
    assert raw["accuracy"] >= MIN_NATURAL_ACCURACY

    calibrated, fitted = _calibrated_on_the_pool(model, url, method)
    after = _eval(natural, url, calibrated, work_dir() / f"eval-{method}-calibrated")
    temperature = fitted["calibration"]["temperature"]
    print(f"{method}: temperature {temperature:.3f} (fitted on the pool)")
    print(f"{method}: held-out ECE {raw['ece']:.4f} -> {after['ece']:.4f}")
    assert after["accuracy"] == raw["accuracy"]  # a temperature never changes the top label
    assert after["ece"] < raw["ece"]
