"""The measuring lab of langchain-qwen-fast: the tools that measure the client, the servers and
the GPUs beyond ``qwen-fast bench``. Run from a checkout of the repository, as
``python -m benchmarks.TOOL --help``; not part of the installed package. README.md here says
what each tool measures and what it needs.

Tools (each a module with ``main``): :mod:`benchmarks.scale` (servers per GPU against vLLM's
own ceiling), :mod:`benchmarks.compare` (``qwen-fast bench`` with the lab's parts),
:mod:`benchmarks.flags` (one server per flag set), :mod:`benchmarks.classify_job` (the classify
job against ``abatch``; its memory), :mod:`benchmarks.client_libraries` (HTTP client libraries).
Their parts: :mod:`benchmarks.layouts`, :mod:`benchmarks.ceiling`, :mod:`benchmarks.service`,
:mod:`benchmarks.capabilities`, :mod:`benchmarks.latency_variants`, :mod:`benchmarks.traces`,
:mod:`benchmarks.cpu_profile`, :mod:`benchmarks.baselines`, :mod:`benchmarks.sampling`,
:mod:`benchmarks.variants`; shared: :mod:`benchmarks.common`, :mod:`benchmarks._options`.
"""
