"""Classify a CSV, JSONL or Parquet file with ``qwen-fast classify``'s job, from Python.

    python examples/classify_file.py examples/data/news_sample.csv --out out/labels.jsonl

The same as ``qwen-fast classify INPUT --out OUTPUT --labels ...``: every input column kept,
each row gains label, p_<label>, abstained and error; a row that cannot be classified gets its
error in its place; a run that is stopped carries on where it stopped when started again.
``--processes N`` spreads each chunk over N client processes (for servers on several GPUs;
chunks of 1,024 rows per process).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from _local import add_server_args, server_url

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.jobs.job import ClassifyOptions, classify_table
from langchain_qwen_fast.jobs.summary import render
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="CSV, JSONL or Parquet file")
    parser.add_argument("--out", type=Path, default=Path("out/labels.jsonl"))
    parser.add_argument("--labels", nargs="+", default=list(AG_NEWS_LABELS))
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--processes", type=int, default=1, help="client processes per chunk (QwenClassifier)")
    add_server_args(parser)
    args = parser.parse_args()
    # A chunk is spread over the processes only with at least 1,024 rows for each.
    options = ClassifyOptions(
        str(args.path), str(args.out), labels=tuple(args.labels), text_column=args.text_column,
        chunk_rows=1024 * args.processes,
    )  # fmt: skip
    with server_url(args) as url:
        classifier = QwenClassifier(
            labels=args.labels, base_url=url, model=args.served_model_name, client_processes=args.processes
        )
        try:
            report = classify_table(options, classifier)
        finally:
            classifier.close()
    print(render(report))


if __name__ == "__main__":
    main()
