"""The client's tokenizer: tiktoken where it gives exactly ``tokenizers``' ids, ``tokenizers``
itself everywhere else. The real Qwen3 tokenizer (rebuilt from its vocabulary, no network) for
the claim; a small tokenizer of the same form for what is refused."""

from __future__ import annotations

import copy
import json
import logging
import random
from pathlib import Path
from typing import Any

import pytest
from tokenizers import Tokenizer

from langchain_qwen_fast._core.tokenizing import Encoding, TiktokenTokenizer, fast_tokenizer, load_tokenizer
from langchain_qwen_fast.errors import ConfigurationError
from langchain_qwen_fast.testing.samples import headlines, news_items
from langchain_qwen_fast.testing.tiny_model import QWEN_PATTERN


def _texts() -> list[str]:
    rng = random.Random(7)
    alphabet = [chr(c) for c in [*range(32, 127), *range(0xA0, 0x17F), *range(0x300, 0x370), *range(0x400, 0x450)]]
    alphabet += [chr(c) for c in [*range(0x3040, 0x30FF), *range(0x4E00, 0x4E40), 0x1F600, 0x1F3FD, 0x200B, 0x2028]]
    alphabet += ["\n", "\r", "\t", "  ", "'s", "'LL", "<|im_start|>", "<|im_end|>", "<think>", "</think>", "e\u0301"]
    soup = ["".join(rng.choice(alphabet) for _ in range(rng.randint(0, 60))) for _ in range(2000)]
    return [*news_items(300, 0), *headlines(300), *soup]


def test_the_qwen3_tokenizer_encodes_with_tiktoken_giving_tokenizers_own_ids(
    qwen3_tokenizer: Any, tmp_path: Path
) -> None:
    qwen3_tokenizer.backend_tokenizer.save(str(tmp_path / "tokenizer.json"))
    fast = load_tokenizer(tmp_path)
    assert isinstance(fast, TiktokenTokenizer)
    texts = _texts()
    reference = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    expected = [e.ids for e in reference.encode_batch(texts, add_special_tokens=False)]
    assert [e.ids for e in fast.encode_batch_fast(texts, add_special_tokens=False)] == expected
    assert [e.ids for e in fast.encode_batch(texts, add_special_tokens=False)] == expected
    assert fast.decode(expected[0]) == reference.decode(expected[0])
    assert fast.token_to_id("<|im_end|>") == reference.token_to_id("<|im_end|>")


def _byte_chars() -> list[str]:
    """GPT-2's byte-level alphabet, in byte order."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            chars[byte] = chr(byte)
        else:
            chars[byte], extra = chr(256 + extra), extra + 1
    return [chars[b] for b in range(256)]


#: A small tokenizer of Qwen3's form: bytes, then a few merges, each merge's token ranked by
#: its place in the list; NFC; Qwen's split regex; one added token.
SMALL_SPEC: dict[str, Any] = {
    "version": "1.0",
    "truncation": None,
    "padding": None,
    "added_tokens": [
        {"id": 264, "content": "<|im_end|>", "single_word": False, "lstrip": False, "rstrip": False}
        | {"normalized": False, "special": True}
    ],
    "normalizer": {"type": "NFC"},
    "pre_tokenizer": {
        "type": "Sequence",
        "pretokenizers": [
            {"type": "Split", "pattern": {"Regex": QWEN_PATTERN}, "behavior": "Isolated", "invert": False},
            {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": False},
        ],
    },
    "post_processor": None,
    "decoder": {"type": "ByteLevel", "add_prefix_space": True, "trim_offsets": True, "use_regex": True},
    "model": {
        "type": "BPE",
        "dropout": None,
        "unk_token": None,
        "continuing_subword_prefix": None,
        "end_of_word_suffix": None,
        "fuse_unk": False,
        "byte_fallback": False,
        "ignore_merges": True,
        "vocab": {},
        "merges": [["Ġ", "t"], ["h", "e"], ["Ġt", "he"], ["i", "n"], ["Ġ", "a"], ["e", "r"], ["Ġ", "s"], ["o", "n"]],
    },
}
SMALL_SPEC["model"]["vocab"] = {c: i for i, c in enumerate(_byte_chars())} | {
    a + b: 256 + i for i, (a, b) in enumerate(SMALL_SPEC["model"]["merges"])
}


def _written(tmp_path: Path, change: dict[str, object] | None = None) -> Path:
    spec = copy.deepcopy(SMALL_SPEC)
    for dotted, value in (change or {}).items():
        *parents, key = dotted.split(".")
        node: Any = spec
        for part in parents:
            node = node[int(part)] if isinstance(node, list) else node[part]
        node[key] = value
    out = tmp_path / "tokenizer.json"
    out.write_text(json.dumps(spec))
    return out


def test_a_small_tokenizer_of_that_form_is_reproduced_too(tmp_path: Path) -> None:
    fast = load_tokenizer(_written(tmp_path))
    assert isinstance(fast, TiktokenTokenizer)
    reference = Tokenizer.from_file(str(tmp_path / "tokenizer.json"))
    texts = _texts()
    assert [e.ids for e in fast.encode_batch(texts)] == [e.ids for e in reference.encode_batch(texts)]


def test_a_tokenizer_file_is_loaded_once_while_it_stands(tmp_path: Path) -> None:
    file = _written(tmp_path)
    first = load_tokenizer(file)
    assert load_tokenizer(tmp_path) is first
    file.write_text(file.read_text() + "\n")  # changed: read again
    assert load_tokenizer(file) is not first


@pytest.mark.parametrize(
    "change",
    [
        {"normalizer": {"type": "Lowercase"}},
        {"model.byte_fallback": True},
        {"model.ignore_merges": False},
        {"pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False, "trim_offsets": True, "use_regex": True}},
        {"added_tokens.0.lstrip": True},
        {"added_tokens.0.content": "Ġthe"},
    ],
    ids=["normalizer", "byte-fallback", "merges-not-ignored", "pre-tokenizer", "stripping-added-token", "added-in-bpe"],
)
def test_a_tokenizer_tiktoken_does_not_reproduce_stays_with_tokenizers(
    tmp_path: Path, change: dict[str, object]
) -> None:
    file = _written(tmp_path, change)
    assert isinstance(load_tokenizer(file), Tokenizer)


class _Shifted:
    """A tokenizer whose ids are another's, each one higher: one tiktoken cannot agree with."""

    def __init__(self, wrapped: Tokenizer) -> None:
        self.wrapped = wrapped

    def encode_batch(self, texts: list[str], add_special_tokens: bool = True) -> list[Encoding]:
        return [Encoding([i + 1 for i in e.ids]) for e in self.wrapped.encode_batch(texts, add_special_tokens)]


def test_a_tokenizer_that_differs_on_the_check_texts_stays_with_tokenizers(tmp_path: Path) -> None:
    file = _written(tmp_path)
    shifted = _Shifted(Tokenizer.from_file(str(file)))
    assert fast_tokenizer(shifted, file) is shifted


def test_a_missing_or_broken_tokenizer_file_is_an_error_naming_it(tmp_path: Path) -> None:
    with pytest.raises(ConfigurationError, match=r"no tokenizer\.json at"):
        load_tokenizer(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(ConfigurationError, match="cannot load"):
        load_tokenizer(tmp_path)


def test_the_encoder_chosen_is_logged_once_with_the_reason_when_not_tiktoken(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    fast_dir, slow_dir = tmp_path / "fast", tmp_path / "slow"
    fast_dir.mkdir()
    slow_dir.mkdir()
    _written(fast_dir)
    _written(slow_dir, {"model.byte_fallback": True})
    with caplog.at_level(logging.DEBUG, logger="langchain_qwen_fast"):
        for _ in range(2):  # loaded twice: chosen, and logged, once
            load_tokenizer(fast_dir)
            load_tokenizer(slow_dir)
    chosen = [r.getMessage() for r in caplog.records if "tokenizer.json" in r.getMessage()]
    assert len(chosen) == 2, chosen
    fast_line, slow_line = sorted(chosen, key=lambda line: str(slow_dir) in line)
    assert str(fast_dir) in fast_line and "tiktoken" in fast_line and "not tiktoken" not in fast_line
    assert str(slow_dir) in slow_line and "not tiktoken" in slow_line
    assert "does not reproduce" in slow_line  # the reason
