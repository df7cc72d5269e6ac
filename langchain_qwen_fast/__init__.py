"""Fast, dependable text classification and routing with Qwen3 on vLLM, for LangChain."""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_qwen_fast._extras import lazy_exports
from langchain_qwen_fast._version import __version__
from langchain_qwen_fast.errors import (
    ConfigurationError,
    ContextLengthError,
    InvalidInputError,
    LabelParseError,
    QwenFastError,
    ResponseFormatError,
    ServerConnectionError,
    ServerStatusError,
    ServerTimeoutError,
    TransportError,
)

if TYPE_CHECKING:
    from langchain_qwen_fast.chat_models import ChatQwenFast
    from langchain_qwen_fast.classification import Classification, ClassifierInput
    from langchain_qwen_fast.classifiers import QwenClassifier
    from langchain_qwen_fast.decision_models import ClassifierDecisionModel, QwenDecisionModel
    from langchain_qwen_fast.routing import ClassifierRouter, classifier_tool, label_edge

# Imported on first use: LangChain and the OpenAI client are slow to import, and a
# `qwen-fast serve`, a client worker process or `import langchain_qwen_fast.errors` need none.
__getattr__ = lazy_exports(
    __name__,
    {
        "ChatQwenFast": "langchain_qwen_fast.chat_models",
        "Classification": "langchain_qwen_fast.classification",
        "ClassifierInput": "langchain_qwen_fast.classification",
        "QwenClassifier": "langchain_qwen_fast.classifiers",
        "QwenDecisionModel": "langchain_qwen_fast.decision_models",
        "ClassifierDecisionModel": "langchain_qwen_fast.decision_models",
        "ClassifierRouter": "langchain_qwen_fast.routing",
        "classifier_tool": "langchain_qwen_fast.routing",
        "label_edge": "langchain_qwen_fast.routing",
    },
)

__all__ = [
    "ChatQwenFast",
    "Classification",
    "ClassifierDecisionModel",
    "ClassifierInput",
    "ClassifierRouter",
    "ConfigurationError",
    "ContextLengthError",
    "InvalidInputError",
    "LabelParseError",
    "QwenClassifier",
    "QwenDecisionModel",
    "QwenFastError",
    "ResponseFormatError",
    "ServerConnectionError",
    "ServerStatusError",
    "ServerTimeoutError",
    "TransportError",
    "__version__",
    "classifier_tool",
    "label_edge",
]
