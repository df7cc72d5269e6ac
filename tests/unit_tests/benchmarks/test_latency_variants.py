"""The latency variants' pure part: pricing the logprobs with the same request without them."""

from __future__ import annotations

from benchmarks.latency_variants import without_logprobs


def test_the_no_logprobs_body_asks_the_same_step_for_its_token_only() -> None:
    body = {"model": "m", "prompt": [[1, 2]], "max_tokens": 1, "logprobs": 1, "logprob_token_ids": [5, 6]}
    assert without_logprobs(body) == {"model": "m", "prompt": [[1, 2]], "max_tokens": 1}
    assert without_logprobs({**body, "allowed_token_ids": [5]}) == without_logprobs(body)
