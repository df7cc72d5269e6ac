"""The router's bookkeeping and failure rule, the tool and the LangGraph edge, over a stand-in
classifier."""

from __future__ import annotations

from typing import Any

import pytest
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_qwen_fast import (
    Classification,
    ClassifierRouter,
    InvalidInputError,
    LabelParseError,
    ServerConnectionError,
    ServerStatusError,
    classifier_tool,
    label_edge,
)
from langchain_qwen_fast.classification import text_of
from langchain_qwen_fast.routing import classifier_router

LABELS = ["World", "Sports", "Business"]


class StandIn:
    """Labels by keyword; ``outage`` fails as an unreachable server would, ``garbled`` and
    ``refused`` as an input the model or the server cannot take."""

    def classify(self, value: Any) -> Classification:
        text = text_of(value)
        if "outage" in text:
            raise ServerConnectionError("talking to the server at http://127.0.0.1:1/v1/completions failed")
        if "garbled" in text:
            raise LabelParseError("the reply names no label", reply="???")
        if "refused" in text:
            raise ServerStatusError("server answered HTTP 422", status_code=422)
        if "unsure" in text:
            return Classification(label=None, abstained=True, scores={k: 1 / 3 for k in LABELS}, scoring="head")
        label = next((k for k in LABELS if k.lower() in text.lower()), "World")
        return Classification(label=label, scores={k: float(k == label) for k in LABELS}, scoring="label_tokens")


def desk(name: str) -> RunnableLambda:
    def handle(text: str, config: RunnableConfig) -> tuple[str, str, Any, list[str]]:
        return name, text, config.get("metadata", {}).get("route_label"), config.get("tags", [])

    return RunnableLambda(handle)


def router(standin: StandIn) -> ClassifierRouter:
    return ClassifierRouter(
        classifier=RunnableLambda(standin.classify),
        routes={"Sports": desk("sports"), "Business": desk("business")},
        default=desk("general"),
    )


def test_each_input_reaches_its_labels_branch_in_order() -> None:
    texts = ["Sports final", "Business news", "World talks", "more sports", "unsure", ""]
    outputs = router(StandIn()).batch(texts)
    assert [o[0] for o in outputs] == ["sports", "business", "general", "sports", "general", "general"]
    assert [o[1] for o in outputs] == texts  # the original input, not the classification
    assert [o[2] for o in outputs] == ["Sports", "Business", "World", "Sports", None, None]
    assert "route:sports" not in outputs[0][3] and "route:Sports" in outputs[0][3]
    assert "route:default" in outputs[2][3]


async def test_async_and_invoke_agree() -> None:
    r = router(StandIn())
    texts = ["Sports final", "Business news", "World talks"]
    assert await r.abatch(texts) == r.batch(texts)
    assert await r.ainvoke("Business news") == r.invoke("Business news")


def test_failed_classification_goes_to_default_with_its_error() -> None:
    captured: list[dict[str, Any]] = []

    def record(text: str, config: RunnableConfig) -> str:
        captured.append(dict(config.get("metadata", {})))
        return "fallback"

    r = ClassifierRouter(classifier=RunnableLambda(StandIn().classify), routes={}, default=RunnableLambda(record))
    assert r.batch([""]) == ["fallback"]
    assert captured[0]["route_label"] is None and "InvalidInputError" in captured[0]["route_error"]


def test_a_branch_error_stays_with_its_item() -> None:
    def boom(text: str) -> str:
        raise RuntimeError(f"branch failed on {text}")

    r = ClassifierRouter(
        classifier=RunnableLambda(StandIn().classify), routes={"Sports": RunnableLambda(boom)}, default=desk("general")
    )
    outputs = r.batch(["Sports x", "World y"], return_exceptions=True)
    assert isinstance(outputs[0], RuntimeError) and outputs[1][0] == "general"


def test_tool_returns_the_decision_and_reports_bad_input_to_the_agent() -> None:
    tool = classifier_tool(RunnableLambda(StandIn().classify), labels=LABELS)
    assert "World, Sports, Business" in tool.description
    assert tool.invoke({"text": "Business deal"}) == {
        "label": "Business",
        "scores": {"World": 0.0, "Sports": 0.0, "Business": 1.0},
        "abstained": False,
    }
    assert "empty" in str(tool.invoke({"text": ""}))  # ToolException handled: the message comes back


def test_tool_raises_other_errors() -> None:
    def broken(value: Any) -> Classification:
        raise ConnectionError("server down")

    with pytest.raises(ConnectionError):
        classifier_tool(RunnableLambda(broken), labels=LABELS).invoke({"text": "x"})


async def test_label_edge_names_nodes() -> None:
    edge = label_edge(RunnableLambda(StandIn().classify), {"Sports": "sports_node"}, default="triage")
    assert edge.invoke({"text": "Sports today"}) == "sports_node"
    assert edge.invoke({"text": "Business"}) == "triage"
    assert edge.invoke({"text": ""}) == "triage"  # a failed classification
    assert await edge.ainvoke({"text": "sports"}) == "sports_node"


class Recording(RunnableLambda):
    """A classifier runnable that records each batch it is handed."""

    def __init__(self) -> None:
        super().__init__(StandIn().classify)
        self.batches: list[int] = []

    def batch(self, inputs: list[Any], *args: Any, **kwargs: Any) -> list[Any]:  # type: ignore[override]
        self.batches.append(len(inputs))
        return super().batch(inputs, *args, **kwargs)


def test_router_classifies_the_whole_batch_at_once_and_runs_each_branch_once() -> None:
    classifier = Recording()
    sports = Recording()
    r = ClassifierRouter(classifier=classifier, routes={"Sports": sports}, default=desk("general"))
    r.batch(["Sports a", "World b", "Sports c", "Sports d"])
    assert classifier.batches == [4] and sports.batches == [3]


def test_invalid_input_error_is_a_value_error() -> None:
    assert issubclass(InvalidInputError, ValueError)


def test_multi_label_router_sends_one_input_to_every_chosen_labels_branch() -> None:
    def classify(value: Any) -> Classification:
        text = text_of(value)
        chosen = [k for k in LABELS if k.lower() in text.lower()]
        scores = {k: float(k in chosen) for k in LABELS}
        label = chosen[0] if chosen else None
        return Classification(label=label, labels=chosen, scores=scores, scoring="yes_no", multi_label=True)

    r = ClassifierRouter(
        classifier=RunnableLambda(classify),
        routes={"Sports": desk("sports"), "Business": desk("business")},
        default=desk("general"),
    )
    both, none, one = r.batch(["Sports and Business", "weather", "sports only"])
    assert set(both) == {"Sports", "Business"} and both["Sports"][0] == "sports" and both["Business"][0] == "business"
    assert list(none) == ["default"] and none["default"][0] == "general"
    assert list(one) == ["Sports"]


def recording_router(*, outages_to_default: bool = False) -> tuple[ClassifierRouter, list[tuple[Any, dict[str, Any]]]]:
    """A router whose branches record what they are handed: (input, metadata) per run."""
    handed: list[tuple[Any, dict[str, Any]]] = []

    def record(name: str) -> RunnableLambda:
        def run(value: Any, config: RunnableConfig) -> str:
            handed.append((value, dict(config.get("metadata", {}))))
            return name

        return RunnableLambda(run)

    router = classifier_router(
        RunnableLambda(StandIn().classify),
        LABELS,
        {"Sports": record("sports")},
        record("default"),
        outages_to_default=outages_to_default,
    )
    return router, handed


@pytest.mark.parametrize("text", ["", "garbled reply", "refused text"])
def test_an_input_error_goes_to_default_with_its_reason(text: str) -> None:
    router, handed = recording_router()
    assert router.invoke(text) == "default"
    assert handed[0][0] == text and handed[0][1]["route_label"] is None and handed[0][1]["route_error"]


def test_an_outage_is_raised_not_routed() -> None:
    router, handed = recording_router()
    with pytest.raises(ServerConnectionError, match=r"127\.0\.0\.1:1"):
        router.invoke("outage")
    with pytest.raises(ServerConnectionError):
        router.batch(["Sports a", "outage", "World b"])
    assert handed == []  # the batch failed before any branch ran


async def test_an_outage_is_raised_by_the_async_router_too() -> None:
    router, handed = recording_router()
    with pytest.raises(ServerConnectionError):
        await router.ainvoke("outage")
    with pytest.raises(ServerConnectionError):
        await router.abatch(["Sports a", "outage"])
    assert handed == []


async def test_return_exceptions_keeps_an_outage_in_its_place() -> None:
    router, _ = recording_router()
    outputs = router.batch(["Sports a", "outage", "", "World b"], return_exceptions=True)
    assert outputs[0] == "sports" and outputs[2:] == ["default", "default"]
    assert isinstance(outputs[1], ServerConnectionError)
    aoutputs = await router.abatch(["Sports a", "outage", "", "World b"], return_exceptions=True)
    assert aoutputs[0] == "sports" and isinstance(aoutputs[1], ServerConnectionError)


def test_outages_to_default_routes_an_outage_to_default_with_its_reason() -> None:
    router, handed = recording_router(outages_to_default=True)
    assert router.batch(["outage", "Sports a"]) == ["default", "sports"]
    value, metadata = handed[0]
    assert value == "outage" and metadata["route_label"] is None
    assert metadata["route_error"].startswith("ServerConnectionError: ") and "127.0.0.1:1" in metadata["route_error"]


def test_the_branches_get_the_input_as_given() -> None:
    router, handed = recording_router()
    routed = {"text": "Sports final", "id": 7}
    unreadable = {"title": "Sports final", "id": 8}  # no "text": the input's own error
    assert router.batch([routed, unreadable]) == ["sports", "default"]
    assert handed[0][0] == routed and handed[1][0] == unreadable
    assert "'text'" in handed[1][1]["route_error"]


async def test_label_edge_follows_the_routers_rule() -> None:
    edge = label_edge(RunnableLambda(StandIn().classify), {"Sports": "sports_node"}, default="triage")
    assert edge.invoke({"text": "garbled"}) == "triage"
    with pytest.raises(ServerConnectionError):
        edge.invoke({"text": "outage"})
    with pytest.raises(ServerConnectionError):
        await edge.ainvoke({"text": "outage"})
    lenient = label_edge(
        RunnableLambda(StandIn().classify), {"Sports": "sports_node"}, default="triage", outages_to_default=True
    )
    assert lenient.invoke({"text": "outage"}) == "triage"
    assert await lenient.ainvoke({"text": "outage"}) == "triage"
