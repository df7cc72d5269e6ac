"""The unit layer: no network at all.

Every test here runs with sockets disabled (``pytest-socket``: creating any socket other than
a Unix one, or resolving a host name, raises ``SocketBlockedError``); asyncio's own loop wake-up
uses a Unix socket pair, which stays allowed. CI also runs this layer in a network namespace of
its own (``unshare -n``), where no address but an unconnected loopback exists.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from pytest_socket import disable_socket, enable_socket


@pytest.fixture(autouse=True)
def _no_network() -> Iterator[None]:
    disable_socket(allow_unix_socket=True)
    yield
    enable_socket()
