"""A canned vLLM server for the unit layer: an ``httpx.MockTransport`` handler that answers
``/v1/models``, ``/tokenize``, ``/v1/completions`` and ``/classify`` the way vLLM does, from a
toy tokenizer and scores derived from each prompt, with no network.

It records every request and takes queued faults per path, so the request procedure (set-up,
grouping, splitting, retries, ordering, per-item errors) is driven exactly as against a server.
"""

from __future__ import annotations

import json
import math
import re
import threading
import zlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

_TOKEN = re.compile(r"<\|[a-z_]+\|>|</?think>|\w+|[^\w\s]|\s+")


_VOCAB: dict[int, str] = {}


#: The token an unrestricted (no allowed_token_ids) completion samples: one that answers no label.
UNRESTRICTED_CHOICE = 3


#: vLLM's answer to text (or /tokenize) when started with --skip-tokenizer-init
NO_TOKENIZER = "Tokenizer not available when `skip_tokenizer_init=True`"

#: vLLM's Rust frontend's answer to a list of prompts in one request (HTTP 400)
NO_PROMPT_LISTS = {
    "error": {
        "message": "Failed to deserialize the JSON body into the target type: prompt: data did not match any "
        "variant of untagged enum Prompt",
        "type": "BadRequestError",
        "code": "json_parse_error",
    }
}


def toy_tokenize(text: str) -> list[int]:
    """Words, punctuation marks, runs of whitespace and control tokens, each one stable id."""
    ids = []
    for token in _TOKEN.findall(text):
        ids.append(zlib.crc32(token.encode()) % 1_000_000 + 1_000)
        _VOCAB[ids[-1]] = token
    return ids


def toy_detokenize(ids: list[int]) -> str:
    return "".join(_VOCAB[i] for i in ids)


class ToyTokenizer:
    """``tokenizers.Tokenizer``'s surface over the toy tokenizer (a client-side tokenizer equal
    to the fake server's)."""

    class Encoding:
        def __init__(self, ids: list[int]) -> None:
            self.ids = ids

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
        return [self.Encoding(toy_tokenize(t)) for t in texts]

    def encode_batch_fast(self, texts: list[str], add_special_tokens: bool = True) -> list[Any]:
        """``encode_batch`` (in ``tokenizers``, the same without character offsets)."""
        return self.encode_batch(texts, add_special_tokens)

    def decode(self, ids: list[int]) -> str:
        return toy_detokenize(ids)

    def token_to_id(self, token: str) -> int:
        (only,) = toy_tokenize(token)
        return only


def prompts_of(value: Any) -> tuple[list[Any], bool]:
    """A ``prompt`` (or ``input``) field's prompts, and whether it was a list of them: one
    string or one token-id list is a single prompt, as vLLM reads it."""
    if isinstance(value, str) or (value and all(isinstance(t, int) for t in value)):
        return [value], False
    return list(value), True


def prompts_in(request: httpx.Request) -> int:
    """The prompts a completions request asks: what a test counts where the flow control
    chooses how many prompts a request carries."""
    return len(prompts_of(json.loads(request.content)["prompt"])[0])


def _has_text(body: Any) -> bool:
    """Whether a completions or classify body carries any text prompt (not token ids)."""
    prompts = (body or {}).get("prompt", (body or {}).get("input", []))
    return isinstance(prompts, str) or any(isinstance(p, str) for p in prompts)


def logit(prompt: Any, token: int) -> float:
    """The fake model's score of ``token`` after ``prompt``: fixed per (prompt, token)."""
    key = (json.dumps(prompt) + f"|{token}").encode()
    return (zlib.crc32(key) % 10_000) / 1_000.0  # 0 .. 10


def softmax(scores: list[float]) -> list[float]:
    top = max(scores)
    weights = [math.exp(s - top) for s in scores]
    total = sum(weights)
    return [w / total for w in weights]


@dataclass
class Recorded:
    method: str
    url: str
    path: str
    body: Any
    headers: dict[str, str]


@dataclass
class FakeVLLM:
    """Call it with a request (it is the MockTransport handler); see the module docstring."""

    models: dict[str, int] = field(default_factory=lambda: {"qwen3": 512})
    #: the weights each model is served from, as ``/v1/models`` reports them (``root``)
    roots: dict[str, str] = field(default_factory=dict)
    #: honour ``logprob_token_ids`` (vLLM >= 0.11); else return the top 20 like older servers
    logprob_token_ids: bool = True
    #: classes of the served head (``/classify``); None: not a pooling model
    head_classes: int | None = None
    #: the head is multi-label: a sigmoid per class instead of a softmax over them
    head_sigmoid: bool = False
    #: False: a server started with ``--skip-tokenizer-init`` (token-id prompts only)
    has_tokenizer: bool = True
    #: False: vLLM's Rust frontend, which answers a list of prompts (completions, and here
    #: ``/classify`` inputs too) with :data:`NO_PROMPT_LISTS` and reads one prompt a request
    takes_prompt_lists: bool = True
    #: prompts containing this make the whole completions request fail with HTTP 400
    poison: str = "POISON"
    requests: list[Recorded] = field(default_factory=list)
    faults: dict[str, list[Callable[[httpx.Request], httpx.Response]]] = field(default_factory=dict)
    #: hosts that refuse connections (a replica that is down)
    down_hosts: set[str] = field(default_factory=set)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def transport(self) -> httpx.MockTransport:
        return httpx.MockTransport(self)

    def fail(self, path_suffix: str, *responses: Callable[[httpx.Request], httpx.Response]) -> None:
        """Queue replies for requests whose path ends with ``path_suffix``, one each, in order."""
        self.faults.setdefault(path_suffix, []).extend(responses)

    def calls(self, path_suffix: str) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith(path_suffix)]

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.host in self.down_hosts:
            raise httpx.ConnectError("connection refused", request=request)
        body = json.loads(request.content) if request.content else None
        with self._lock:
            self.requests.append(
                Recorded(request.method, str(request.url), request.url.path, body, dict(request.headers))
            )
            for suffix, queue in self.faults.items():
                if request.url.path.endswith(suffix) and queue:
                    return queue.pop(0)(request)
        path = request.url.path
        if not self.has_tokenizer and (path.endswith(("/tokenize", "/detokenize")) or _has_text(body)):
            return self._json({"error": {"message": NO_TOKENIZER, "type": "BadRequestError", "code": 400}}, 400)
        if path.endswith("/v1/models"):
            data = [{"id": m, "max_model_len": n, "root": self.roots.get(m, m)} for m, n in self.models.items()]
            return self._json({"data": data})
        if path.endswith("/detokenize"):
            return self._json({"prompt": toy_detokenize(body["tokens"])})
        if path.endswith("/tokenize"):
            ids = toy_tokenize(body["prompt"])
            return self._json({"tokens": ids, "count": len(ids), "max_model_len": 512})
        refused = not self.takes_prompt_lists and path.endswith(("/v1/completions", "/classify"))
        if refused and prompts_of(body.get("prompt", body.get("input")))[1]:
            return self._json(NO_PROMPT_LISTS, 400)
        if path.endswith("/v1/completions"):
            return self._completions(body)
        if path.endswith("/classify"):
            return self._classify(body)
        return self._json({"error": {"message": f"no route {path}"}}, 404)

    @staticmethod
    def _json(data: Any, status: int = 200, headers: dict[str, str] | None = None) -> httpx.Response:
        return httpx.Response(status, json=data, headers=headers)

    def _completions(self, body: dict[str, Any]) -> httpx.Response:
        if body.get("model") not in self.models:
            return self._json({"error": {"message": f"The model `{body.get('model')}` does not exist."}}, 404)
        prompts = prompts_of(body["prompt"])[0]
        if any(self.poison in (p if isinstance(p, str) else "") for p in prompts):
            return self._json({"error": {"message": "This prompt is poisoned."}}, 400)
        choices = []
        for index, prompt in enumerate(prompts):
            if "structured_outputs" in body:
                options = body["structured_outputs"]["choice"]
                scores = [logit(prompt, k) for k in range(len(options))]
                text = options[scores.index(max(scores))]
                choices.append({"index": index, "text": text, "logprobs": None, "finish_reason": "stop"})
                continue
            restricted = "allowed_token_ids" in body
            allowed = body["allowed_token_ids"] if restricted else body["logprob_token_ids"]
            probs = softmax([logit(prompt, t) for t in allowed])
            # Unrestricted, greedy sampling may pick a token that answers no label.
            chosen = allowed[probs.index(max(probs))] if restricted else UNRESTRICTED_CHOICE
            logprobs = {f"token_id:{t}": math.log(p) for t, p in zip(allowed, probs)}
            logprobs.setdefault(f"token_id:{chosen}", -2.0)
            if not (self.logprob_token_ids and body.get("logprob_token_ids")):
                logprobs = {f"token_id:{chosen}": logprobs[f"token_id:{chosen}"]}  # top-1 only
            choices.append(
                {
                    "index": index,
                    "text": "x",
                    "logprobs": {
                        "tokens": [f"token_id:{chosen}"],
                        "token_logprobs": [logprobs[f"token_id:{chosen}"]],
                        "top_logprobs": [logprobs],
                    },
                    "finish_reason": "length",
                }
            )
        prompt_tokens = sum(len(p) if isinstance(p, list) else len(toy_tokenize(p)) for p in prompts)
        usage = {"prompt_tokens": prompt_tokens, "completion_tokens": len(prompts)}
        usage["total_tokens"] = prompt_tokens + len(prompts)
        return self._json({"object": "text_completion", "choices": choices, "usage": usage})

    def _classify(self, body: dict[str, Any]) -> httpx.Response:
        if self.head_classes is None:
            return self._json({"error": {"message": "not a pooling model"}}, 400)
        data = []
        for index, item in enumerate(prompts_of(body["input"])[0]):
            logits = [logit(item, k) for k in range(self.head_classes)]
            probs = [1 / (1 + math.exp(5 - x)) for x in logits] if self.head_sigmoid else softmax(logits)
            data.append({"index": index, "label": "LABEL_0", "probs": probs, "num_classes": self.head_classes})
        return self._json({"object": "list", "data": data})


Fault = Callable[[httpx.Request], httpx.Response]


def status(code: int, headers: dict[str, str] | None = None, message: str = "injected") -> Fault:
    """A fault: answer with this HTTP status."""
    return lambda request: httpx.Response(code, json={"error": {"message": message}}, headers=headers)


def raw(content: bytes, code: int = 200) -> Fault:
    """A fault: answer with these bytes (e.g. malformed JSON)."""
    return lambda request: httpx.Response(code, content=content)


def reset() -> Fault:
    """A fault: the connection drops."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("peer closed connection", request=request)

    return handler


def timeout() -> Fault:
    """A fault: no answer within the timeout."""

    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.ReadTimeout("timed out", request=request)

    return handler


class UnixServer:
    """A :class:`FakeVLLM` served over real HTTP by aiohttp on a Unix socket (the unit layer
    allows no other), in a thread and event loop of its own so that sync callers may block on
    it: for the transport's aiohttp path. The fake's faults become what they stand for on the
    wire: a reset or a refused connection drops the connection, a timeout sends nothing for
    ``stall`` seconds. ``gather``: every request is held until that many were in at once (or
    for 2 s); ``peak`` is the most requests it held at once; ``hosts``: each request's host,
    in the order they came (a replica that is down included)."""

    def __init__(self, fake: FakeVLLM, path: str, *, gather: int = 0, stall: float = 2.0) -> None:
        self.fake = fake
        self.path = path
        self.gather = gather
        self.stall = stall
        self.peak = 0
        self.hosts: list[str] = []
        self._now = 0
        self._loop: Any = None
        self._runner: Any = None
        self._thread: threading.Thread | None = None

    def connector(self) -> Any:
        """A client connector that reaches this server whatever the URL's host."""
        import aiohttp

        return aiohttp.UnixConnector(path=self.path)

    async def _handle(self, request: Any) -> Any:
        import asyncio

        from aiohttp import web

        self.hosts.append(request.host.partition(":")[0])
        self._now += 1
        self.peak = max(self.peak, self._now)
        try:
            for _ in range(200 if self.gather else 0):
                if self.peak >= self.gather:
                    break
                await asyncio.sleep(0.01)
            await asyncio.sleep(0.01 if self.gather else 0)  # the others meet this one in flight
            content = await request.read()
            url = f"http://{request.host}{request.path_qs}"
            forwarded = httpx.Request(request.method, url, headers=dict(request.headers), content=content)
            try:
                answer = self.fake(forwarded)
            except httpx.TimeoutException:
                await asyncio.sleep(self.stall)
                raise web.HTTPGatewayTimeout() from None
            except httpx.TransportError:
                request.transport.close()  # the client sees the connection drop
                return web.Response()
            headers = {k: v for k, v in answer.headers.items() if k.lower() in ("content-type", "retry-after")}
            return web.Response(status=answer.status_code, body=answer.content, headers=headers)
        finally:
            self._now -= 1

    def __enter__(self) -> UnixServer:
        import asyncio

        from aiohttp import web

        self._loop = asyncio.new_event_loop()
        app = web.Application()
        app.router.add_route("*", "/{tail:.*}", self._handle)
        self._runner = web.AppRunner(app, access_log=None)

        async def start() -> None:
            await self._runner.setup()
            await web.UnixSite(self._runner, self.path).start()

        self._loop.run_until_complete(start())
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        import asyncio

        asyncio.run_coroutine_threadsafe(self._runner.cleanup(), self._loop).result()
        self._loop.call_soon_threadsafe(self._loop.stop)
        assert self._thread is not None
        self._thread.join()
        self._loop.close()
