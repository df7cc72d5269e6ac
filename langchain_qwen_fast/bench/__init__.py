"""``qwen-fast bench`` and ``qwen-fast bench-scale``: side-by-side latency and throughput
measurements. Needs the ``bench`` extra. Figures measured with them: docs/benchmarks.md.

One module per benchmark, on one shared measuring library:

* :mod:`~langchain_qwen_fast.bench.compare`: ``qwen-fast bench`` (the paths side by side, or
  one server per flag set), on :mod:`~langchain_qwen_fast.bench.paths`,
  :mod:`~langchain_qwen_fast.bench.service` and :mod:`~langchain_qwen_fast.bench.baselines`;
* :mod:`~langchain_qwen_fast.bench.scale`: ``qwen-fast bench-scale`` (servers per GPU, loads,
  the router), with :mod:`~langchain_qwen_fast.bench.latency_variants` (one request at a time
  on server variants) and :mod:`~langchain_qwen_fast.bench.cpu_profile` (py-spy);
* :mod:`~langchain_qwen_fast.bench.capabilities`: the capability rows both of them run;
* the library: :mod:`~langchain_qwen_fast.bench.measure` (what a run owns, the timing loops,
  a path's result), :mod:`~langchain_qwen_fast.bench.sampling` (host, GPU and server
  counters), :mod:`~langchain_qwen_fast.bench.traces` (vLLM's torch profiler steps),
  :mod:`~langchain_qwen_fast.bench.variants` (server variants from JSON) and
  :mod:`~langchain_qwen_fast.bench.report` (JSON, table, chart).

Nothing here keeps state between runs: a run's servers and fresh texts live in the
:class:`~langchain_qwen_fast.bench.measure.RunContext` it creates and passes on.
"""
