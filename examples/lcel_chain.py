"""LCEL: prompt -> classifier -> downstream step; and LLMChain with ChatQwenFast feeding it.

python examples/lcel_chain.py [--base-url http://127.0.0.1:8000/v1]
"""

from __future__ import annotations

import argparse

from _local import add_server_args, server_url
from langchain_classic.chains import LLMChain
from langchain_core.prompts import ChatPromptTemplate
from langchain_core.runnables import RunnableLambda

from langchain_qwen_fast import ChatQwenFast, Classification, QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS

ARTICLES = [
    {"title": "Late goal sends holders through", "body": "The champions scored in stoppage time."},
    {"title": "Central bank holds rates", "body": "Markets had expected a cut."},
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        chat = ChatQwenFast(base_url=url, model=args.served_model_name, max_completion_tokens=24, temperature=0)
        classifier = QwenClassifier.from_chat_model(chat, labels=AG_NEWS_LABELS)

        # Prompt -> classifier -> downstream: the prompt builds the text, the classifier labels it.
        prompt = ChatPromptTemplate.from_messages([("human", "{title}. {body}")])
        desk: RunnableLambda[Classification, str] = RunnableLambda(
            lambda c: f"send to the {c.label} desk (p={c.confidence:.2f})"
        )
        chain = prompt | classifier | desk
        for article, routed in zip(ARTICLES, chain.batch(ARTICLES)):
            print(f"LCEL      {article['title']!r}: {routed}")

        # LLMChain (langchain-classic) with the chat model; its text then goes to the classifier.
        headline = LLMChain(
            llm=chat, prompt=ChatPromptTemplate.from_messages([("human", "Write a headline about {topic}.")])
        )
        for topic in ["a cup final", "an interest-rate decision"]:
            text = headline.invoke({"topic": topic})["text"] or "(empty)"
            result: Classification = classifier.invoke(text)
            print(f"LLMChain  {topic!r}: drafted {text[:40]!r} -> {result.label}")


if __name__ == "__main__":
    main()
