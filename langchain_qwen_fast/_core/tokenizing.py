"""Client-side token ids, made fast where the tokenizer allows it.

Tokenising is most of the client's work a text when prompts go out as token ids. Qwen3's
tokenizer (and others of its kind: byte-level BPE over a split regex, the form tiktoken was
made for) is encoded here by tiktoken, several times faster than ``tokenizers`` on the same
text, with the same ids. Nothing is assumed: the fast encoder is built only for a
``tokenizer.json`` whose every part tiktoken reproduces (the model, the normaliser, the
pre-tokeniser, the added tokens), and is then checked against ``tokenizers`` on texts chosen
to reach each of those parts; any other tokenizer, or any difference, keeps ``tokenizers``.
"""

from __future__ import annotations

import functools
import json
import logging
import unicodedata
from collections.abc import Sequence
from pathlib import Path
from typing import Any, NamedTuple

from langchain_qwen_fast.errors import ConfigurationError, MissingDependencyError

_log = logging.getLogger("langchain_qwen_fast")

#: Texts the fast encoder must tokenise exactly as ``tokenizers`` does before it is used: the
#: pre-tokeniser's every branch (contractions, letters after a symbol, digits, symbol runs,
#: newlines, trailing and inner whitespace), text that NFC changes, scripts without spaces,
#: emoji, bytes BPE has no merge for, and each added token is appended to them at set-up.
_CHECK_TEXTS = (
    "Stocks rally as the central bank cuts rates; analysts say it's the first cut in 2 years.",
    "I'LL say they'd've known... THE END!!!\n\n\n  indented\tand\ttabbed   \r\n",
    "Check: 1,234 naïve café — 東京 <b>bold</b>\n\tend",
    "\n  starts with whitespace, ends with it   ",
    "cafe\u0301 and Cafe\u0301: combining marks NFC composes; ﬁ ligature; Å vs Å",
    "日本語のテキストと中文文本，还有한국어 텍스트. Ελληνικά και русский текст.",
    "emoji 👍🏽 and 🇯🇵 flags, zero\u200bwidth, \x00 control \x7f bytes and \ufffd",
    "x=a_b+c*d/e; if(x>=10){return [1,2,3];} // code-ish 0xFF 3.14159 1e-9",
    "      ",
    "",
)


class Encoding(NamedTuple):
    """One text's token ids (the ``ids`` of a ``tokenizers`` encoding, nothing else)."""

    ids: list[int]


class TiktokenTokenizer:
    """A ``tokenizers.Tokenizer`` that encodes with tiktoken: the methods the client calls
    (``encode_batch``, ``encode_batch_fast``, ``decode``, ``token_to_id``), each giving what
    the wrapped tokenizer gives. Built by :func:`fast_tokenizer`, which checks the two agree."""

    def __init__(self, wrapped: Any, encoding: Any, normalize_nfc: bool) -> None:
        self.wrapped = wrapped
        self._encode = functools.partial(encoding.encode, allowed_special="all")
        self._normalize_nfc = normalize_nfc

    def encode_ids(self, text: str) -> list[int]:
        """``text``'s token ids, no special tokens added."""
        if self._normalize_nfc and not text.isascii() and not unicodedata.is_normalized("NFC", text):
            text = unicodedata.normalize("NFC", text)
        ids: list[int] = self._encode(text)
        return ids

    def encode_batch_fast(self, texts: Sequence[str], add_special_tokens: bool = True) -> list[Any]:
        """``tokenizers``' ``encode_batch_fast``: each text's encoding (its ids)."""
        if add_special_tokens:  # a template's own tokens: only the wrapped tokenizer knows them
            return list(self.wrapped.encode_batch_fast(list(texts), add_special_tokens=True))
        encode = self.encode_ids
        return [Encoding(encode(text)) for text in texts]

    encode_batch = encode_batch_fast

    def decode(self, ids: Sequence[int], skip_special_tokens: bool = True) -> str:
        """The wrapped tokenizer's decoding of ``ids``."""
        text: str = self.wrapped.decode(list(ids), skip_special_tokens=skip_special_tokens)
        return text

    def token_to_id(self, token: str) -> int | None:
        """The wrapped tokenizer's id of ``token``."""
        found: int | None = self.wrapped.token_to_id(token)
        return found


def load_tokenizer(path: str | Path) -> Any:
    """The tokenizer at ``path`` (a directory holding ``tokenizer.json``, or the file), with
    errors that name the path: ``tokenizers``' own, encoding with tiktoken where that gives
    the same ids (:func:`fast_tokenizer`). Loaded once a process for a file as it stands (its
    size and modification time): clients of one model share it, and it is read-only."""
    file = Path(path)
    if file.is_dir():
        file = file / "tokenizer.json"
    try:
        stat = file.stat()
    except OSError:
        raise ConfigurationError(f"tokenizer_path: no tokenizer.json at {path}") from None
    return _loaded(str(file.resolve()), stat.st_size, stat.st_mtime_ns)


@functools.lru_cache(maxsize=8)
def _loaded(file: str, size: int, mtime_ns: int) -> Any:
    """The tokenizer of ``file`` at that size and time (see :func:`load_tokenizer`)."""
    try:
        from tokenizers import Tokenizer
    except ImportError:
        raise MissingDependencyError("tokenizer_path needs the tokenizers package: pip install tokenizers") from None
    try:
        tokenizer = Tokenizer.from_file(file)
    except Exception as exc:
        raise ConfigurationError(f"tokenizer_path: cannot load {file}: {exc}") from None
    return fast_tokenizer(tokenizer, Path(file))


def fast_tokenizer(tokenizer: Any, file: Path) -> Any:
    """``tokenizer`` (loaded from ``file``), encoding with tiktoken where ``file`` describes a
    tokenizer tiktoken reproduces and the two agree on the check texts; else ``tokenizer``.
    The choice is logged (at INFO), with the reason where the fast encoder is not used."""
    fast = _tiktoken_tokenizer(tokenizer, file)
    if isinstance(fast, str):
        _log.info("tokenizer %s: encoding with tokenizers, not tiktoken: %s", file, fast)
        return tokenizer
    _log.info("tokenizer %s: encoding with tiktoken (same ids as tokenizers on the check texts)", file)
    return fast


def _tiktoken_tokenizer(tokenizer: Any, file: Path) -> TiktokenTokenizer | str:
    """The tiktoken encoder of :func:`fast_tokenizer`, or why there is none."""
    try:
        import tiktoken
    except ImportError:
        return "tiktoken is not installed"
    try:
        spec = json.loads(file.read_text(encoding="utf-8"))
        parts = _tiktoken_parts(spec)
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        return f"cannot read its description ({type(exc).__name__}: {exc})"
    if parts is None:
        return "its model, normaliser, pre-tokeniser or added tokens are of a kind tiktoken does not reproduce"
    pattern, ranks, special, nfc = parts
    try:
        encoding = tiktoken.Encoding(
            f"langchain-qwen-fast:{file}", pat_str=pattern, mergeable_ranks=ranks, special_tokens=special
        )
    except Exception as exc:  # a pattern or vocabulary tiktoken refuses
        return f"tiktoken refuses its pattern or vocabulary ({exc})"
    fast = TiktokenTokenizer(tokenizer, encoding, nfc)
    checks = [*_CHECK_TEXTS, *(f"a{token}b {token}\n{token}" for token in special)]
    expected = [e.ids for e in tokenizer.encode_batch(checks, add_special_tokens=False)]
    if [fast.encode_ids(t) for t in checks] != expected:
        return "tiktoken's ids differ from tokenizers' on the check texts"
    return fast


def _tiktoken_parts(spec: dict[str, Any]) -> tuple[str, dict[bytes, int], dict[str, int], bool] | None:
    """From a ``tokenizer.json``: tiktoken's split pattern, ranks and special tokens, and
    whether text is NFC-normalised first; None where some part is one tiktoken does not
    reproduce."""
    model = spec["model"]
    if model.get("type") != "BPE" or model.get("byte_fallback") or model.get("dropout"):
        return None
    if model.get("continuing_subword_prefix") or model.get("end_of_word_suffix") or not model.get("ignore_merges"):
        return None
    normalizer = spec.get("normalizer")
    if normalizer is not None and normalizer.get("type") != "NFC":
        return None
    pattern = _split_pattern(spec.get("pre_tokenizer"))
    if pattern is None:
        return None
    added = spec.get("added_tokens") or []
    if any(a.get("lstrip") or a.get("rstrip") or a.get("single_word") for a in added):
        return None
    to_byte = {char: byte for byte, char in _byte_chars().items()}
    ranks = {bytes(to_byte[char] for char in token): rank for token, rank in model["vocab"].items()}
    if len(ranks) != len(model["vocab"]) or len(set(ranks.values())) != len(ranks):
        return None
    special = {str(a["content"]): int(a["id"]) for a in added}
    if any(token.encode() in ranks for token in special):  # an added token that BPE also makes
        return None
    return pattern, ranks, special, normalizer is not None


def _split_pattern(pre_tokenizer: Any) -> str | None:
    """The regex of a pre-tokeniser that splits by a regex (keeping the matches) and then maps
    bytes to characters without a regex of its own; None for any other pre-tokeniser."""
    if not pre_tokenizer or pre_tokenizer.get("type") != "Sequence":
        return None
    steps = pre_tokenizer.get("pretokenizers") or []
    if len(steps) != 2:
        return None
    split, byte_level = steps
    if split.get("type") != "Split" or split.get("behavior") != "Isolated" or split.get("invert"):
        return None
    if byte_level.get("type") != "ByteLevel" or byte_level.get("use_regex") or byte_level.get("add_prefix_space"):
        return None
    pattern = split.get("pattern", {}).get("Regex")
    return pattern if isinstance(pattern, str) else None


@functools.cache
def _byte_chars() -> dict[int, str]:
    """GPT-2's byte-level alphabet: the printable character standing for each byte."""
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    chars = {b: chr(b) for b in printable}
    extra = 0
    for byte in range(256):
        if byte not in chars:
            chars[byte] = chr(256 + extra)
            extra += 1
    return chars


__all__ = ["Encoding", "TiktokenTokenizer", "fast_tokenizer", "load_tokenizer"]
