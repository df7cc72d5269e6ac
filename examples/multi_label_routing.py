"""Multi-label routing: one text goes to the branch of every label that applies.

python examples/multi_label_routing.py                 # starts a local server itself
python examples/multi_label_routing.py --base-url http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse

from _local import add_server_args, server_url
from langchain_core.runnables import RunnableLambda

from langchain_qwen_fast import QwenClassifier

TICKETS = [
    "I was charged twice and now I cannot log in to my account",
    "How do I change the address on my invoices?",
    "The app crashes when I open the settings page",
]


def team(name: str) -> RunnableLambda:
    return RunnableLambda(lambda ticket: f"{name} team takes it")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        classifier = QwenClassifier(
            labels=["billing", "login", "bug"],
            label_descriptions={"billing": "charges, refunds, invoices", "login": "access to the account"},
            multi_label=True,
            threshold=0.5,
            base_url=url,
            model=args.served_model_name,
        )
        router = classifier.as_router(
            {"billing": team("billing"), "login": team("access"), "bug": team("engineering")},
            default=team("triage"),
        )
        # One grouped classification (a yes/no step per label and ticket), then each branch once.
        for ticket, result, routed in zip(TICKETS, classifier.batch(TICKETS), router.batch(TICKETS)):
            scores = ", ".join(f"{label} {p:.2f}" for label, p in (result.scores or {}).items())
            print(f"{ticket!r}\n  scores: {scores}\n  routes: {routed}")


if __name__ == "__main__":
    main()
