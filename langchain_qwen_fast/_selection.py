"""Few-shot examples chosen per input by a LangChain example selector, rendered for the
engine (which takes each input's examples as text, or the error choosing them raised)."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Mapping, Sequence
from typing import Any

from langchain_core.example_selectors import BaseExampleSelector

from langchain_qwen_fast._core.classification import text_of
from langchain_qwen_fast._core.prompting import ClassifierPlan, check_example
from langchain_qwen_fast._core.settings import Node
from langchain_qwen_fast.errors import InvalidInputError, QwenFastError

Plans = Mapping[Node, ClassifierPlan]


class ExampleSelection:
    """Each input's examples from ``selector``, rendered in the top level's label set."""

    def __init__(self, selector: BaseExampleSelector) -> None:
        self.selector = selector

    def select(self, inputs: Sequence[Any], plans: Callable[[], Plans]) -> list[str | Exception] | Exception:
        """Each input's rendered examples, or the error selecting them raised (that input's
        alone); the set-up's error, where it failed, for all."""
        try:
            top = plans()[()]
        except Exception as exc:
            return exc
        selected: list[str | Exception] = []
        for value in inputs:
            text = _selectable_text(value)
            try:
                selected.append("" if text is None else _render(top, self.selector.select_examples({"text": text})))
            except Exception as exc:
                selected.append(_selector_failed(exc))
        return selected

    async def aselect(
        self, inputs: Sequence[Any], plans: Callable[[], Awaitable[Plans]]
    ) -> list[str | Exception] | Exception:
        """Async :meth:`select`."""
        try:
            top = (await plans())[()]
        except Exception as exc:
            return exc

        async def one(value: Any) -> str | Exception:
            text = _selectable_text(value)
            try:
                return "" if text is None else _render(top, await self.selector.aselect_examples({"text": text}))
            except Exception as exc:
                return _selector_failed(exc)

        return list(await asyncio.gather(*(one(value) for value in inputs)))


def _render(plan: ClassifierPlan, picked: Sequence[Any]) -> str:
    label_set = plan.label_set
    return label_set.render_examples([check_example(e, label_set.labels, label_set.multi_label) for e in picked])


def _selectable_text(value: Any) -> str | None:
    """An input's text for the example selector; None for an invalid input (its error comes
    from the classification)."""
    try:
        return text_of(value)
    except InvalidInputError:
        return None


def _selector_failed(exc: Exception) -> QwenFastError:
    """The error an input gets when the example selector failed on it."""
    return QwenFastError(f"the example selector failed: {type(exc).__name__}: {exc}")
