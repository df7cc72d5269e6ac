"""The settings that change answers, derived from the settings' fields: every field is either
declared answer-neutral or counts, the key never enters, and values render deterministically."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from langchain_qwen_fast._core.fingerprints import ANSWER_NEUTRAL, answer_settings
from langchain_qwen_fast._core.prompting import LabelSet
from langchain_qwen_fast._core.settings import EngineSettings, Rules
from langchain_qwen_fast.errors import ConfigurationError


def labels(**changes: Any) -> LabelSet:
    given: dict[str, Any] = {"descriptions": {"A": "first", "B": "second"}, "instructions": "Pick one."}
    return LabelSet.build(["A", "B"], **{**given, **changes})


def settings(**changes: Any) -> EngineSettings:
    base = EngineSettings(
        base_urls=("http://vllm.test/v1",),
        model="qwen3",
        label_sets={(): labels()},
        rules=Rules(thresholds={"A": 0.5, "B": 0.7}),
    )
    return dataclasses.replace(base, **changes)


def test_every_settings_field_is_declared_neutral_or_counts() -> None:
    names = {f.name for f in dataclasses.fields(EngineSettings)}
    assert names >= ANSWER_NEUTRAL, f"ANSWER_NEUTRAL names no field: {sorted(ANSWER_NEUTRAL - names)}"
    counted = {name.split(".")[0].split("[")[0] for name in answer_settings(settings())}
    assert counted == names - ANSWER_NEUTRAL


def test_a_field_nobody_declared_counts() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Extended(EngineSettings):
        reasoning: str = "off"

    extended = Extended(**{f.name: getattr(settings(), f.name) for f in dataclasses.fields(EngineSettings)})
    assert answer_settings(extended)["reasoning"] == "off"
    assert answer_settings(dataclasses.replace(extended, reasoning="on")) != answer_settings(extended)


def test_a_counted_field_holding_an_object_is_refused_by_name() -> None:
    @dataclasses.dataclass(frozen=True, kw_only=True)
    class Extended(EngineSettings):
        hook: Any = None

    extended = Extended(**{f.name: getattr(settings(), f.name) for f in dataclasses.fields(EngineSettings)})
    with pytest.raises(ConfigurationError, match=r"setting hook holds a object.*ANSWER_NEUTRAL"):
        answer_settings(dataclasses.replace(extended, hook=object()))


@pytest.mark.parametrize(
    "change",
    [
        {"base_urls": ("http://other.test/v1", "http://third.test/v1")},
        {"api_key": "sk-other"},
        {"timeout": 5.0},
        {"max_retries": 0},
        {"deadline": 60.0},
        {"batch_size": 8},
        {"max_concurrency": 2},
        {"client_processes": 4},
    ],
)
def test_neutral_settings_leave_the_fingerprint_alone(change: dict[str, Any]) -> None:
    assert answer_settings(settings(**change)) == answer_settings(settings())


@pytest.mark.parametrize(
    ("change", "named"),
    [
        ({"model": "qwen3-b"}, "model"),
        ({"mode": "head"}, "mode"),
        ({"rules": Rules(temperature=1.5, thresholds={"A": 0.5, "B": 0.7})}, "rules.temperature"),
        ({"rules": Rules(abstain_below=0.4, thresholds={"A": 0.5, "B": 0.7})}, "rules.abstain_below"),
        ({"rules": Rules(thresholds={"A": 0.5, "B": 0.6})}, "rules.thresholds"),
        ({"label_sets": {(): labels(layout="compact")}}, "label_sets.layout"),
        ({"label_sets": {(): labels(descriptions={"A": "first"})}}, "label_sets.descriptions"),
        ({"label_sets": {(): labels(instructions="Choose.")}}, "label_sets.instructions"),
        ({"label_sets": {(): labels(examples=[("a text", "A")])}}, "label_sets.examples"),
    ],
)
def test_each_setting_that_changes_answers_changes_the_fingerprint_under_its_name(
    change: dict[str, Any], named: str
) -> None:
    before, after = answer_settings(settings()), answer_settings(settings(**change))
    assert [name for name in before if before[name] != after.get(name)] == [named]


def test_the_key_and_the_urls_never_enter() -> None:
    shown = json.dumps(answer_settings(settings(api_key="sk-secret", base_urls=("http://user:pw@vllm.test/v1",))))
    assert "sk-secret" not in shown and "pw@" not in shown and "vllm.test" not in shown


def test_values_render_the_same_whatever_order_the_mappings_were_given_in() -> None:
    a = LabelSet.build(["A", "B"], {"A": "first", "B": "second"})
    b = LabelSet.build(["A", "B"], {"B": "second", "A": "first"})
    child = LabelSet.build(["x", "y"])
    one = settings(label_sets={(): a, ("A",): child}, rules=Rules(thresholds={"A": 0.5, "B": 0.7}))
    other = settings(label_sets={("A",): child, (): b}, rules=Rules(thresholds={"B": 0.7, "A": 0.5}))
    assert json.dumps(answer_settings(one)) == json.dumps(answer_settings(other))
    assert answer_settings(one)["label_sets[('A',)].labels"] == ["x", "y"]
