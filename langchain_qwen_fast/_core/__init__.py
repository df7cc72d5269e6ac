"""The client's private core: prompts and scoring plans, vLLM endpoint bodies and reply parsing,
the request procedure (sans-I/O, one for sync and async), the HTTP transport, client processes
and base-URL lists. Nothing here imports LangChain; the public modules above wrap it."""
