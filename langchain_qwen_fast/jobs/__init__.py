"""Dataset jobs: classify a whole file (``qwen-fast classify``) or a Ray dataset, row by row,
with every input column kept and the classification's columns added (:mod:`.columns`).

    from langchain_qwen_fast.jobs import ClassifyOptions, classify_table

    report = classify_table(ClassifyOptions("news.csv", "labelled.parquet", labels=("World", "Sports")))

Modules: ``tables`` (the formats, CSV, JSONL, Parquet and stdin, and a row's text),
``readers`` (a reader per format) and ``writers`` (the output's part files and their join),
``questions`` (a question set answered about every row instead: the questions file and the
answers' columns), ``answerers`` (what answers a chunk's rows: a classifier's labels or the
questions), ``parts`` (the work folder: the committed chunks a resumed job carries on from, and the lock
that lets one run at a time work on them), ``options`` (:class:`ClassifyOptions`, a job's
flags and their checks), ``restart`` (what a restart checks before carrying on), ``job``
(:func:`classify_table`; it stops with :class:`~langchain_qwen_fast.errors.JobStopped` when the
servers fail, too many rows have input errors or it is interrupted), ``review`` (the review queue in ``qwen-fast
train``'s layout), ``summary`` (the report and the confidence histogram); on Ray (the ``ray``
extra), ``ray_data`` (:class:`ClassifyStage`, a stage for your own Ray Data pipeline),
``ray_read`` (the input read on the workers) and ``ray_job`` (:func:`classify_dataset`,
``qwen-fast classify --ray``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from langchain_qwen_fast._extras import lazy_exports

if TYPE_CHECKING:
    from langchain_qwen_fast.jobs.job import classify_table
    from langchain_qwen_fast.jobs.options import ClassifyOptions
    from langchain_qwen_fast.jobs.ray_data import ClassifyStage, HTTPServers, VLLMInActor
    from langchain_qwen_fast.jobs.ray_job import RayOptions, classify_dataset

__all__ = [
    "ClassifyOptions",
    "ClassifyStage",
    "HTTPServers",
    "RayOptions",
    "VLLMInActor",
    "classify_dataset",
    "classify_table",
]

# Imported on first use: the job modules read the classifier's code, and `import
# langchain_qwen_fast.jobs.columns` needs none of it.
__getattr__ = lazy_exports(
    __name__,
    {
        "ClassifyOptions": "langchain_qwen_fast.jobs.options",
        "classify_table": "langchain_qwen_fast.jobs.job",
        "ClassifyStage": "langchain_qwen_fast.jobs.ray_data",
        "HTTPServers": "langchain_qwen_fast.jobs.ray_data",
        "VLLMInActor": "langchain_qwen_fast.jobs.ray_data",
        "RayOptions": "langchain_qwen_fast.jobs.ray_job",
        "classify_dataset": "langchain_qwen_fast.jobs.ray_job",
    },
)
