"""The collector's pause: off inside, back on after (errors included), and an application's
own choice to keep it off never undone."""

from __future__ import annotations

import gc

import pytest

from langchain_qwen_fast._core import collector


def test_the_collector_is_off_inside_and_back_on_after_even_after_an_error() -> None:
    assert gc.isenabled()
    with collector.paused():
        assert not gc.isenabled()
    assert gc.isenabled()
    with pytest.raises(RuntimeError), collector.paused():
        raise RuntimeError("inside")
    assert gc.isenabled()


def test_a_collector_the_application_turned_off_stays_off() -> None:
    gc.disable()
    try:
        with collector.paused():
            assert not gc.isenabled()
        assert not gc.isenabled()
    finally:
        gc.enable()
