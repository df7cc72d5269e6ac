"""Where the servers are: the URL list ``qwen-fast serve`` writes and the classifier reads.

One URL per line (``#`` starts a comment); the environment variable ``QWEN_FAST_BASE_URL``
may hold one URL or several separated by commas or spaces.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path

from langchain_qwen_fast.errors import ConfigurationError

#: environment variable naming the server(s) when no ``base_url`` is given
BASE_URL_ENV = "QWEN_FAST_BASE_URL"
DEFAULT_BASE_URL = "http://127.0.0.1:8000/v1"


def write_urls(path: str | Path, urls: Sequence[str]) -> Path:
    """Write ``urls``, one per line."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    target.write_text("".join(f"{u}\n" for u in urls))
    return target


def read_urls(path: str | Path) -> list[str]:
    """The URLs listed in a file (one per line; blank lines and ``#`` comments skipped);
    :class:`ConfigurationError` when it lists none or something that is not an http(s) URL."""
    lines = [line.split("#", 1)[0].strip() for line in Path(path).read_text().splitlines()]
    urls = [line for line in lines if line]
    if not urls:
        raise ConfigurationError(f"base_url: {path} lists no URL")
    bad = [u for u in urls if not u.startswith(("http://", "https://"))]
    if bad:
        raise ConfigurationError(f"base_url: {path} lists {bad[0]!r}, which is not an http(s) URL")
    return urls


def resolve_base_url(value: str | Sequence[str] | None) -> str | list[str]:
    """A classifier's ``base_url``: a URL or a list as given; a file of URLs (one per line)
    read; nothing given: ``QWEN_FAST_BASE_URL`` (a URL or a comma/space-separated list), else
    the local default."""
    if value is None:
        value = os.environ.get(BASE_URL_ENV, "").strip() or DEFAULT_BASE_URL
        urls = [u for u in re.split(r"[,\s]+", value) if u]
        return urls if len(urls) > 1 else urls[0]
    if isinstance(value, str):
        if value.startswith(("http://", "https://")):
            return value
        if Path(value).is_file():
            urls = read_urls(value)
            return urls if len(urls) > 1 else urls[0]
        raise ConfigurationError(f"base_url: {value!r} is neither an http(s) URL nor a file of URLs")
    return list(value)
