"""``qwen-fast api``'s options (no server is started): the key from the environment or a file,
never the command line; an empty key refused; one :class:`ServiceOptions` built from the flags
and handed to the service as is; a warning for an address other than loopback without a key."""

from __future__ import annotations

import argparse
import dataclasses
import logging
import sys
import types
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.cli import api as command
from langchain_qwen_fast.cli.main import main
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import service
from langchain_qwen_fast.serving.service import ServiceOptions, serve_api
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS
from tests.support.cli import parse_command


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``serve_api``'s calls, recorded instead of serving."""
    calls: list[dict[str, Any]] = []

    def record(config: str, options: ServiceOptions, **kwargs: Any) -> None:
        calls.append({"config": config, "options": options, **kwargs})

    monkeypatch.setattr(service, "serve_api", record)
    monkeypatch.delenv(command.API_KEY_ENV, raising=False)
    return calls


def test_the_key_comes_from_the_environment(served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(command.API_KEY_ENV, "sk-from-env\n")
    assert main(["api", "models/news"]) == 0
    assert served[-1]["options"].api_key == "sk-from-env"
    monkeypatch.setenv("MY_KEY", "sk-other")
    assert main(["api", "models/news", "--api-key-env", "MY_KEY"]) == 0
    assert served[-1]["options"].api_key == "sk-other"


def test_the_key_comes_from_a_file_before_the_environment(
    served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(command.API_KEY_ENV, "sk-from-env")
    key_file = tmp_path / "key"
    key_file.write_text("  sk-from-file  \n")
    assert main(["api", "models/news", "--api-key-file", str(key_file)]) == 0
    assert served[-1]["options"].api_key == "sk-from-file"


def test_no_key_anywhere_is_a_service_without_one(served: list[dict[str, Any]]) -> None:
    assert main(["api", "models/news"]) == 0
    assert served[-1]["options"].api_key is None


@pytest.mark.parametrize("where", ["env", "file", "missing-file"])
def test_an_empty_or_unreadable_key_is_refused(
    served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path, where: str
) -> None:
    key_file = tmp_path / "key"
    if where == "env":
        monkeypatch.setenv(command.API_KEY_ENV, "  ")
    elif where == "file":
        key_file.write_text("\n")
    with pytest.raises(ConfigurationError, match=r"empty|cannot read"):
        command.api_key_from(command.API_KEY_ENV, None if where == "env" else key_file)
    argv = ["api", "models/news"] + ([] if where == "env" else ["--api-key-file", str(key_file)])
    assert main(argv) == 1 and served == []  # refused before anything starts


def test_the_key_cannot_be_given_on_the_command_line(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as stopped:
        main(["api", "models/news", "--api-key", "sk-in-ps"])
    assert stopped.value.code == 2


def test_the_flags_make_one_options_object_handed_to_the_service_as_is(served: list[dict[str, Any]]) -> None:
    argv = ["api", "models/news", "--base-url", "http://a/v1", "--max-texts", "9", "--request-timeout", "2.5",
            "--workers", "3", "--groups-in-flight", "2", "--host", "0.0.0.0"]  # fmt: skip
    assert main(argv) == 0
    expected = ServiceOptions(max_texts=9, request_timeout=2.5, workers=3, groups_in_flight=2, host="0.0.0.0")
    assert served[-1] == {"config": "models/news", "options": expected, "base_url": "http://a/v1", "model": None}
    assert main(["api", "models/news"]) == 0
    assert served[-1]["options"] == ServiceOptions()  # no flag: the service's own defaults


def test_every_option_but_the_key_is_a_flag_and_its_help_shows_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("COLUMNS", "1000")  # one line a flag
    parser = argparse.ArgumentParser(formatter_class=lambda prog: argparse.HelpFormatter(prog, max_help_position=200))
    command.add_arguments(parser)
    helps = {line.split()[0]: line for line in parser.format_help().splitlines() if line.strip().startswith("--")}
    parsed = parse_command(command, ["c"])
    for field in dataclasses.fields(ServiceOptions):
        flag = "--" + field.name.replace("_", "-")
        if field.name == "api_key":
            assert flag not in helps  # only from the environment or a file
            continue
        assert getattr(parsed, field.name) == field.default, field.name
        if field.default is not None:
            assert f"(default: {field.default}" in helps[flag], flag


def test_a_flag_value_that_cannot_work_is_refused_before_anything_starts(served: list[dict[str, Any]]) -> None:
    assert main(["api", "models/news", "--max-texts", "100", "--max-queued-texts", "10"]) == 1
    assert main(["api", "models/news", "--request-timeout", "0"]) == 1
    assert served == []


@pytest.fixture
def uvicorn_runs(monkeypatch: pytest.MonkeyPatch) -> list[tuple[Any, dict[str, Any]]]:
    """uvicorn's ``run`` calls, recorded instead of serving."""
    ran: list[tuple[Any, dict[str, Any]]] = []
    fake = types.ModuleType("uvicorn")
    fake.run = lambda app, **kwargs: ran.append((app, kwargs))  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "uvicorn", fake)
    return ran


@pytest.mark.parametrize(
    ("host", "key", "warned"),
    [("0.0.0.0", None, True), ("10.0.0.5", None, True), ("api.example", None, True),
     ("0.0.0.0", "sk-1", False), ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False)],
)  # fmt: skip
def test_a_warning_for_another_address_than_loopback_without_a_key(
    uvicorn_runs: list[tuple[Any, dict[str, Any]]],
    caplog: pytest.LogCaptureFixture,
    tmp_path: Path,
    host: str,
    key: str | None,
    warned: bool,
) -> None:
    saved = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url="http://vllm.test/v1").save(tmp_path / "news")
    with caplog.at_level(logging.WARNING, logger="langchain_qwen_fast.serving.service"):
        serve_api(saved, ServiceOptions(host=host, port=8123, api_key=key))
    app, settings = uvicorn_runs[-1]
    assert settings["host"] == host and settings["port"] == 8123
    assert app.state.service.options.api_key == key  # the app serves under the options given
    assert any("without an API key" in r.message for r in caplog.records) == warned
    assert all("sk-1" not in r.getMessage() for r in caplog.records)
