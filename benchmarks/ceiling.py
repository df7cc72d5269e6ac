"""vLLM's own ceiling for a layout of servers: what the engine reaches in process, with no HTTP
and no client, on the same hardware, model and prompts. The reference row of
``python -m benchmarks.scale``, against which each layout's rate is also given as a fraction.

One ``vllm.LLM`` engine a server of the layout, each in a process of its own started with that
server's engine flags (precision, memory share, KV cache, compilation: the flags its command
line has) and environment (its GPU; a fresh MPS daemon where the servers ran under MPS). The
prompts are the classifier's own, rendered by its plan (``QwenClassifier.prepare()``): token
ids where it has a tokenizer, else its text prompts, tokenised by each engine before the clock
starts. Each engine is asked what the classifier asks a server: in generate mode
(:func:`sampling_from_body`) one token, greedy, the label tokens' logprobs as the classifier's
request asks for them; in head mode the head's class probabilities (``LLM.classify``). The
texts are dealt among the engines (:func:`split_among`); each engine warms up, all start
together, and the ceiling is every text over the span from the first start to the last finish.
:func:`ceiling_work` makes the prompts and the sampling from a classifier set up against the
servers; :func:`ceilings` measures one ceiling a layout size after the servers stop.

Importing this module imports nothing heavy: vLLM is imported in the engine processes only.
"""

from __future__ import annotations

import dataclasses
import multiprocessing
import os
import queue
import time
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal, TypeVar

from langchain_qwen_fast.bench.measure import FreshTexts
from langchain_qwen_fast.bench.paths import request_body
from langchain_qwen_fast.errors import QwenFastError
from langchain_qwen_fast.serving.mps import MPSDaemon
from langchain_qwen_fast.testing.samples import news_items

if TYPE_CHECKING:
    from langchain_qwen_fast.serving import VLLMServer

T = TypeVar("T")

#: A prompt: token ids, or text an engine tokenises before its clock starts.
Prompt = str | list[int] | tuple[int, ...]

#: flags of a server's command line that only its HTTP side reads
_HTTP_FLAGS = ("--host", "--port")


@dataclass(frozen=True)
class EngineSpec:
    """How to start one engine: the model, its server's engine flags and environment."""

    model: str
    flags: tuple[str, ...]
    env: dict[str, str] = field(default_factory=dict)


@dataclass(frozen=True)
class CeilingSampling:
    """``vllm.SamplingParams`` of the ceiling: the classifier's request's (one token, greedy,
    the label tokens' logprobs as it asks for them), nothing detokenised."""

    max_tokens: int
    temperature: float
    logprobs: int | None
    logprob_token_ids: list[int] | None = None
    allowed_token_ids: list[int] | None = None

    @property
    def label_tokens(self) -> list[int]:
        """The tokens whose logprobs every answer must carry."""
        return list(self.logprob_token_ids or self.allowed_token_ids or [])

    def params(self) -> dict[str, Any]:
        """Keyword arguments of ``vllm.SamplingParams``."""
        given = {k: v for k, v in dataclasses.asdict(self).items() if v is not None}
        return {**given, "detokenize": False}


@dataclass
class EngineRun:
    """One engine's share: its prompts, when it started and finished (wall-clock seconds), its
    process's CPU seconds, the answers that carry every label token's logprob, or why it failed."""

    index: int
    prompts: int = 0
    started: float = 0.0
    finished: float = 0.0
    cpu_seconds: float = 0.0
    answered: int = 0
    error: str | None = None


@dataclass
class Ceiling:
    """The reference row: ``engines`` engines over ``items`` texts; their combined rate, how
    the label tokens' logprobs were asked for, and each engine's run (or why there is no rate)."""

    engines: int
    items: int
    per_s: float | None = None
    seconds: float | None = None
    request: str = ""
    answered: int = 0
    runs: list[EngineRun] = field(default_factory=list)
    error: str | None = None


def split_among(items: Sequence[T], parts: int) -> list[list[T]]:
    """``items`` dealt into ``parts`` consecutive shares whose sizes differ by at most one,
    the larger first (an empty share where there are fewer items than parts)."""
    if parts < 1:
        raise ValueError(f"parts must be at least 1, got {parts}")
    size, extra = divmod(len(items), parts)
    shares, start = [], 0
    for k in range(parts):
        end = start + size + (k < extra)
        shares.append(list(items[start:end]))
        start = end
    return shares


def fraction_of_ceiling(per_s: float | None, ceiling: Ceiling | None) -> float | None:
    """``per_s`` as a fraction of the ceiling's rate (None without either)."""
    if per_s is None or ceiling is None or not ceiling.per_s:
        return None
    return round(per_s / ceiling.per_s, 3)


def sampling_from_body(body: Mapping[str, Any]) -> CeilingSampling:
    """The engine's sampling settings for the classifier's ``/v1/completions`` body (see
    :func:`langchain_qwen_fast.bench.paths.request_body`): the same answer length, temperature
    and label-token logprobs, whichever way the body asks for them (``logprob_token_ids``, or
    ``allowed_token_ids`` with a top-k of logprobs)."""
    if "structured_outputs" in body:
        raise ValueError("a constrained-choice request has no label-token logprobs to ask an engine for")
    ids = list(body["logprob_token_ids"]) if body.get("logprob_token_ids") else None
    return CeilingSampling(
        max_tokens=int(body.get("max_tokens", 1)),
        temperature=float(body.get("temperature", 0.0)),
        # The engine's SamplingParams wants one logprob for each asked-for token (the server
        # maps its request's top-k onto that itself).
        logprobs=len(ids) if ids else body.get("logprobs"),
        logprob_token_ids=ids,
        allowed_token_ids=list(body["allowed_token_ids"]) if body.get("allowed_token_ids") else None,
    )


def engine_flags(command: Sequence[str]) -> list[str]:
    """The flags of a server's command line (``... serve MODEL FLAGS``) that set up its engine:
    all of them but the HTTP side's (:data:`_HTTP_FLAGS` and their values)."""
    words = list(command)
    flags = words[words.index("serve") + 2 :] if "serve" in words else words
    kept: list[str] = []
    skip = False
    for word in flags:
        if skip:
            skip = False
            continue
        name = word.split("=", 1)[0]
        if name in _HTTP_FLAGS:
            skip = "=" not in word
            continue
        kept.append(word)
    return kept


def engine_spec(server: VLLMServer, env: Mapping[str, str] | None = None) -> EngineSpec:
    """The engine of ``server``: its model, engine flags and environment (``env`` on top)."""
    own = {**server.profile.env, **server.command_env, **server.env, **(env or {})}
    return EngineSpec(model=server.model, flags=tuple(engine_flags(server.command())), env=own)


def measure_ceiling(specs: Sequence[EngineSpec], work: CeilingWork, timeout: float = 1800.0) -> Ceiling:
    """The ceiling of one engine a spec over ``work``'s prompts (dealt among them), each engine
    first answering its warm-ups; every engine's process stopped at the end. ``timeout``:
    seconds for the slowest engine to start and answer its share."""
    return measure_ceilings(specs, [work], timeout)[0]


def measure_ceilings(
    specs: Sequence[EngineSpec], works: Sequence[CeilingWork], timeout: float = 1800.0
) -> list[Ceiling]:
    """One ceiling for each of ``works``, one after the other on the same engines (started
    once: an engine's start costs far more than its answers): each work's prompts dealt
    among the engines, warmed, then all engines released together."""
    for work in works:
        missing = work.missing()
        if missing is not None:  # else an engine would be handed no sampling and classify
            raise ValueError(f"a work no engine can answer: {missing}")
    context = multiprocessing.get_context("spawn")  # a fresh interpreter: vLLM and CUDA start clean
    barrier = context.Barrier(len(specs))
    results: Any = context.Queue()
    shares = [
        [(share, list(work.warm_ups), work.engine_sampling()) for share in split_among(work.prompts, len(specs))]
        for work in works
    ]
    ceilings_found = [Ceiling(engines=len(specs), items=len(work.prompts), request=work.request()) for work in works]
    processes = [
        context.Process(
            target=run_engine,
            args=(k, spec, [per_work[k] for per_work in shares], barrier, results, timeout),
            daemon=False,
        )
        for k, spec in enumerate(specs)
    ]
    for process in processes:
        process.start()
    deadline = time.monotonic() + timeout
    answered = 0
    error = None
    try:
        while answered < len(processes):
            try:
                runs = results.get(timeout=max(1.0, deadline - time.monotonic()))
            except queue.Empty:
                error = f"{len(processes) - answered} engines gave no answer within {timeout:.0f} s"
                break
            answered += 1
            for ceiling, run in zip(ceilings_found, runs):
                ceiling.runs.append(run)
    finally:
        for process in processes:
            process.join(60)
            if process.is_alive():
                process.terminate()
                process.join(30)
    for ceiling in ceilings_found:
        ceiling.runs.sort(key=lambda r: r.index)
        failed = [f"engine {r.index}: {r.error}" for r in ceiling.runs if r.error]
        ceiling.error = "; ".join(failed) or error
        if len(ceiling.runs) < len(specs) and ceiling.error is None:
            ceiling.error = "an engine stopped before this work"
        if ceiling.error is None:
            ceiling.seconds = round(max(r.finished for r in ceiling.runs) - min(r.started for r in ceiling.runs), 3)
            ceiling.per_s = round(ceiling.items / ceiling.seconds, 1)
            ceiling.answered = sum(r.answered for r in ceiling.runs)
    return ceilings_found


def _held(prompts: Sequence[Prompt]) -> list[Prompt]:
    """``prompts`` with their token ids as tuples (see :class:`CeilingWork`)."""
    return [p if isinstance(p, str) else tuple(p) for p in prompts]


@dataclass
class CeilingWork:
    """What every ceiling of the run answers: the classifier's prompts for the run's texts and
    for a few warm-up texts, and what its request asks for (generate mode: the sampling; head
    mode: the head's classes); or why there is none."""

    prompts: list[Any] = field(default_factory=list)
    warm_ups: list[Any] = field(default_factory=list)
    sampling: CeilingSampling | None = None
    reason: str | None = None
    mode: Literal["generate", "head"] = "generate"

    def __post_init__(self) -> None:
        # Token ids held as tuples until the ceiling runs, after the clients: the collector
        # stops tracking a tuple of ints at its first pass, so the client measured in this
        # process does not walk the run's held prompts in each of its full passes.
        self.prompts, self.warm_ups = _held(self.prompts), _held(self.warm_ups)

    def missing(self) -> str | None:
        """Why no engine can answer this work, or None."""
        if self.reason is not None:
            return self.reason
        return "no sampling settings" if self.mode == "generate" and self.sampling is None else None

    def engine_sampling(self) -> CeilingSampling | None:
        """What an engine is given: the sampling to generate with, or None to classify."""
        return self.sampling if self.mode == "generate" else None

    def request(self) -> str:
        """How the answer is asked for: ``classify`` (the head), or how the label tokens'
        logprobs are (``logprob_token_ids`` or ``allowed_token_ids``)."""
        if self.mode == "head":
            return "classify"
        return "logprob_token_ids" if self.sampling and self.sampling.logprob_token_ids else "allowed_token_ids"


def ceiling_work(classifier: Any, model_name: str, items: int, mode: str) -> CeilingWork:
    """The ceiling's prompts and sampling from ``classifier``'s plan (its set-up done against
    the group): token ids where it has a tokenizer, else its text prompts. ``mode``: the
    classifier's (``head``: the engines classify with the head)."""
    plan = classifier.prepare()

    def prompts(texts: list[str]) -> list[Any]:
        return list(plan.encode(texts)) if plan.tokenizer is not None else [plan.render(t) for t in texts]

    timed = prompts(news_items(items))
    if mode == "head":
        return CeilingWork(prompts=timed, warm_ups=prompts(FreshTexts()(64)), mode="head")
    try:
        sampling = sampling_from_body(request_body(plan, model_name, timed[:1]))
    except ValueError as exc:
        return CeilingWork(reason=str(exc))
    return CeilingWork(prompts=timed, warm_ups=prompts(FreshTexts()(64)), sampling=sampling)


def ceilings(
    specs: Sequence[EngineSpec], work: CeilingWork, sizes: Sequence[int], mps: bool, timeout: float
) -> list[Ceiling]:
    """vLLM's ceiling with the first k engines of ``specs`` for each k in ``sizes``; under a
    fresh MPS daemon where the servers ran under one."""
    found = []
    for k in sorted(set(sizes)):
        missing = work.missing()
        if missing is not None:
            found.append(Ceiling(engines=k, items=len(work.prompts), error=missing))
            continue
        daemon = MPSDaemon() if mps else None
        try:
            if daemon is not None:
                daemon.start()
            env = daemon.env if daemon is not None else {}
            chosen = [dataclasses.replace(spec, env={**spec.env, **env}) for spec in specs[:k]]
            found.append(measure_ceiling(chosen, work, timeout))
        except QwenFastError as exc:  # no MPS daemon: the row says why, the report keeps the rest
            found.append(Ceiling(engines=k, items=len(work.prompts), error=f"{type(exc).__name__}: {exc}"))
        finally:
            if daemon is not None:
                daemon.stop()
        shown = f"{found[-1].per_s}/s" if found[-1].per_s else found[-1].error
        print(f"vLLM ceiling, {k} engine{'s' if k > 1 else ''}: {shown}", flush=True)
    return found


def known_flags(flags: Sequence[str], known: Collection[str]) -> list[str]:
    """``flags`` without the flags (and their values) that are not in ``known``, an engine
    parser's option strings: a server's command line also has its HTTP side's. vLLM's
    ``-O`` shorthands (``-O0``, ``-O 3``) stay: its parser expands them."""
    kept: list[str] = []
    keep = False
    for word in flags:
        if word.startswith("-"):
            keep = word.split("=", 1)[0] in known or word.startswith("-O")
        if keep:
            kept.append(word)
    return kept


def _engine_settings(model: str, flags: Sequence[str]) -> dict[str, Any]:
    """``vllm.LLM``'s keyword arguments for a server's engine ``flags``: every engine setting
    the flags change from vLLM's defaults, read by vLLM's own parser as ``vllm serve`` reads
    them."""
    from vllm.engine.arg_utils import EngineArgs
    from vllm.utils.argparse_utils import FlexibleArgumentParser

    parser = EngineArgs.add_cli_args(FlexibleArgumentParser())
    ours = EngineArgs.from_cli_args(
        parser.parse_args(["--model", model, *known_flags(flags, parser._option_string_actions)])
    )
    plain = EngineArgs.from_cli_args(parser.parse_args(["--model", model]))
    return {
        f.name: getattr(ours, f.name)
        for f in dataclasses.fields(EngineArgs)
        if f.name != "model" and getattr(ours, f.name) != getattr(plain, f.name)
    }


def _ids(tokenizer: Any, prompt: Prompt) -> list[int]:
    """``prompt``'s token ids: as given, or made with ``tokenizer`` from its text."""
    return list(prompt) if not isinstance(prompt, str) else list(tokenizer.encode(prompt, add_special_tokens=False))


def _answered(answer: Any, sampling: CeilingSampling | None) -> bool:
    """Whether an engine's answer carries what the classifier reads: the head's class
    probabilities (``sampling`` None), or every label token's logprob."""
    if sampling is None:
        return bool(answer.outputs.probs)
    logprobs: Any = answer.outputs[0].logprobs if answer.outputs else None
    return bool(logprobs) and set(sampling.label_tokens) <= set(logprobs[0])


def run_engine(
    index: int,
    spec: EngineSpec,
    works: list[tuple[list[Prompt], list[Prompt], CeilingSampling | None]],
    barrier: Any,
    results: Any,
    timeout: float,
) -> None:
    """One engine's process: start it as its server was; then for each work (its share of the
    prompts, warm-up prompts, and the sampling to generate with, or None to classify with the
    head) warm it, wait for the others, answer its share; put the list of its
    :class:`EngineRun` on ``results``. A failure aborts the barrier, so no other engine waits
    for this one."""
    runs: list[EngineRun] = []
    try:
        os.environ.update(spec.env)  # before vLLM (and CUDA) are imported
        from vllm import LLM, SamplingParams
        from vllm.inputs import TokensPrompt

        llm = LLM(model=spec.model, **_engine_settings(spec.model, spec.flags))
        # Text prompts are tokenised here, before the clock starts (a server started without a
        # tokenizer is given token ids only).
        texts = any(isinstance(p, str) for prompts, warm_ups, _ in works for p in (*prompts, *warm_ups))
        tokenizer = llm.get_tokenizer() if texts else None

        def as_ids(batch: list[Prompt]) -> list[Any]:
            return [TokensPrompt(prompt_token_ids=_ids(tokenizer, p)) for p in batch]

        def answer(batch: list[Any], params: Any) -> list[Any]:
            if params is None:  # the head's classes
                return list(llm.classify(batch, use_tqdm=False))
            return list(llm.generate(batch, params, use_tqdm=False))

        for prompts, warm_ups, sampling in works:
            run = EngineRun(index=index, prompts=len(prompts))
            runs.append(run)
            params = SamplingParams(**sampling.params()) if sampling is not None else None
            timed, warm = as_ids(prompts), as_ids(warm_ups)
            if warm:
                answer(warm, params)
            barrier.wait(timeout)
            cpu, run.started = time.process_time(), time.time()
            answers = answer(timed, params) if timed else []
            run.finished, run.cpu_seconds = time.time(), time.process_time() - cpu
            run.answered = sum(1 for a in answers if _answered(a, sampling))
    except BaseException as exc:  # reported, never raised: the parent waits on every engine's answer
        barrier.abort()
        if not runs or runs[-1].error is not None:
            runs.append(EngineRun(index=index))
        runs[-1].error = f"{type(exc).__name__}: {str(exc)[-1500:]}"
    results.put(runs)


__all__ = [
    "Ceiling",
    "CeilingSampling",
    "CeilingWork",
    "EngineRun",
    "EngineSpec",
    "ceiling_work",
    "ceilings",
    "engine_flags",
    "engine_spec",
    "fraction_of_ceiling",
    "known_flags",
    "measure_ceiling",
    "measure_ceilings",
    "run_engine",
    "sampling_from_body",
    "split_among",
]
