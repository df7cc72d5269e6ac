"""A classifier's configuration: the arguments it takes, and its saved file (the whole
configuration as JSON, in a versioned envelope)."""

from __future__ import annotations

import difflib
import json
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import ConfigurationError, DataFileError

FORMAT = "langchain-qwen-fast/classifier"
VERSION = 2
FILE_NAME = "classifier.json"
#: What each earlier version's file holds that this release's configuration does not: dropped
#: when it is read. Version 1 bounded retries by ``retry_deadline``; a call's ``deadline``
#: (none by default) took its place.
_DROPPED_SINCE = {1: ("retry_deadline",)}


def _file(path: str | Path) -> Path:
    target = Path(path)
    return target / FILE_NAME if target.is_dir() else target


def write(path: str | Path, config: dict[str, Any]) -> Path:
    """Write ``config`` to ``path`` (a directory gets a ``classifier.json``); the file written."""
    target = _file(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text(json.dumps({"format": FORMAT, "version": VERSION, "config": config}, indent=1) + "\n")
    return target


def read(path: str | Path) -> dict[str, Any]:
    """The configuration saved at ``path`` (the file, or a directory holding ``classifier.json``)."""
    source = _file(path)
    try:
        saved = json.loads(source.read_text())
    except (OSError, ValueError) as exc:
        raise DataFileError(f"cannot read a saved classifier from {source}: {exc}") from None
    if not isinstance(saved, dict) or saved.get("format") != FORMAT:
        raise DataFileError(f"{source} is not a saved QwenClassifier (format {FORMAT!r})")
    version = saved.get("version")
    if version != VERSION and version not in _DROPPED_SINCE:
        raise DataFileError(f"{source} has version {version}; this release reads {VERSION} and earlier")
    config: dict[str, Any] = saved["config"]
    for name in _DROPPED_SINCE.get(version, ()):
        config.pop(name, None)
    return config


def check_arguments(owner: str, given: Iterable[str], known: set[str]) -> None:
    """Refuse an unknown argument (given by hand, or from an older saved file) with an error
    naming the nearest known one: never silently ignored."""
    unknown = sorted(set(given) - known)
    if unknown:
        hints = []
        for name in unknown:
            near = difflib.get_close_matches(name, sorted(known), n=1, cutoff=0.6)
            hints.append(f"{name!r}" + (f" (did you mean {near[0]!r}?)" if near else ""))
        raise ConfigurationError(f"{owner} got unknown argument(s): {', '.join(hints)}")
