"""Labelled files as ``qwen-fast eval`` and ``qwen-fast train`` read them, and the generated set."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news
from langchain_qwen_fast.training.data import (
    LabelledFile,
    labelled_items,
    parse_label_map,
    read_labelled,
    write_labelled,
)


def test_ag_news_layout_maps_indices_to_labels(tmp_path: Path) -> None:
    path = tmp_path / "ag.csv"
    path.write_text('3,"Stocks up","Markets rallied."\n2,"Late goal","A win."\n')
    items, labels = labelled_items(path)
    assert labels == list(AG_NEWS_LABELS)
    assert items == [("Stocks up. Markets rallied.", "Business"), ("Late goal. A win.", "Sports")]


@pytest.mark.parametrize("suffix", [".csv", ".jsonl"])
def test_written_files_read_back(tmp_path: Path, suffix: str) -> None:
    items = [('a, "quoted" text', "x"), ("another\nline", "y")]
    path = write_labelled(tmp_path / f"d{suffix}", items)
    assert read_labelled(path) == items
    got, labels = labelled_items(path)
    assert got == items and labels == ["x", "y"]


def test_label_map_and_unknown_labels(tmp_path: Path) -> None:
    path = write_labelled(tmp_path / "d.csv", [("a", "pos"), ("b", "neg")])
    items, labels = labelled_items(path, ["positive", "negative"], "pos=positive,neg=negative")
    assert [y for _, y in items] == ["positive", "negative"] and labels == ["positive", "negative"]
    with pytest.raises(ValueError, match=r"\['neg'\]"):
        labelled_items(path, ["pos"])
    assert parse_label_map('{"1": "World"}') == {"1": "World"}
    with pytest.raises(ValueError, match="label map"):
        parse_label_map("1:World")


def test_a_missing_label_column_is_named(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,category\na,x\n")
    with pytest.raises(ValueError, match="'label'"):
        read_labelled(path)


def test_generated_news_is_balanced_reproducible_and_seeded() -> None:
    items = labelled_news(400, seed=0)
    assert items == labelled_news(400, seed=0)
    assert {label: sum(y == label for _, y in items) for label in AG_NEWS_LABELS} == dict.fromkeys(AG_NEWS_LABELS, 100)
    other = {t for t, _ in labelled_news(400, seed=1)}
    assert len(other & {t for t, _ in items}) < 20  # another seed: mostly other headlines


def test_a_labelled_file_reads_as_its_fields_say(tmp_path: Path) -> None:
    path = tmp_path / "d.jsonl"
    path.write_text('{"body": "a", "topic": "pos"}\n\n{"body": "b", "topic": "neg"}\n')
    data = LabelledFile(str(path), label_map="pos=positive,neg=negative", text_column="body", label_column="topic")
    assert data.read() == ([("a", "positive"), ("b", "negative")], ["negative", "positive"])
    assert data.read(["positive", "negative"])[1] == ["positive", "negative"]


def test_file_errors_are_typed_and_named(tmp_path: Path) -> None:
    with pytest.raises(DataFileError, match="no such file"):
        LabelledFile(str(tmp_path / "none.csv")).read()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"text": "a", "label": "x"}\nnot json\n')
    with pytest.raises(DataFileError, match=r"bad\.jsonl:2 is not JSON"):
        read_labelled(bad)
    bad.write_text('{"text": "a", "label": "x"}\n{"text": "b"}\n')
    with pytest.raises(DataFileError, match=r"bad\.jsonl:2 has no 'label' key"):
        read_labelled(bad)
    empty = tmp_path / "empty.csv"
    empty.write_text("")
    with pytest.raises(DataFileError, match="empty"):
        read_labelled(empty)
    path = write_labelled(tmp_path / "d.csv", [("a", "pos")])
    with pytest.raises(DataFileError, match="lacks"):
        labelled_items(path, ["neg"])
    with pytest.raises(ConfigurationError, match="not valid JSON"):
        parse_label_map("{1: World}")
    with pytest.raises(ConfigurationError, match="label map"):
        parse_label_map("1:World")
