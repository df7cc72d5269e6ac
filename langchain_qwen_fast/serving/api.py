"""The HTTP classification service's entry points, kept at the path the docs have shown:
:func:`create_app`, :func:`serve_api` and :class:`ServiceOptions` live in
:mod:`langchain_qwen_fast.serving.service`, which describes the service."""

from langchain_qwen_fast.serving.service.app import create_app
from langchain_qwen_fast.serving.service.options import ServiceOptions
from langchain_qwen_fast.serving.service.workers import serve_api

__all__ = ["ServiceOptions", "create_app", "serve_api"]
