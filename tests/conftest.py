"""Both layers: what the whole test run needs before any test."""

from __future__ import annotations

import signal

import pytest


def pytest_configure(config: pytest.Config) -> None:
    # A shell that starts a command in the background without job control starts it with
    # SIGINT ignored, and Python then never raises KeyboardInterrupt; the tests of what Ctrl-C
    # does (in this process and in the commands it starts, which inherit an ignored signal)
    # would then test nothing. Give the run the handler an interactive one has.
    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
