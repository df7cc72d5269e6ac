"""Local vLLM server tooling: the launcher and the test-model builder.

Stands apart from the client package: ``langchain_qwen_fast`` never imports it.
"""

from server.launcher import DEFAULT_MODEL, PROFILES, ServerStartError, VLLMServer, free_port, hub_model_available

__all__ = ["DEFAULT_MODEL", "PROFILES", "ServerStartError", "VLLMServer", "free_port", "hub_model_available"]
