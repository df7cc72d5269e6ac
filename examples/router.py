"""A router with three branches and a default: each headline goes to the desk for its label.

python examples/router.py [--base-url http://127.0.0.1:8000/v1]
"""

from __future__ import annotations

import argparse

from _local import add_server_args, server_url
from langchain_core.runnables import RunnableConfig, RunnableLambda

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS

HEADLINES = [
    "Champions League: holders through after late goal",
    "Oil giant reports record profit",
    "UN council meets over border clashes",
    "Rover finds signs of water on Mars",
    "",  # fails classification: goes to the default branch, not dropped
]


def desk(name: str) -> RunnableLambda:
    def handle(text: str, config: RunnableConfig) -> str:
        meta = config["metadata"]
        why = meta.get("route_label") or meta.get("route_error", "")
        return f"{name:<14} <- {text!r} ({why})"

    return RunnableLambda(handle)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=url, model=args.served_model_name)
        router = classifier.as_router(
            {"Sports": desk("sports desk"), "Business": desk("business desk"), "Sci/Tech": desk("science desk")},
            default=desk("general desk"),
        )
        for line in router.batch(HEADLINES):  # one grouped classification, then each branch once
            print(line)


if __name__ == "__main__":
    main()
