"""The stand-in server's replies: vLLM's completion shape, one choice a prompt in order, the
asked answer tokens' logprobs forming a distribution (the classifier reads them as it reads
vLLM's)."""

from __future__ import annotations

import math

import orjson

from benchmarks.stand_in import StandIn


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
