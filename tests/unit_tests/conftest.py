"""The unit layer: no network at all.

Every test here runs with sockets disabled (``pytest-socket``: creating any socket other than
a Unix one, or resolving a host name, raises ``SocketBlockedError``); asyncio's own loop wake-up
uses a Unix socket pair, which stays allowed. CI also runs this layer in a network namespace of
its own (``unshare -n``), where no address but an unconnected loopback exists.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from typing import Any

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_network() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """After each module's last test, collect its garbage and freeze what is left (the modules
    imported so far, torch's and transformers' among them: most of the heap) out of the cyclic
    garbage collector's reach. Full collections then walk only what later tests made, and the
    interpreter's exit skips the frozen heap: together a few seconds of this layer's run. What a
    test makes is still collected as ever; only garbage cycles made of frozen objects are kept."""
    yield
    if nextitem is None or nextitem.path != item.path:
        gc.collect()
        gc.freeze()


@pytest.fixture(scope="session")
def qwen3_tokenizer() -> Any:
    """The real Qwen3 tokenizer (a ``transformers`` fast tokenizer), rebuilt from its
    vocabulary with no network: built once, for every test that reads it."""
    from langchain_qwen_fast.testing.tiny_model import build_tokenizer

    return build_tokenizer()
