"""The stand-in server's replies: vLLM's completion shape, one choice a prompt in order, the
asked answer tokens' logprobs forming a distribution (the classifier reads them as it reads
vLLM's)."""

from __future__ import annotations

import math

import orjson
import pytest

from benchmarks.stand_in import Pace, StandIn


def test_a_completion_reply_has_a_choice_a_prompt_with_every_answer_token_s_logprob() -> None:
    stand_in = StandIn("qwen3", None, 4096)
    reply = orjson.loads(stand_in.completions({"prompt": [[1, 2, 3], [4], "a text"], "logprob_token_ids": [7, 8, 9]}))
    assert [c["index"] for c in reply["choices"]] == [0, 1, 2]
    for choice in reply["choices"]:
        top = choice["logprobs"]["top_logprobs"][0]
        assert set(top) == {"token_id:7", "token_id:8", "token_id:9"}
        assert math.isclose(sum(math.exp(v) for v in top.values()), 1.0)
    assert reply["usage"]["completion_tokens"] == 3 and reply["model"] == "qwen3"
    one = orjson.loads(stand_in.completions({"prompt": [5, 6], "logprob_token_ids": [7, 8]}))
    assert len(one["choices"]) == 1  # a token-id list is one prompt
    assert orjson.loads(stand_in.models())["data"][0]["max_model_len"] == 4096


def test_a_pace_answers_its_rate_first_come_first_served() -> None:
    pace = Pace(1000.0)
    assert math.isclose(pace.delay(100, now=10.0), 0.1)  # idle: its own prompts' time
    assert math.isclose(pace.delay(50, now=10.05), 0.1)  # queued behind the first until 10.1
    assert math.isclose(pace.delay(10, now=20.0), 0.01)  # idle again: nothing carried over
    with pytest.raises(ValueError, match="positive rate"):
        Pace(0)
