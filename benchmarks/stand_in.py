"""A fast stand-in for vLLM's OpenAI server, for measuring the client where the client is the
bottleneck: it answers ``/v1/models``, ``/tokenize``, ``/detokenize`` and ``/v1/completions``
in vLLM's reply shape (every field vLLM's ``CompletionResponse`` carries), with the logprobs
of the asked answer tokens, but computes nothing: a reply is bytes joined from fragments made
once per answer-token set, so a request costs the stand-in a small fraction of what it costs
the client that built it and reads the reply.

    python -m benchmarks.stand_in --port 8000 --model qwen3 --tokenizer .models/qwen3-tiny

A prompt's answer depends on its length only (one of a few fixed distributions), so answers
differ between texts but never between runs; ``/tokenize`` uses the served model's tokenizer,
so a client's set-up, which checks its own tokenizer against the server's, passes.

``--texts-per-second R`` paces it like an engine of known speed: prompts are answered first
come, first served, R a second, a request when its last prompt's turn is over. The servers'
ceiling is then known exactly (R times the stand-ins), and a client that is not the bottleneck
shows what it leaves idle: the work it does before its first request and after its last
reply, when the engine has nothing to do.
"""

from __future__ import annotations

import argparse
import asyncio
import math
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import orjson

#: Answer distributions a prompt may get (by its length): each favours another answer token.
_SHAPES = 7


def _distributions(allowed: Sequence[int]) -> list[bytes]:
    """For answer tokens ``allowed``, ``_SHAPES`` choice fragments (the part of a choice after
    its index), each a distribution favouring another token, in vLLM's field order."""
    fragments = []
    for shape in range(_SHAPES):
        weights = [1.0 + 4.0 * ((k + shape) % len(allowed) == 0) + 0.1 * k for k in range(len(allowed))]
        total = sum(weights)
        logprobs = {f"token_id:{t}": math.log(w / total) for t, w in zip(allowed, weights, strict=True)}
        first = f"token_id:{allowed[0]}"
        choice = {
            "text": "",
            "logprobs": {
                "text_offset": [0],
                "token_logprobs": [logprobs[first]],
                "tokens": [first],
                "top_logprobs": [logprobs],
            },
            "finish_reason": "length",
            "stop_reason": None,
            "token_ids": None,
            "prompt_logprobs": None,
            "prompt_token_ids": None,
            "routed_experts": None,
        }
        fragments.append(orjson.dumps(choice)[1:])  # without the opening brace
    return fragments


class StandIn:
    """The replies of one stand-in server: ``model`` served, ``tokenizer`` (a ``tokenizers``
    tokenizer, or None: ``/tokenize`` then counts characters)."""

    def __init__(self, model: str, tokenizer: Any, max_model_len: int) -> None:
        self.model = model
        self.tokenizer = tokenizer
        self.max_model_len = max_model_len
        self._fragments: dict[tuple[int, ...], list[bytes]] = {}
        self.requests = 0
        self.prompts = 0

    def models(self) -> bytes:
        entry = {"id": self.model, "object": "model", "created": int(time.time()), "owned_by": "vllm"}
        entry |= {"root": self.model, "parent": None, "max_model_len": self.max_model_len}
        return orjson.dumps({"object": "list", "data": [entry]})

    def tokenize(self, body: dict[str, Any]) -> bytes:
        ids = self._ids(body["prompt"])
        return orjson.dumps({"count": len(ids), "max_model_len": self.max_model_len, "tokens": ids})

    def detokenize(self, body: dict[str, Any]) -> bytes:
        text = self.tokenizer.decode(body["tokens"], skip_special_tokens=False) if self.tokenizer else ""
        return orjson.dumps({"prompt": text})

    def _ids(self, text: str) -> list[int]:
        if self.tokenizer is None:
            return list(range(max(1, len(text) // 4)))
        return list(self.tokenizer.encode(text, add_special_tokens=False).ids)

    def completions(self, body: dict[str, Any]) -> bytes:
        prompt = body["prompt"]
        prompts = prompt if isinstance(prompt, list) and prompt and not isinstance(prompt[0], int) else [prompt]
        allowed = tuple(body.get("logprob_token_ids") or body.get("allowed_token_ids") or (0,))
        fragments = self._fragments.get(allowed)
        if fragments is None:
            fragments = self._fragments[allowed] = _distributions(allowed)
        lengths = [len(p) if isinstance(p, list) else max(1, len(p) // 4) for p in prompts]
        choices = b",".join(b'{"index":%d,%s' % (i, fragments[n % _SHAPES]) for i, n in enumerate(lengths))
        tokens = sum(lengths)
        head = b'{"id":"cmpl-stand-in","object":"text_completion","created":%d,"model":%s,"choices":[' % (
            int(time.time()),
            orjson.dumps(self.model),
        )
        usage: dict[str, Any] = {
            "prompt_tokens": tokens,
            "total_tokens": tokens + len(prompts),
            "completion_tokens": len(prompts),
        }
        usage |= {"prompt_tokens_details": None}
        tail = {"service_tier": None, "system_fingerprint": None, "usage": usage, "kv_transfer_params": None}
        tail |= {"ec_transfer_params": None, "metrics": None}
        self.requests += 1
        self.prompts += len(prompts)
        return head + choices + b"]," + orjson.dumps(tail)[1:]


class Pace:
    """An engine that answers ``rate`` prompts a second, first come, first served: the
    seconds until a request of ``prompts`` prompts arriving at ``now`` is answered."""

    def __init__(self, rate: float) -> None:
        if rate <= 0:
            raise ValueError(f"a pace needs a positive rate, not {rate}")
        self.rate = rate
        self._free_at = 0.0

    def delay(self, prompts: int, now: float) -> float:
        self._free_at = max(now, self._free_at) + prompts / self.rate
        return self._free_at - now


def serve(host: str, port: int, stand_in: StandIn, pace: Pace | None = None) -> None:
    """Serve ``stand_in`` on ``host:port`` until killed; ``pace``: answer no faster than it."""
    from aiohttp import web

    def replied(data: bytes) -> web.Response:
        return web.Response(body=data, content_type="application/json")

    async def models(request: web.Request) -> web.Response:
        return replied(stand_in.models())

    async def tokenize(request: web.Request) -> web.Response:
        return replied(stand_in.tokenize(orjson.loads(await request.read())))

    async def detokenize(request: web.Request) -> web.Response:
        return replied(stand_in.detokenize(orjson.loads(await request.read())))

    async def completions(request: web.Request) -> web.Response:
        asked = stand_in.prompts
        data = stand_in.completions(orjson.loads(await request.read()))
        if pace is not None:
            await asyncio.sleep(pace.delay(stand_in.prompts - asked, time.monotonic()))
        return replied(data)

    async def health(request: web.Request) -> web.Response:
        return web.Response(text="")

    app = web.Application(client_max_size=256 * 1024 * 1024)
    app.router.add_get("/v1/models", models)
    app.router.add_get("/health", health)
    app.router.add_post("/tokenize", tokenize)
    app.router.add_post("/detokenize", detokenize)
    app.router.add_post("/v1/completions", completions)
    web.run_app(app, host=host, port=port, print=None, access_log=None, backlog=4096)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8000)
    parser.add_argument("--model", default="qwen3", help="the served model name")
    parser.add_argument("--tokenizer", type=Path, help="a model folder with tokenizer.json (the served model's)")
    parser.add_argument("--max-model-len", type=int, default=4096)
    parser.add_argument(
        "--texts-per-second", type=float, default=0.0, help="answer no faster than this, first come, first served"
    )
    args = parser.parse_args(argv)
    tokenizer = None
    if args.tokenizer is not None:
        from tokenizers import Tokenizer

        tokenizer = Tokenizer.from_file(str(args.tokenizer / "tokenizer.json"))
    pace = Pace(args.texts_per_second) if args.texts_per_second > 0 else None
    serve(args.host, args.port, StandIn(args.model, tokenizer, args.max_model_len), pace)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
