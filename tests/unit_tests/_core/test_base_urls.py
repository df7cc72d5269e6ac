"""Where the servers are: the URL file and the environment variable, as the classifier reads them."""

from __future__ import annotations

from pathlib import Path

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast._core.base_urls import BASE_URL_ENV, read_urls, resolve_base_url, write_urls


def test_a_written_file_reads_back_and_the_classifier_takes_it(tmp_path: Path) -> None:
    urls = ["http://127.0.0.1:8000/v1", "http://127.0.0.1:8001/v1"]
    path = write_urls(tmp_path / "urls.txt", urls)
    assert read_urls(path) == urls
    assert QwenClassifier(labels=["a", "b"], base_url=str(path)).base_url == urls
    (tmp_path / "one.txt").write_text("# the server\nhttp://h:1/v1  # comment\n\n")
    assert resolve_base_url(str(tmp_path / "one.txt")) == "http://h:1/v1"


def test_bad_files_and_values_are_named(tmp_path: Path) -> None:
    (tmp_path / "empty.txt").write_text("# nothing\n")
    with pytest.raises(ValueError, match="lists no URL"):
        read_urls(tmp_path / "empty.txt")
    (tmp_path / "bad.txt").write_text("127.0.0.1:8000\n")
    with pytest.raises(ValueError, match="not an http"):
        read_urls(tmp_path / "bad.txt")
    with pytest.raises(ValueError, match="neither an http"):
        QwenClassifier(labels=["a", "b"], base_url="no-such-file.txt")


def test_the_environment_variable_is_the_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(BASE_URL_ENV, raising=False)
    assert QwenClassifier(labels=["a", "b"]).base_url == "http://127.0.0.1:8000/v1"
    monkeypatch.setenv(BASE_URL_ENV, "http://a:1/v1, http://b:2/v1")
    assert QwenClassifier(labels=["a", "b"]).base_url == ["http://a:1/v1", "http://b:2/v1"]
    assert QwenClassifier(labels=["a", "b"], base_url="http://c:3/v1").base_url == "http://c:3/v1"  # given wins
