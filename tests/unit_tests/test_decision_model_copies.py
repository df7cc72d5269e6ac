"""A decision model's copy behaves as its fields say, as a classifier's does: ``model_copy``
builds a fresh engine from the fields with the update on top; pickle and deepcopy work."""

from __future__ import annotations

import copy
import pickle

import httpx
import pytest

from langchain_qwen_fast import QwenDecisionModel
from langchain_qwen_fast.errors import QwenFastError
from tests.support.fake_vllm import FakeVLLM

URL = "http://vllm.test/v1"
DEAD = "http://127.0.0.1:9/v1"


def _refused(request: httpx.Request) -> httpx.Response:
    raise httpx.ConnectError("connection refused", request=request)


def test_a_copy_has_an_engine_of_its_own_and_the_updated_fields() -> None:
    model = QwenDecisionModel(base_url=URL, temperature=1.0)
    hotter = model.model_copy(update={"temperature": 2.0})
    assert hotter.temperature == 2.0 and hotter.engine.settings.rules.temperature == 2.0
    assert hotter.engine is not model.engine


def test_a_copy_pointed_at_a_dead_server_does_not_answer_from_the_old_one() -> None:
    fake = FakeVLLM()
    model = QwenDecisionModel(base_url=URL, http_transport=fake.transport, max_retries=0)
    dead = model.model_copy(update={"base_url": DEAD, "http_transport": httpx.MockTransport(_refused)})
    request = {"state": "hello", "questions": {"ok": {"type": "noul", "instructions": "Is it fine?"}}}
    assert model.invoke(request).nouls  # the original answers from the canned server
    with pytest.raises(QwenFastError):
        dead.invoke(request)


def test_pickle_and_deepcopy_give_a_working_model_of_the_same_fields() -> None:
    model = QwenDecisionModel(base_url=URL, abstain_below=0.7)
    for other in (pickle.loads(pickle.dumps(model)), copy.deepcopy(model)):
        assert other.abstain_below == 0.7 and other.base_url == model.base_url
        assert other.engine is not model.engine
