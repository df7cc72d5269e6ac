"""``qwen-fast api``'s key and limits (no server is started): the key from the environment or a
file, never the command line; an empty key refused; the limits passed on only when given, their
documented defaults the service's; a warning for an address other than loopback without a key."""

from __future__ import annotations

import argparse
import logging
import re
from pathlib import Path
from typing import Any

import pytest

from langchain_qwen_fast.cli import api as command
from langchain_qwen_fast.cli.main import main
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.serving import api
from langchain_qwen_fast.serving.micro_batcher import DEFAULT_MAX_QUEUED_TEXTS
from tests.support.cli import parse_command


@pytest.fixture
def served(monkeypatch: pytest.MonkeyPatch) -> list[dict[str, Any]]:
    """``serve_api``'s calls, recorded instead of serving."""
    calls: list[dict[str, Any]] = []
    monkeypatch.setattr(api, "serve_api", lambda config, **kwargs: calls.append({"config": config, **kwargs}))
    monkeypatch.delenv(command.API_KEY_ENV, raising=False)
    return calls


def test_the_key_comes_from_the_environment(served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(command.API_KEY_ENV, "sk-from-env\n")
    assert main(["api", "models/news"]) == 0
    assert served[-1]["api_key"] == "sk-from-env"
    monkeypatch.setenv("MY_KEY", "sk-other")
    assert main(["api", "models/news", "--api-key-env", "MY_KEY"]) == 0
    assert served[-1]["api_key"] == "sk-other"


def test_the_key_comes_from_a_file_before_the_environment(
    served: list[dict[str, Any]], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv(command.API_KEY_ENV, "sk-from-env")
    key_file = tmp_path / "key"
    key_file.write_text("  sk-from-file  \n")
    assert main(["api", "models/news", "--api-key-file", str(key_file)]) == 0
    assert served[-1]["api_key"] == "sk-from-file"


def test_no_key_anywhere_is_a_service_without_one(served: list[dict[str, Any]]) -> None:
    assert main(["api", "models/news"]) == 0
    assert served[-1]["api_key"] is None


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


def test_the_limits_are_passed_on_only_when_given(served: list[dict[str, Any]]) -> None:
    assert main(["api", "models/news", "--max-texts", "9", "--request-timeout", "2.5"]) == 0
    limits = {name: served[-1][name] for name in command.LIMITS if name in served[-1]}
    assert limits == {"max_texts": 9, "request_timeout": 2.5}


def test_the_documented_defaults_are_the_services() -> None:
    parser = argparse.ArgumentParser()
    command.add_arguments(parser)
    helps = {action.dest: action.help or "" for action in parser._actions}
    defaults = {
        "max_body_bytes": api.DEFAULT_MAX_BODY_BYTES,
        "max_texts": api.DEFAULT_MAX_TEXTS,
        "max_text_chars": api.DEFAULT_MAX_TEXT_CHARS,
        "max_queued_texts": DEFAULT_MAX_QUEUED_TEXTS,
        "request_timeout": api.DEFAULT_REQUEST_TIMEOUT,
        "ready_timeout": api.DEFAULT_READY_TIMEOUT,
    }
    assert set(defaults) == set(command.LIMITS)
    for name, default in defaults.items():
        documented = re.search(r"\(default: ([\d.]+)\)", helps[name])
        assert documented is not None and float(documented[1]) == default, name
    assert parse_command(command, ["c"]).max_body_bytes is None


@pytest.mark.parametrize(
    ("host", "key", "warned"),
    [("0.0.0.0", None, True), ("10.0.0.5", None, True), ("api.example", None, True),
     ("0.0.0.0", "sk-1", False), ("127.0.0.1", None, False), ("localhost", None, False), ("::1", None, False)],
)  # fmt: skip
def test_a_warning_for_another_address_than_loopback_without_a_key(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, host: str, key: str | None, warned: bool
) -> None:
    ran: list[dict[str, Any]] = []

    class Uvicorn:
        @staticmethod
        def run(app: Any, **kwargs: Any) -> None:
            ran.append(kwargs)

    monkeypatch.setattr(api, "_uvicorn", lambda: Uvicorn)
    monkeypatch.setattr(api, "_app_of", lambda settings: settings)
    with caplog.at_level(logging.WARNING, logger=api.__name__):
        api.serve_api("models/news", host=host, api_key=key)
    assert ran[-1]["host"] == host
    assert any("without an API key" in r.message for r in caplog.records) == warned
    assert all("sk-1" not in r.getMessage() for r in caplog.records)


def test_serve_api_refuses_an_empty_key_and_bad_limits_before_anything_starts(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(api, "_uvicorn", lambda: pytest.fail("started"))
    with pytest.raises(ConfigurationError, match="api_key is empty"):
        api.serve_api("models/news", api_key="")
    with pytest.raises(ConfigurationError, match="max_queued_texts"):
        api.serve_api("models/news", max_texts=100, max_queued_texts=10)
    with pytest.raises(ConfigurationError, match="request_timeout"):
        api.serve_api("models/news", request_timeout=0)
