"""The test model's chat template renders exactly as Qwen3's does.

Each expected string is written out from Qwen3's rules, not produced by the template under
test: ChatML turns; an empty think block after the generation prompt only for
``enable_thinking=False``; an assistant turn's reasoning (``reasoning_content``, or the part of
the content before ``</think>``) kept only for turns after the last user query; tool calls with
dict or string arguments; consecutive tool results in one user turn; tools in the system turn.
"""

from __future__ import annotations

import json
from typing import Any

import pytest
from transformers.utils.chat_template_utils import render_jinja_template

from langchain_qwen_fast.testing.tiny_model import QWEN3_CHAT_TEMPLATE

U, A = "<|im_start|>user\n", "<|im_start|>assistant\n"
END = "<|im_end|>\n"


def render(messages: list[dict[str, Any]], tools: list[dict[str, Any]] | None = None, **kwargs: Any) -> str:
    rendered, _ = render_jinja_template(
        conversations=[messages], tools=tools, chat_template=QWEN3_CHAT_TEMPLATE, **kwargs
    )
    return rendered[0]


def call(name: str, arguments: Any) -> dict[str, Any]:
    return {"type": "function", "function": {"name": name, "arguments": arguments}}


@pytest.mark.parametrize(
    ("kwargs", "tail"),
    [({}, ""), ({"enable_thinking": True}, ""), ({"enable_thinking": False}, "<think>\n\n</think>\n\n")],
)
def test_generation_prompt_and_enable_thinking(kwargs: dict[str, Any], tail: str) -> None:
    messages = [{"role": "system", "content": "Be brief."}, {"role": "user", "content": "hi"}]
    assert render(messages, add_generation_prompt=True, **kwargs) == (
        f"<|im_start|>system\nBe brief.{END}{U}hi{END}{A}{tail}"
    )


def test_no_generation_prompt() -> None:
    assert render([{"role": "user", "content": "hi"}]) == f"{U}hi{END}"


def test_reasoning_after_the_last_query_is_kept_from_reasoning_content() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "answer", "reasoning_content": "\nthought\n"},
    ]
    assert render(messages) == f"{U}q{END}{A}<think>\nthought\n</think>\n\nanswer{END}"


def test_reasoning_is_split_out_of_the_content_at_think_close() -> None:
    messages = [
        {"role": "user", "content": "q"},
        {"role": "assistant", "content": "<think>\nthought\n</think>\n\nanswer"},
    ]
    assert render(messages) == f"{U}q{END}{A}<think>\nthought\n</think>\n\nanswer{END}"


def test_reasoning_before_the_last_query_is_dropped() -> None:
    messages = [
        {"role": "user", "content": "q1"},
        {"role": "assistant", "content": "<think>old thought</think>\n\nfirst answer"},
        {"role": "user", "content": "q2"},
    ]
    assert render(messages, add_generation_prompt=True) == f"{U}q1{END}{A}first answer{END}{U}q2{END}{A}"


def test_last_assistant_turn_without_reasoning_gets_an_empty_think_block() -> None:
    messages = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "answer"}]
    assert render(messages) == f"{U}q{END}{A}<think>\n\n</think>\n\nanswer{END}"


def test_tool_calls_with_dict_and_string_arguments() -> None:
    messages = [
        {"role": "user", "content": "weather?"},
        {
            "role": "assistant",
            "content": "Checking.",
            "tool_calls": [call("lookup", {"city": "Oslo", "days": 2}), call("clock", '{"tz": "UTC"}')],
        },
        {"role": "user", "content": "thanks"},
    ]
    assert render(messages) == (
        f"{U}weather?{END}{A}Checking.\n"
        '<tool_call>\n{"name": "lookup", "arguments": {"city": "Oslo", "days": 2}}\n</tool_call>\n'
        '<tool_call>\n{"name": "clock", "arguments": {"tz": "UTC"}}\n</tool_call>'
        f"{END}{U}thanks{END}"
    )


def test_consecutive_tool_results_share_one_user_turn_and_keep_reasoning() -> None:
    messages = [
        {"role": "user", "content": "plan a trip"},
        {"role": "assistant", "content": "", "reasoning_content": "need data", "tool_calls": [call("a", {})]},
        {"role": "tool", "content": "r1"},
        {"role": "tool", "content": "r2"},
    ]
    assert render(messages, add_generation_prompt=True, enable_thinking=False) == (
        f"{U}plan a trip{END}"
        f'{A}<think>\nneed data\n</think>\n\n<tool_call>\n{{"name": "a", "arguments": {{}}}}\n</tool_call>{END}'
        f"{U}<tool_response>\nr1\n</tool_response>\n<tool_response>\nr2\n</tool_response>{END}"
        f"{A}<think>\n\n</think>\n\n"
    )


def test_a_turn_after_tool_results_without_reasoning_has_no_think_block_unless_last() -> None:
    messages = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": "", "tool_calls": [call("a", {})]},
        {"role": "tool", "content": "r"},
        {"role": "assistant", "content": "done"},
    ]
    assert render(messages) == (
        f'{U}go{END}{A}<tool_call>\n{{"name": "a", "arguments": {{}}}}\n</tool_call>{END}'
        f"{U}<tool_response>\nr\n</tool_response>{END}{A}<think>\n\n</think>\n\ndone{END}"
    )


def test_tools_are_announced_in_the_system_turn() -> None:
    tool = {"type": "function", "function": {"name": "lookup", "parameters": {"type": "object"}}}
    rendered = render([{"role": "system", "content": "S"}, {"role": "user", "content": "q"}], tools=[tool])
    assert rendered == (
        "<|im_start|>system\nS\n\n# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
        "You are provided with function signatures within <tools></tools> XML tags:\n<tools>\n"
        + json.dumps(tool, ensure_ascii=False)
        + "\n</tools>\n\nFor each function call, return a json object with function name and arguments within "
        '<tool_call></tool_call> XML tags:\n<tool_call>\n{"name": <function-name>, "arguments": '
        f"<args-json-object>}}\n</tool_call>{END}{U}q{END}"
    )


def test_built_tokenizer_carries_the_template_and_the_real_ids(qwen3_tokenizer: Any) -> None:
    from langchain_qwen_fast.testing.tiny_model import QWEN3_SPECIAL_TOKENS

    tokenizer = qwen3_tokenizer
    assert tokenizer.chat_template == QWEN3_CHAT_TEMPLATE
    assert tokenizer.convert_tokens_to_ids("<|im_start|>") == 151644
    assert tokenizer.convert_tokens_to_ids("</think>") == 151668
    assert len(QWEN3_SPECIAL_TOKENS) == 26
    assert tokenizer.encode("Hello world") == [9707, 1879]
