"""Labelled files as ``qwen-fast eval`` and ``qwen-fast train`` read them (multi-label ones
too), and the generated sets."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from langchain_qwen_fast.errors import ConfigurationError, DataFileError
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, labelled_news, multi_labelled_news
from langchain_qwen_fast.training.data import (
    LabelledFile,
    LabelLists,
    is_multi_label,
    labelled_items,
    labelled_lists,
    parse_label_map,
    read_labelled,
    write_labelled,
)


def test_ag_news_layout_reads_its_indices_through_a_label_map(tmp_path: Path) -> None:
    path = tmp_path / "ag.csv"
    path.write_text('3,"Stocks up","Markets rallied."\n2,"Late goal","A win."\n')
    items, labels = labelled_items(path, label_map="1=World,2=Sports,3=Business,4=Sci/Tech")
    assert labels == ["Business", "Sports"]  # the file's labels, mapped, sorted
    assert items == [("Stocks up. Markets rallied.", "Business"), ("Late goal. A win.", "Sports")]
    assert labelled_items(path, list(AG_NEWS_LABELS), "1=World,2=Sports,3=Business,4=Sci/Tech")[1] == list(
        AG_NEWS_LABELS
    )


def test_labels_that_are_all_numbers_need_a_label_map_or_the_label_set(tmp_path: Path) -> None:
    path = tmp_path / "ag.csv"
    path.write_text('3,"Stocks up","Markets rallied."\n2,"Late goal","A win."\n1,"Summit","Talks."\n')
    with pytest.raises(
        DataFileError, match=r"are numbers \(1, 2, 3\).*--label-map 1=<name>,2=<name>,\.\.\..*--labels 1 2 3"
    ):
        labelled_items(path)
    with pytest.raises(DataFileError, match="are numbers"):  # multi-label files too
        labelled_lists(path)
    items, labels = labelled_items(path, ["1", "2", "3"])  # given as the label set: kept
    assert labels == ["1", "2", "3"] and items[0][1] == "3"
    with pytest.raises(DataFileError, match=r"the label set lacks: \['1', '2', '3'\]; give a label map"):
        labelled_items(path, list(AG_NEWS_LABELS))


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


def test_a_missing_label_or_text_column_names_the_files_columns(tmp_path: Path) -> None:
    path = tmp_path / "d.csv"
    path.write_text("text,category\na,x\n")
    with pytest.raises(DataFileError, match=r"no 'label' column; its columns: \['text', 'category'\]"):
        read_labelled(path)
    path.write_text("body,label\na,x\n")
    with pytest.raises(DataFileError, match=r"no 'text' \(nor title and description\) column; its columns: \['body'"):
        read_labelled(path)
    assert read_labelled(path, text_column="body") == [("a", "x")]
    lines = tmp_path / "d.jsonl"
    lines.write_text('{"body": "a", "label": "x"}\n')
    with pytest.raises(DataFileError, match=r"d\.jsonl:1 has no 'text' .*its keys: \['body', 'label'\]"):
        read_labelled(lines)


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


# -- multi-label files ------------------------------------------------------------------------
def test_jsonl_label_lists_are_read_mapped_and_detected(tmp_path: Path) -> None:
    path = tmp_path / "m.jsonl"
    path.write_text(
        '{"text": "a", "label": ["s", "w"]}\n{"text": "b", "label": []}\n{"text": "c", "label": "w|w"}\n'
        '{"text": "d", "label": ["w"]}\n'
    )
    data = LabelledFile(str(path), label_map="w=World,s=Sports")
    assert LabelLists().is_multi_label(data)  # detected: a JSON list
    items, labels = LabelLists().read(data, ["World", "Sports"])
    # labels once each, in the label set's order; an empty list is a text no label applies to
    assert items == [("a", ("World", "Sports")), ("b", ()), ("c", ("World",)), ("d", ("World",))]
    assert labels == ["World", "Sports"]
    assert LabelLists().read(data)[1] == ["Sports", "World"]  # no label set given: the file's, sorted
    with pytest.raises(DataFileError, match="multi-label"):  # read as single-label, a list is named
        data.read()


def test_csv_cells_split_at_the_separator(tmp_path: Path) -> None:
    items = [("stocks, and a goal", ("Business", "Sports")), ("rover", ("Sci/Tech",)), ("nothing", ())]
    path = write_labelled(tmp_path / "m.csv", items)
    assert path.read_text().splitlines()[1] == '"stocks, and a goal",Business|Sports'
    data = LabelledFile(str(path))
    assert not LabelLists().is_multi_label(data)  # a CSV cell says nothing: --multi-label asks for it
    in_order = [("stocks, and a goal", ("Sports", "Business")), *items[1:]]  # the label set's order
    assert LabelLists(multi_label=True).read(data, list(AG_NEWS_LABELS)) == (in_order, list(AG_NEWS_LABELS))
    other = tmp_path / "semicolons.csv"
    other.write_text("text,label\na, x ; y \nb,y\n")
    got = labelled_lists(other, separator=";")
    assert got == ([("a", ("x", "y")), ("b", ("y",))], ["x", "y"])
    with pytest.raises(ConfigurationError, match="separator"):
        labelled_lists(other, separator="")


def test_unknown_labels_in_lists_are_named(tmp_path: Path) -> None:
    path = write_labelled(tmp_path / "m.jsonl", [("a", ["World", "Spots"]), ("b", ["Sprots"])])
    with pytest.raises(DataFileError, match=r"\['Spots', 'Sprots'\]"):
        LabelLists().read(LabelledFile(str(path)), list(AG_NEWS_LABELS))


def test_a_single_label_jsonl_file_stays_single_label(tmp_path: Path) -> None:
    path = write_labelled(tmp_path / "s.jsonl", [("a", "x"), ("b", "y")])
    data = LabelledFile(str(path))
    assert not LabelLists().is_multi_label(data)
    assert LabelLists().read(data) == data.read() == ([("a", "x"), ("b", "y")], ["x", "y"])
    # asked for, it is read as lists of one
    assert LabelLists(multi_label=True).read(data) == ([("a", ("x",)), ("b", ("y",))], ["x", "y"])
    with pytest.raises(DataFileError, match="no such file"):
        LabelLists().read(LabelledFile(str(tmp_path / "none.jsonl")))


def test_mixed_items_are_refused() -> None:
    assert not is_multi_label([("a", "x")]) and is_multi_label([("a", ("x",)), ("b", [])])
    with pytest.raises(ConfigurationError, match="give every item a list"):
        is_multi_label([("a", "x"), ("b", ["x"])])


def test_generated_multi_label_news_mentions_one_to_three_topics() -> None:
    items = multi_labelled_news(400, seed=0)
    assert items == multi_labelled_news(400, seed=0)
    counts = Counter(len(labels) for _, labels in items)
    assert set(counts) == {1, 2, 3} and counts[1] > counts[3] and counts[2] > counts[3]
    shares = Counter(label for _, labels in items for label in labels)
    assert set(shares) == set(AG_NEWS_LABELS) and all(0.35 < n / len(items) < 0.55 for n in shares.values())
    assert all(list(labels) == [x for x in AG_NEWS_LABELS if x in labels] for _, labels in items)
    other = {t for t, _ in multi_labelled_news(400, seed=1)}
    assert len(other & {t for t, _ in items}) < 20
