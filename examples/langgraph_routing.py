"""LangGraph: a conditional edge sends each request to the node for its label.

pip install langgraph   # optional extra: pip install "langchain-qwen-fast[langgraph]"
python examples/langgraph_routing.py [--base-url http://127.0.0.1:8000/v1]
"""

from __future__ import annotations

import argparse
from typing import TypedDict

from _local import add_server_args, server_url
from langgraph.graph import END, START, StateGraph

from langchain_qwen_fast import QwenClassifier, label_edge


class Ticket(TypedDict, total=False):
    text: str
    handled_by: str


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        classifier = QwenClassifier(
            labels=["billing", "technical", "account", "other"], base_url=url, model=args.served_model_name
        )
        nodes = {"billing": "billing_team", "technical": "tech_support", "account": "account_team"}
        graph = StateGraph(Ticket)
        for node in [*nodes.values(), "triage"]:
            graph.add_node(node, lambda state, node=node: {"handled_by": node})
            graph.add_edge(node, END)
        graph.add_conditional_edges(START, label_edge(classifier, nodes, default="triage"))
        app = graph.compile()
        for text in ["I was charged twice this month", "The app crashes on start", "Change my email", ""]:
            print(f"{app.invoke({'text': text})['handled_by']:<13} <- {text!r}")


if __name__ == "__main__":
    main()
