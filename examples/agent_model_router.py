"""An agent whose model is chosen per run by Qwen: LangChain's ModelRouterMiddleware asks a
QwenDecisionModel a Choice about the task, and the agent runs on the chosen chat model.

python examples/agent_model_router.py [--base-url http://127.0.0.1:8000/v1]
"""

from __future__ import annotations

import argparse

from _local import add_server_args, server_url
from langchain.agents import create_agent
from langchain.agents.middleware import ModelChoice, ModelRouterMiddleware
from langchain_core.messages import HumanMessage

from langchain_qwen_fast import ChatQwenFast, QwenDecisionModel

TASKS = [
    "What is 2 + 2?",
    "Write a proof that there are infinitely many primes, then discuss three generalisations.",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        # Two chat models; in production, a small fast one and a large one on their own servers.
        quick = ChatQwenFast(base_url=url, model=args.served_model_name, max_completion_tokens=8, temperature=0)
        thorough = ChatQwenFast(base_url=url, model=args.served_model_name, max_completion_tokens=48, temperature=0)
        router = ModelRouterMiddleware(
            choices={
                "quick": ModelChoice(model=quick, criteria="Short factual questions and simple requests."),
                "thorough": ModelChoice(model=thorough, criteria="Proofs, analysis and long answers."),
            },
            instructions="Choose the least costly model suited to the task.",
            classifier=QwenDecisionModel(base_url=url, model=args.served_model_name),
        )
        agent = create_agent(quick, middleware=[router])
        for task in TASKS:
            state = agent.invoke({"messages": [HumanMessage(task)]})
            route = state["model_route"]  # the whole ChoiceAnswer, kept in the agent's state
            reply = state["messages"][-1]
            tokens = (reply.usage_metadata or {}).get("output_tokens", 0)
            shown = ", ".join(f"{label} {p:.2f}" for label, p in route.probabilities.items())
            print(f"routed to {route.choice:<8} (confidence {route.confidence:.2f}; {shown}): {task[:40]!r}")
            print(f"  answered in {tokens} tokens by the {route.choice} model")
        print(f"runs routed: {len(TASKS)}")


if __name__ == "__main__":
    main()
