"""``qwen-fast bench``: the paths a LangChain user could take to a classification, side by side
against one server in one run. Needs the ``bench`` extra.

* :mod:`~langchain_qwen_fast.bench.compare`: the run (its options, the report, its steps);
* :mod:`~langchain_qwen_fast.bench.paths`: raw HTTP, the openai SDK, ``ChatOpenAI``, LCEL,
  ``LLMChain`` and ``QwenClassifier``, one at a time and in batches;
* :mod:`~langchain_qwen_fast.bench.measure`: what a run owns, the timing loops, a path's
  result and row;
* :mod:`~langchain_qwen_fast.bench.report`: the JSON file, the table and the chart.

The measuring lab (servers per GPU, the engine's own ceiling, the HTTP service under load,
traces, profiles) is not part of the package: it is the ``benchmarks/`` folder of a checkout
of the repository, which builds on these modules.
"""
