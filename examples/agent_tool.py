"""The classifier as a tool: a chat model calls it, the tool labels the text, the answer goes back.

python examples/agent_tool.py [--base-url http://127.0.0.1:8000/v1]
"""

from __future__ import annotations

import argparse

from _local import add_server_args, server_url
from langchain_core.messages import HumanMessage, ToolMessage

from langchain_qwen_fast import ChatQwenFast, QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        chat = ChatQwenFast(base_url=url, model=args.served_model_name, max_completion_tokens=64, temperature=0)
        tool = QwenClassifier.from_chat_model(chat, labels=AG_NEWS_LABELS).as_tool()
        agent = chat.bind_tools([tool], tool_choice=tool.name)  # forced: the model must call it
        question = HumanMessage("Which section does this belong in: 'Holders through after late goal'?")
        reply = agent.invoke([question])
        for call in reply.tool_calls:
            print(f"model called {call['name']}({call['args']})")
            result = tool.invoke(call)  # a ToolMessage with the label (or the input's problem)
            assert isinstance(result, ToolMessage)
            print(f"tool answered: {result.content}")
        print(f"tool calls: {len(reply.tool_calls)}")
        # A real Qwen3 passes the headline; the random-weight test model may pass an empty
        # string, and the tool then answers with the input's problem instead of failing.


if __name__ == "__main__":
    main()
