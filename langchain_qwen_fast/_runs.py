"""LangChain callback runs around a classification: one run per input, opened and closed by
hand where it is cheaper than ``Runnable``'s helpers, and skipped where nobody watches.

``invoke``/``ainvoke`` open their run here rather than through ``Runnable._call_with_config``:
that helper inspects the function's signature on every call, a cost beside a short request,
and nothing runs nested inside a classification that would need the child config it sets up.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from langchain_core.runnables import Runnable, RunnableConfig
from langchain_core.runnables.config import (
    ensure_config,
    get_async_callback_manager_for_config,
    get_callback_manager_for_config,
)

if TYPE_CHECKING:
    from langchain_qwen_fast._core.engine import BatchSlice

# Per-item run bookkeeping in a big async batch is done in slices with a yield to the event
# loop between them, so the loop keeps serving other tasks (the soak in
# tests/integration_tests/reliability records its longest stall).
_RUNS_PER_SLICE = 512


def with_run(runnable: Runnable, value: Any, config: RunnableConfig | None, classify: Callable[[Any], Any]) -> Any:
    """``classify(config)``'s result for one input inside its callback run; an error result is
    raised (and recorded on the run)."""
    config = ensure_config(config)
    run = get_callback_manager_for_config(config).on_chain_start(
        None, value, name=config.get("run_name") or runnable.get_name(), run_id=config.pop("run_id", None)
    )
    try:
        result = classify(config)
        if isinstance(result, Exception):
            raise result
    except BaseException as exc:
        run.on_chain_error(exc)
        raise
    run.on_chain_end(result)
    return result


async def awith_run(
    runnable: Runnable, value: Any, config: RunnableConfig | None, classify: Callable[[Any], Awaitable[Any]]
) -> Any:
    """Async :func:`with_run`."""
    config = ensure_config(config)
    run = await get_async_callback_manager_for_config(config).on_chain_start(
        None, value, name=config.get("run_name") or runnable.get_name(), run_id=config.pop("run_id", None)
    )
    try:
        result = await classify(config)
        if isinstance(result, Exception):
            raise result
    except BaseException as exc:
        await run.on_chain_error(exc)
        raise
    await run.on_chain_end(result)
    return result


async def abatch_with_runs(
    runnable: Runnable,
    inputs: list[Any],
    config: RunnableConfig | list[RunnableConfig] | None,
    classify: Callable[[list[Any], list[RunnableConfig]], Awaitable[list[Any]]],
) -> list[Any]:
    """Like ``Runnable._abatch_with_config`` (a run per item, the same callbacks), with the
    per-item bookkeeping done in slices and a yield between them: done in one go for a large
    batch it would hold the event loop long enough to stall every other task."""
    configs = config if isinstance(config, list) else None
    runs: list[Any] = []
    item_configs: list[RunnableConfig] = []
    for start in range(0, len(inputs), _RUNS_PER_SLICE):
        part = range(start, min(start + _RUNS_PER_SLICE, len(inputs)))
        sliced = [ensure_config(configs[i] if configs else config) for i in part]  # type: ignore[arg-type]
        runs += await asyncio.gather(
            *(
                get_async_callback_manager_for_config(c).on_chain_start(
                    None, inputs[i], name=c.get("run_name") or runnable.get_name(), run_id=c.pop("run_id", None)
                )
                for i, c in zip(part, sliced)
            )
        )
        item_configs += sliced
        await asyncio.sleep(0)
    results = await classify(inputs, item_configs)
    for start in range(0, len(results), _RUNS_PER_SLICE):
        await asyncio.gather(
            *(
                run.on_chain_error(r) if isinstance(r, Exception) else run.on_chain_end(r)
                for run, r in zip(runs[start : start + _RUNS_PER_SLICE], results[start : start + _RUNS_PER_SLICE])
            )
        )
        await asyncio.sleep(0)
    return results


def unobserved(config: RunnableConfig | Sequence[RunnableConfig] | None) -> bool:
    """True when no callback handler would see a batch's per-item runs: none in its config(s)
    and none set up globally or by the environment (tracing, ``set_debug``). The runs are then
    skipped: opening and closing one per item costs more client CPU than the classification."""
    configs = list(config) if isinstance(config, Sequence) else [config]
    if any(c and c.get("callbacks") for c in configs):
        return False
    return not get_callback_manager_for_config(ensure_config(configs[0] if configs else None)).handlers


def max_concurrency_of(config: RunnableConfig | Sequence[RunnableConfig] | None) -> int | None:
    """The run config's ``max_concurrency`` (the first config's, for a list), if set."""
    first = config[0] if isinstance(config, Sequence) and config else config
    value = first.get("max_concurrency") if isinstance(first, Mapping) else None
    return int(value) if value else None


def raise_unless(return_exceptions: bool, results: list[Any]) -> list[Any]:
    """``results``, or the first item's error raised when errors are not to be returned."""
    if not return_exceptions:
        for result in results:
            if isinstance(result, Exception):
                raise result
    return results


def sizes_for(config: Any, batch_slice: BatchSlice | None) -> dict[str, Any]:
    """The engine's sizes for a call: requests in flight from the run config (or the slice's),
    and a slice's fixed size."""
    if batch_slice is None:
        return {"max_concurrency": max_concurrency_of(config), "batch_size": None}
    return {
        "max_concurrency": batch_slice.max_concurrency or max_concurrency_of(config),
        "batch_size": len(batch_slice.span),
    }


def slice_config(config: RunnableConfig | Sequence[RunnableConfig] | None, batch_slice: BatchSlice) -> Any:
    """A slice's own share of per-item configs (or the one config)."""
    if isinstance(config, Sequence):
        return list(config[batch_slice.span.start : batch_slice.span.stop])
    return config
