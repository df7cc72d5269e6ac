"""Routing with a classifier: a router runnable, a tool for agents, a LangGraph edge."""

from __future__ import annotations

import functools
from collections.abc import Mapping, Sequence
from typing import Any

from langchain_core.callbacks import AsyncCallbackManagerForChainRun, CallbackManagerForChainRun
from langchain_core.runnables import Runnable, RunnableConfig, RunnableLambda, RunnableSerializable
from langchain_core.runnables.base import coerce_to_runnable
from langchain_core.runnables.config import patch_config
from langchain_core.tools import BaseTool, StructuredTool, ToolException
from pydantic import ConfigDict

from langchain_qwen_fast.classification import Classification, ClassifierInput
from langchain_qwen_fast.errors import ConfigurationError, InvalidInputError, is_input_error

#: Anything that classifies like :class:`~langchain_qwen_fast.QwenClassifier`.
Classifier = Runnable[ClassifierInput, Classification]

#: A batch's config: one for every input, or one per input.
BatchConfig = RunnableConfig | list[RunnableConfig] | None

#: Metadata keys under which a branch (and every callback/trace) sees the routing decision.
ROUTE_LABEL = "route_label"
ROUTE_SCORES = "route_scores"
ROUTE_ERROR = "route_error"


def _fails_to_default(error: Exception, outages_to_default: bool) -> bool:
    """Whether an input whose classification failed with ``error`` goes to the default branch
    (its own failure, by :func:`~langchain_qwen_fast.errors.blame`; or any failure under
    ``outages_to_default``) rather than raising ``error``: an outage routed as if the input
    had no label would hide it."""
    return outages_to_default or is_input_error(error)


class ClassifierRouter(RunnableSerializable[Any, Any]):
    """Classify each input, then hand the *original* input to the branch for its label.

    The decision reaches the branch as run metadata (``route_label``, ``route_scores``, and
    ``route_error`` when classification failed) and as a ``route:<label>`` tag, so it shows in
    callbacks and traces and a branch can read it from its ``config``. Inputs whose label has
    no branch, that abstained, or whose classification failed for the input's own sake (an
    :class:`~langchain_qwen_fast.errors.InvalidInputError`, a reply naming no label, a request
    the server refused for its content) go to ``default``, as given; nothing is dropped.

    A failure of the servers or of the way to them (a
    :class:`~langchain_qwen_fast.errors.TransportError`, ...) is raised: ``invoke`` raises it,
    and ``batch`` raises it before any branch runs, or returns it in the input's place under
    ``return_exceptions=True``. With ``outages_to_default`` such inputs go to ``default`` too,
    the error in ``route_error``.

    ``batch``/``abatch`` classify the whole batch in grouped requests first, then run each
    branch once over its share, keeping input order.

    Under a multi-label classifier an input goes to the branch of every chosen label, and its
    output is a dict of each branch's output by label (``{"default": ...}`` when no chosen label
    has a branch).
    """

    model_config = ConfigDict(arbitrary_types_allowed=True)

    classifier: Classifier
    """The classifier that decides (a :class:`~langchain_qwen_fast.QwenClassifier`)."""
    routes: dict[str, Runnable]
    """Branch per label."""
    default: Runnable
    """Branch for unknown, abstained and failed classifications."""
    outages_to_default: bool = False
    """Send inputs whose classification failed for the servers' sake to ``default`` too,
    instead of raising the error."""

    def _raises(self, result: Any) -> bool:
        """Whether a classification's result is an error the router raises."""
        return isinstance(result, Exception) and not _fails_to_default(result, self.outages_to_default)

    def _decide(self, result: Any) -> list[tuple[str, Runnable, dict[str, Any]]]:
        """(route name, branch, metadata) for each branch the input goes to (none when the
        result is an error to raise)."""
        if self._raises(result):
            return []
        if isinstance(result, Exception):
            meta = {ROUTE_LABEL: None, ROUTE_ERROR: f"{type(result).__name__}: {result}"}
            return [("default", self.default, meta)]
        if not isinstance(result, Classification):
            raise ConfigurationError(f"the classifier returned {type(result).__name__}, not a Classification")
        chosen = result.labels if result.multi_label else [result.label] if result.label is not None else []
        routed = [
            (label, self.routes[label], {ROUTE_LABEL: label, ROUTE_SCORES: result.scores})
            for label in chosen
            if label in self.routes
        ]
        return routed or [("default", self.default, {ROUTE_LABEL: result.label, ROUTE_SCORES: result.scores})]

    def _plan(
        self,
        inputs: list[Any],
        results: list[Any],
        run_managers: Sequence[CallbackManagerForChainRun | AsyncCallbackManagerForChainRun],
        configs: Sequence[RunnableConfig],
    ) -> dict[int, tuple[Runnable, list[tuple[int, str]], list[RunnableConfig]]]:
        """Group (input position, route name) pairs by branch, each with the config its run gets."""
        plan: dict[int, tuple[Runnable, list[tuple[int, str]], list[RunnableConfig]]] = {}
        for i, result in enumerate(results):
            for name, branch, meta in self._decide(result):
                config = patch_config(configs[i], callbacks=run_managers[i].get_child(f"route:{meta[ROUTE_LABEL]}"))
                config["metadata"] = {**config.get("metadata", {}), **meta}
                config["tags"] = [*config.get("tags", []), f"route:{name}"]
                entry = plan.setdefault(id(branch), (branch, [], []))
                entry[1].append((i, name))
                entry[2].append(config)
        return plan

    def _raise_outage(self, results: list[Any], return_exceptions: bool) -> None:
        """Unless the batch returns errors in place, raise the first error the router raises
        now, before any branch runs: the batch fails, and the branches' work would be lost."""
        raised = next((r for r in results if self._raises(r)), None)
        if raised is not None and not return_exceptions:
            raise raised

    def _collect(self, results: list[Any], answered: list[tuple[int, str, Any]]) -> list[Any]:
        """Each input's output: its branch's, or by route name under multi-label, or the error
        raised in its place."""
        outputs: list[Any] = [r if self._raises(r) else None for r in results]
        for i, name, answer in answered:
            if isinstance(results[i], Classification) and results[i].multi_label:
                outputs[i] = {**(outputs[i] or {}), name: answer}
            else:
                outputs[i] = answer
        return outputs

    def _route(
        self,
        inputs: list[Any],
        run_manager: list[CallbackManagerForChainRun],
        config: list[RunnableConfig],
        return_exceptions: bool = False,
    ) -> list[Any]:
        classify_configs = [patch_config(c, callbacks=rm.get_child("classify")) for c, rm in zip(config, run_manager)]
        results = self.classifier.batch(inputs, classify_configs, return_exceptions=True)
        self._raise_outage(results, return_exceptions)
        answered = []
        for branch, pairs, configs in self._plan(inputs, results, run_manager, config).values():
            answers = branch.batch([inputs[i] for i, _ in pairs], configs, return_exceptions=True)
            answered += [(i, name, answer) for (i, name), answer in zip(pairs, answers)]
        return self._collect(results, answered)

    async def _aroute(
        self,
        inputs: list[Any],
        run_manager: list[AsyncCallbackManagerForChainRun],
        config: list[RunnableConfig],
        return_exceptions: bool = False,
    ) -> list[Any]:
        classify_configs = [patch_config(c, callbacks=rm.get_child("classify")) for c, rm in zip(config, run_manager)]
        results = await self.classifier.abatch(inputs, classify_configs, return_exceptions=True)
        self._raise_outage(results, return_exceptions)
        answered = []
        for branch, pairs, configs in self._plan(inputs, results, run_manager, config).values():
            answers = await branch.abatch([inputs[i] for i, _ in pairs], configs, return_exceptions=True)
            answered += [(i, name, answer) for (i, name), answer in zip(pairs, answers)]
        return self._collect(results, answered)

    def invoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Route one input; raises its branch's error, or an outage (see the class)."""
        return self.batch([input], config)[0]

    async def ainvoke(self, input: Any, config: RunnableConfig | None = None, **kwargs: Any) -> Any:
        """Async :meth:`invoke`."""
        return (await self.abatch([input], config))[0]

    def batch(
        self, inputs: list[Any], config: BatchConfig = None, *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        """Classify every input in grouped requests, then run each branch once over its share."""
        route = functools.partial(self._route, return_exceptions=return_exceptions)
        return self._batch_with_config(route, inputs, config, return_exceptions=return_exceptions)

    async def abatch(
        self, inputs: list[Any], config: BatchConfig = None, *, return_exceptions: bool = False, **kwargs: Any
    ) -> list[Any]:
        """Async :meth:`batch`."""
        route = functools.partial(self._aroute, return_exceptions=return_exceptions)
        return await self._abatch_with_config(route, inputs, config, return_exceptions=return_exceptions)


class _AgentInputError(ToolException, InvalidInputError):
    """A bad input, answered to the agent: the tool turns a ``ToolException`` into its reply."""


def classifier_router(
    classifier: Any,
    labels: Sequence[str],
    routes: Mapping[str, Any],
    default: Any,
    *,
    outages_to_default: bool = False,
) -> ClassifierRouter:
    """A :class:`ClassifierRouter` over ``classifier`` (whose labels are ``labels``), every
    route a label of it; callables are wrapped as runnables. ``outages_to_default``: see
    :attr:`ClassifierRouter.outages_to_default`."""
    unknown = sorted(set(routes) - set(labels))
    if unknown:
        raise ConfigurationError(f"routes name labels the classifier does not have: {unknown}")
    return ClassifierRouter(
        classifier=classifier,
        routes={label: coerce_to_runnable(branch) for label, branch in routes.items()},
        default=coerce_to_runnable(default),
        outages_to_default=outages_to_default,
    )


def classifier_tool(
    classifier: Classifier,
    *,
    labels: Sequence[str],
    name: str = "classify_text",
    description: str | None = None,
) -> BaseTool:
    """A tool that labels a text with one of ``labels``; returns ``{"label", "scores", "abstained"}``.

    Bad input (e.g. an empty text) comes back to the agent as the error's message rather
    than raising, so the agent can correct itself; server errors still raise.
    """

    def to_dict(result: Classification) -> dict[str, Any]:
        return {"label": result.label, "scores": result.scores, "abstained": result.abstained}

    def classify(text: str) -> dict[str, Any]:
        try:
            return to_dict(classifier.invoke(text))
        except InvalidInputError as exc:
            raise _AgentInputError(str(exc)) from exc

    async def aclassify(text: str) -> dict[str, Any]:
        try:
            return to_dict(await classifier.ainvoke(text))
        except InvalidInputError as exc:
            raise _AgentInputError(str(exc)) from exc

    return StructuredTool.from_function(
        func=classify,
        coroutine=aclassify,
        name=name,
        description=description or f"Label a text as one of: {', '.join(labels)}. Give the text to label.",
        handle_tool_error=True,
        handle_validation_error=True,
    )


def label_edge(
    classifier: Classifier,
    routes: Mapping[str, str],
    *,
    default: str,
    text_key: str = "text",
    outages_to_default: bool = False,
) -> RunnableLambda:
    """A LangGraph conditional edge: ``state[text_key]`` -> the node named for its label.

    Use as ``graph.add_conditional_edges("start", label_edge(clf, {...}, default="triage"))``.
    Unknown and abstained classifications, and those that failed for the input's own sake, go
    to ``default``; a failure of the servers is raised (the graph run fails with it), or goes
    to ``default`` too under ``outages_to_default``, as in :class:`ClassifierRouter`. Works in
    sync and async graphs (LangGraph accepts a runnable as the path).
    """

    def node_for(result: Classification | Exception) -> str:
        if isinstance(result, Exception):
            if _fails_to_default(result, outages_to_default):
                return default
            raise result
        if result.label is None:
            return default
        return routes.get(result.label, default)

    def path(state: Mapping[str, Any]) -> str:
        return node_for(classifier.batch([state[text_key]], return_exceptions=True)[0])

    async def apath(state: Mapping[str, Any]) -> str:
        return node_for((await classifier.abatch([state[text_key]], return_exceptions=True))[0])

    return RunnableLambda(path, afunc=apath, name="label_edge")
