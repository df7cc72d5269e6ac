"""Fast, dependable text classification and routing with Qwen3 on vLLM, for LangChain."""

from langchain_qwen_fast.chat_models import ChatQwenFast
from langchain_qwen_fast.classifiers import Classification, QwenClassifier
from langchain_qwen_fast.errors import (
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
from langchain_qwen_fast.routing import ClassifierRouter, classifier_tool, label_edge

__all__ = [
    "ChatQwenFast",
    "Classification",
    "ClassifierRouter",
    "ContextLengthError",
    "InvalidInputError",
    "LabelParseError",
    "QwenClassifier",
    "QwenFastError",
    "ResponseFormatError",
    "ServerConnectionError",
    "ServerStatusError",
    "ServerTimeoutError",
    "TransportError",
    "classifier_tool",
    "label_edge",
]
