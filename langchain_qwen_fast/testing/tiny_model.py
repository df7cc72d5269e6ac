"""Build a Qwen3-architecture test model with random weights and the real Qwen vocabulary.

Tests, CI and the offline demo reach no model hub, so they serve a model made here. It has
the real Qwen3 byte-level BPE (151,643 ranks shipped in the ``dashscope`` package as
``qwen.tiktoken``), the 26 Qwen3 special tokens at their real ids, and Qwen3's own chat
template. Requests, token counts and (for a fixed output length) speed are those of the real
model; the weights are random, so labels carry no meaning.

    qwen-fast build-test-model --size tiny --out .models/qwen3-tiny
"""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from langchain_qwen_fast.errors import DataFileError, MissingDependencyError

ModelSize = Literal["tiny", "0.6b"]

#: Qwen2/Qwen3 pre-tokenizer split pattern (single digits, unlike tiktoken's cl100k).
QWEN_PATTERN = (
    r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"""
    r"""|\s*[\r\n]+|\s+(?!\S)|\s+"""
)

#: Qwen3's special tokens, in id order from 151643.
QWEN3_SPECIAL_TOKENS = [
    "<|endoftext|>",
    "<|im_start|>",
    "<|im_end|>",
    "<|object_ref_start|>",
    "<|object_ref_end|>",
    "<|box_start|>",
    "<|box_end|>",
    "<|quad_start|>",
    "<|quad_end|>",
    "<|vision_start|>",
    "<|vision_end|>",
    "<|vision_pad|>",
    "<|image_pad|>",
    "<|video_pad|>",
    "<tool_call>",
    "</tool_call>",
    "<|fim_prefix|>",
    "<|fim_middle|>",
    "<|fim_suffix|>",
    "<|fim_pad|>",
    "<|repo_name|>",
    "<|file_sep|>",
    "<tool_response>",
    "</tool_response>",
    "<think>",
    "</think>",
]
FIRST_SPECIAL_ID = 151643
VOCAB_SIZE = 151936  # embedding rows: ranks + specials + padding, as in the real checkpoint

# Qwen3's own chat template, as shipped in the Qwen3 checkpoints' tokenizer_config.json: ChatML
# turns, tools announced in the system turn, tool calls as <tool_call>{json}</tool_call>, tool
# results as <tool_response> in a user turn, the reasoning of assistant turns after the last
# user query kept in a <think> block, and an empty <think></think> block after the generation
# prompt when enable_thinking is false. tests/unit_tests/testing/test_chat_template.py pins each rule.
QWEN3_CHAT_TEMPLATE = """{%- if tools %}
    {{- '<|im_start|>system\\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\\n\\n' }}
    {%- endif %}
    {{- "# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\nYou are provided with function signatures within <tools></tools> XML tags:\\n<tools>" }}
    {%- for tool in tools %}
        {{- "\\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\\n</tools>\\n\\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n{\\"name\\": <function-name>, \\"arguments\\": <args-json-object>}\\n</tool_call><|im_end|>\\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and message.content is string and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if message.content is string %}
        {%- set content = message.content %}
    {%- else %}
        {%- set content = '' %}
    {%- endif %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\\n' + content + '<|im_end|>' + '\\n' }}
    {%- elif message.role == "assistant" %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is string %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in content %}
                {%- set reasoning_content = content.split('</think>')[0].rstrip('\\n').split('<think>')[-1].lstrip('\\n') %}
                {%- set content = content.split('</think>')[-1].lstrip('\\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\\n<think>\\n' + reasoning_content.strip('\\n') + '\\n</think>\\n\\n' + content.lstrip('\\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\\n<tool_response>\\n' }}
        {{- content }}
        {{- '\\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\\n\\n</think>\\n\\n' }}
    {%- endif %}
{%- endif %}"""

#: The ``Qwen3Config`` fields a size sets, and each size's values for them ("0.6b": Qwen3-0.6B's).
_SHAPE_FIELDS = (
    "hidden_size",
    "num_hidden_layers",
    "num_attention_heads",
    "num_key_value_heads",
    "head_dim",
    "intermediate_size",
)
_SHAPES: dict[str, dict[str, Any]] = {
    "tiny": dict(zip(_SHAPE_FIELDS, (128, 2, 4, 2, 32, 384), strict=True)),
    "0.6b": dict(zip(_SHAPE_FIELDS, (1024, 28, 16, 8, 128, 3072), strict=True)),
}


def qwen_tiktoken_path() -> Path:
    """Path of the Qwen BPE ranks file shipped in the ``dashscope`` package."""
    try:
        path = resources.files("dashscope") / "resources" / "qwen.tiktoken"
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(
            "the test-model builder needs the Qwen vocabulary from the 'dashscope' package: "
            "pip install dashscope (or the project's [test] extra)"
        ) from exc
    return Path(str(path))


def build_tokenizer(max_len: int = 40960) -> Any:
    """The real Qwen3 tokenizer, rebuilt from ``qwen.tiktoken`` with the Qwen3 chat template."""
    from tokenizers import normalizers
    from transformers import PreTrainedTokenizerFast
    from transformers.convert_slow_tokenizer import TikTokenConverter

    backend = TikTokenConverter(
        vocab_file=str(qwen_tiktoken_path()),
        pattern=QWEN_PATTERN,
        extra_special_tokens=QWEN3_SPECIAL_TOKENS,
    ).converted()
    backend.normalizer = normalizers.NFC()
    for offset, token in enumerate(QWEN3_SPECIAL_TOKENS):
        got = backend.token_to_id(token)
        if got != FIRST_SPECIAL_ID + offset:
            raise DataFileError(f"special token {token} got id {got}, want {FIRST_SPECIAL_ID + offset}")
    return PreTrainedTokenizerFast(
        tokenizer_object=backend,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
        chat_template=QWEN3_CHAT_TEMPLATE,
        model_max_length=max_len,
        clean_up_tokenization_spaces=False,
    )


# Output bias for the test model, each entry scaled by hidden dimension 0's steady value
# after the final norm (large beside what the small random weights add to a logit): closing
# JSON tokens most favoured first, whitespace-only tokens least. Under a grammar (structured
# output, forced tool calls) random weights would never close a string or a number and would
# pad with whitespace until the context ran out; with this bias constrained decoding ends,
# through the real grammar.
_CLOSING_JSON_BIAS = {'"': 3.0, "}": 2.5, "]": 2.5, ",": 2.0}
_BLANK_BIAS = -3.0
# Hidden dimension 0 is held at this constant: small beside the other 127 dimensions, so
# the text still shapes every hidden state (each text keeps its own label scores).
_STEADY = 0.05


def _bias_towards_closing_json(model: Any, tokenizer: Any) -> None:
    """Make closing JSON tokens the argmax, and whitespace the argmin, wherever allowed.

    Every input embedding's dimension 0 is set to ``_STEADY`` and no layer writes to that
    dimension (the matching rows of ``o_proj`` and ``down_proj`` are zero), so after the
    final RMSNorm it is the same positive value at every position. The untied
    output head's dimension 0 then adds a fixed bias per token: the entries above, 0 for
    the rest. Label tokens get none, and classification limits its one token to the labels.
    """
    import torch

    blank = [i for i in range(len(tokenizer)) if (t := tokenizer.decode([i])) and not t.strip()]
    head = model.get_output_embeddings().weight
    with torch.no_grad():
        model.get_input_embeddings().weight[:, 0] = _STEADY
        for layer in model.model.layers:
            layer.self_attn.o_proj.weight[0, :] = 0.0
            layer.mlp.down_proj.weight[0, :] = 0.0
        head[:, 0] = 0.0
        head[blank, 0] = _BLANK_BIAS
        for text, bias in _CLOSING_JSON_BIAS.items():
            (token,) = tokenizer.encode(text, add_special_tokens=False)
            head[token, 0] = bias


def build_test_model(
    out_dir: str | Path,
    size: ModelSize = "tiny",
    *,
    num_labels: int | None = None,
    multi_label: bool = False,
    seed: int = 0,
    overwrite: bool = False,
    tokenizer_from: str | Path | None = None,
) -> Path:
    """Write a random-weight Qwen3 model with the real vocabulary to ``out_dir``.

    Args:
        out_dir: directory to write (``config.json``, safetensors, tokenizer files).
        size: ``"tiny"`` (2 layers, hidden 128; for CI) or ``"0.6b"`` (the exact
            Qwen3-0.6B shape; for GPU benchmarks).
        num_labels: when given, write a ``Qwen3ForSequenceClassification`` checkpoint with
            that many classes (served by vLLM's pooling runner) instead of a causal LM.
        multi_label: with ``num_labels``, mark the head multi-label (``problem_type``), so
            vLLM scores each class with a sigmoid instead of a softmax over the classes.
        seed: torch seed for the random weights (same seed, same model).
        overwrite: rebuild even if ``out_dir`` already holds a finished model.
        tokenizer_from: copy the tokenizer from this model directory instead of rebuilding
            it (for machines without the ``dashscope`` vocabulary, e.g. the GPU host).

    Returns:
        The model directory.
    """
    import torch
    from transformers import GenerationConfig, Qwen3Config, Qwen3ForCausalLM, Qwen3ForSequenceClassification

    out = Path(out_dir)
    marker = out / ".built.json"
    recipe = {
        "size": size,
        "num_labels": num_labels,
        "multi_label": multi_label,
        "seed": seed,
        "output_bias": _CLOSING_JSON_BIAS,
        "steady": _STEADY,
        "chat_template": hashlib.sha256(QWEN3_CHAT_TEMPLATE.encode()).hexdigest()[:16],
    }
    if marker.exists() and not overwrite and json.loads(marker.read_text()) == recipe:
        return out
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)

    if tokenizer_from is not None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(tokenizer_from)
    else:
        tokenizer = build_tokenizer()
    config_args: dict[str, Any] = dict(
        vocab_size=VOCAB_SIZE,
        max_position_embeddings=40960,
        rope_theta=1_000_000.0,
        rms_norm_eps=1e-6,
        # Untied (the real checkpoint ties them) so the output head can carry the test bias.
        tie_word_embeddings=num_labels is not None,
        bos_token_id=FIRST_SPECIAL_ID,
        eos_token_id=FIRST_SPECIAL_ID + 2,
        pad_token_id=FIRST_SPECIAL_ID,
        torch_dtype="bfloat16",
        **_SHAPES[size],
    )
    config = Qwen3Config(**config_args)
    torch.manual_seed(seed)
    model: Any
    if num_labels is None:
        model = Qwen3ForCausalLM(config)
    else:
        config.num_labels = num_labels
        config.id2label = {i: f"LABEL_{i}" for i in range(num_labels)}
        config.label2id = {v: k for k, v in config.id2label.items()}
        config.problem_type = "multi_label_classification" if multi_label else "single_label_classification"
        model = Qwen3ForSequenceClassification(config)
    if num_labels is None:
        _bias_towards_closing_json(model, tokenizer)
    model = model.to(torch.bfloat16)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    if num_labels is None:
        GenerationConfig(
            bos_token_id=FIRST_SPECIAL_ID,
            eos_token_id=[FIRST_SPECIAL_ID + 2, FIRST_SPECIAL_ID],
            pad_token_id=FIRST_SPECIAL_ID,
        ).save_pretrained(out)
    marker.write_text(json.dumps(recipe))
    return out
