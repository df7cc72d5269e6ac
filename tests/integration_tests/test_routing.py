"""Router, tool and LangGraph edge against the real vLLM server."""

from __future__ import annotations

import re
from typing import Any, TypedDict

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_qwen_fast import QwenClassifier, ServerConnectionError, label_edge
from tests.integration_tests.conftest import NEWS_LABELS
from tests.support.proxy import FaultProxy


@pytest.fixture
def classifier(proxy: FaultProxy) -> QwenClassifier:
    """A classifier whose answers are steered: text ``... #i`` gets label ``NEWS_LABELS[i % 4]``.

    Random weights give every text the same top label, so to see inputs reach different
    branches the proxy rewrites which label token the real server's reply carries (the
    request itself is the real one). Texts without ``#i`` keep the server's own answer.
    """
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=proxy.base_url)
    classifier.invoke("warm up")  # learn the label tokens
    ids = classifier.prepare().answer_token_ids

    def steer(body: Any, reply: dict[str, Any]) -> dict[str, Any]:
        if not isinstance(body, dict) or not isinstance(body.get("prompt"), list):
            return reply
        for choice in reply["choices"]:
            found = re.search(r"#(\d+)<\|im_end\|>", body["prompt"][choice["index"]])
            if found:
                want = ids[int(found.group(1)) % len(ids)]
                choice["logprobs"]["tokens"] = [f"token_id:{want}"]
                choice["logprobs"]["token_logprobs"] = [-0.1]
                choice["logprobs"]["top_logprobs"] = [{f"token_id:{t}": -0.1 if t == want else -3.0 for t in ids}]
        return reply

    proxy.rewrite_all = steer
    return classifier


def steered_label(i: int) -> str:
    return NEWS_LABELS[i % len(NEWS_LABELS)]


def branch(name: str) -> RunnableLambda:
    """A branch that reports its name, its input and the label it was handed in metadata."""

    def run(x: Any, config: RunnableConfig) -> tuple[str, Any, Any]:
        return (name, x, config["metadata"].get("route_label"))

    return RunnableLambda(run)


def texts(news_texts: list[str], n: int = 100) -> list[str]:
    return [f"{news_texts[i % len(news_texts)]} #{i}" for i in range(n)]


def test_router_sends_each_input_to_its_labels_branch(classifier: QwenClassifier, news_texts: list[str]) -> None:
    inputs = texts(news_texts)
    labels = [r.label for r in classifier.batch(inputs)]
    assert labels == [steered_label(i) for i in range(len(inputs))]
    router = classifier.as_router({label: branch(label) for label in NEWS_LABELS}, default=branch("default"))
    for i, (name, passed, meta_label) in enumerate(router.batch(inputs)):
        assert name == labels[i] == meta_label
        assert passed == inputs[i]  # the original input, unchanged
    assert router.invoke(inputs[7]) == (labels[7], inputs[7], labels[7])


async def test_router_abatch_and_ainvoke_keep_order(classifier: QwenClassifier, news_texts: list[str]) -> None:
    inputs = texts(news_texts, 80)
    labels = [r.label for r in await classifier.abatch(inputs)]
    router = classifier.as_router({label: branch(label) for label in NEWS_LABELS}, default=branch("default"))
    assert [name for name, _, _ in await router.abatch(inputs)] == labels
    assert (await router.ainvoke(inputs[3]))[0] == labels[3]


def test_unrouted_failed_and_abstained_go_to_default(classifier: QwenClassifier, news_texts: list[str]) -> None:
    inputs = texts(news_texts, 30)
    labels = [r.label for r in classifier.batch(inputs)]
    routed = labels[0]  # one label gets a branch, the others do not
    router = classifier.as_router({routed: branch(routed)}, default=branch("default"))
    mixed = [*inputs[:10], "", None, *inputs[10:20]]
    out = router.batch(mixed)
    expected = [routed if label == routed else "default" for label in labels[:10]]
    expected += ["default", "default"]
    expected += [routed if label == routed else "default" for label in labels[10:20]]
    assert [name for name, _, _ in out] == expected
    assert out[10][1] == "" and out[11][1] is None  # failed items still reach default, as given

    abstaining = QwenClassifier(labels=NEWS_LABELS, base_url=classifier.base_url, abstain_below=0.9)
    router = abstaining.as_router({label: branch(label) for label in NEWS_LABELS}, default=branch("default"))
    assert {name for name, _, _ in router.batch(inputs[:10])} == {"default"}


def test_an_outage_is_raised_and_goes_to_default_only_when_asked(server_url: str, news_texts: list[str]) -> None:
    routes = {label: branch(label) for label in NEWS_LABELS}
    with FaultProxy(server_url.removesuffix("/v1")) as proxy:
        classifier = QwenClassifier(labels=NEWS_LABELS, base_url=proxy.base_url, max_retries=1)
        router = classifier.as_router(routes, default=branch("default"))
        lenient = classifier.as_router(routes, default=branch("default"), outages_to_default=True)
        assert router.invoke(news_texts[0])[0] in NEWS_LABELS
    # The server at the classifier's URL has stopped: its port refuses connections.
    with pytest.raises(ServerConnectionError):
        router.invoke(news_texts[1])
    with pytest.raises(ServerConnectionError):
        router.batch(news_texts[1:6])
    outage, bad = router.batch([news_texts[1], ""], return_exceptions=True)
    assert isinstance(outage, ServerConnectionError)
    assert bad == ("default", "", None)  # the input's own error still routes
    assert lenient.invoke(news_texts[1]) == ("default", news_texts[1], None)
    with pytest.raises(ServerConnectionError):
        label_edge(classifier, {"World": "world_desk"}, default="triage").invoke({"text": news_texts[1]})
    never_set_up = QwenClassifier(labels=NEWS_LABELS, base_url=proxy.base_url, max_retries=0)
    with pytest.raises(ServerConnectionError):
        never_set_up.as_router(routes, default=branch("default")).invoke(news_texts[1])


def test_router_classifies_in_grouped_requests(proxy: FaultProxy, news_texts: list[str]) -> None:
    classifier = QwenClassifier(labels=NEWS_LABELS, base_url=proxy.base_url, batch_size=50)
    classifier.invoke("warm up")
    router = classifier.as_router({label: branch(label) for label in NEWS_LABELS}, default=branch("default"))
    assert len(router.batch(texts(news_texts, 100))) == 100
    grouped = [c for c in proxy.calls("/v1/completions") if len(c.body["prompt"]) > 1]
    assert [len(c.body["prompt"]) for c in grouped] == [50, 50]  # not 100 requests


def test_decision_is_visible_to_callbacks(classifier: QwenClassifier) -> None:
    class Recorder(BaseCallbackHandler):
        def __init__(self) -> None:
            self.starts: list[tuple[list[str], dict[str, Any]]] = []

        def on_chain_start(self, serialized: Any, inputs: Any, **kwargs: Any) -> None:
            self.starts.append((kwargs.get("tags") or [], kwargs.get("metadata") or {}))

    label = classifier.invoke("Rates rise").label
    recorder = Recorder()
    router = classifier.as_router({label: branch(label)}, default=branch("default"))
    router.invoke("Rates rise", config={"callbacks": [recorder]})
    branch_runs = [(tags, meta) for tags, meta in recorder.starts if f"route:{label}" in tags]
    assert branch_runs and branch_runs[0][1]["route_label"] == label
    assert set(branch_runs[0][1]["route_scores"]) == set(NEWS_LABELS)


def test_router_rejects_unknown_route_labels(classifier: QwenClassifier) -> None:
    with pytest.raises(ValueError, match="Politics"):
        classifier.as_router({"Politics": branch("p")}, default=branch("d"))


def test_classifier_as_tool(classifier: QwenClassifier) -> None:
    tool = classifier.as_tool()
    assert tool.name == "classify_text" and "Sci/Tech" in tool.description
    assert set(tool.args) == {"text"}
    answer = tool.invoke({"text": "Rates rise"})
    assert answer["label"] in NEWS_LABELS and answer["abstained"] is False
    assert tool.invoke({"text": "   "}) == "text is empty or whitespace only"  # told, not raised


class State(TypedDict, total=False):
    text: str
    node: str


def build_graph(classifier: QwenClassifier) -> Any:
    from langgraph.graph import END, START, StateGraph

    graph = StateGraph(State)
    nodes = {"World": "world_desk", "Sports": "sports_desk", "Business": "business_desk"}
    for node in [*nodes.values(), "triage"]:
        graph.add_node(node, lambda state, node=node: {"node": node})
        graph.add_edge(node, END)
    graph.add_conditional_edges(START, label_edge(classifier, nodes, default="triage"))
    return graph.compile(), nodes


async def test_langgraph_conditional_edge(classifier: QwenClassifier, news_texts: list[str]) -> None:
    app, nodes = build_graph(classifier)
    for text in texts(news_texts, 12):
        label = classifier.invoke(text).label
        want = nodes.get(label, "triage")
        assert app.invoke({"text": text})["node"] == want
        assert (await app.ainvoke({"text": text}))["node"] == want
    assert app.invoke({"text": ""})["node"] == "triage"  # failed classification -> default
