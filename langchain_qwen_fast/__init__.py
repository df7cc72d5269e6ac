"""Fast, dependable text classification and routing with Qwen3 on vLLM, for LangChain."""

from importlib import metadata

from langchain_qwen_fast.chat_models import ChatQwenFast
from langchain_qwen_fast.classification import Classification, ClassifierInput
from langchain_qwen_fast.classifiers import QwenClassifier
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

try:
    __version__ = metadata.version(__package__ or "langchain-qwen-fast")
except metadata.PackageNotFoundError:  # running from a source tree that was never installed
    __version__ = "0.0.0"

__all__ = [
    "ChatQwenFast",
    "Classification",
    "ClassifierInput",
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
    "__version__",
    "classifier_tool",
    "label_edge",
]
