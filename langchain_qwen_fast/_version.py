"""The installed package's version, apart from the package root (which loads the facades)."""

from __future__ import annotations

from importlib import metadata

try:
    __version__ = metadata.version("langchain-qwen-fast")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = ["__version__"]
