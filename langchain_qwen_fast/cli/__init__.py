"""The ``qwen-fast`` command. ``main`` parses the command line; each subcommand is a small module
here that turns its arguments into typed options and calls the library."""

from langchain_qwen_fast.cli.main import main

__all__ = ["main"]
