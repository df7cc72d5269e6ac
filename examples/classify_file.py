"""Classify a CSV or JSONL file with a progress bar; write one JSON line per input row.

    python examples/classify_file.py examples/data/news_sample.csv --out out/labels.jsonl

Rows: JSONL objects with "text" (or "title" and "description"); CSV with a header that has
a text column (--text-column), or AG News's layout without header: class index, title,
description. Rows are classified in grouped requests; a row that cannot be classified gets
its error in the output, in its place. ``--processes N`` spreads each chunk over N client
processes (for servers on several GPUs; chunks of at least 1,024 rows per process).
"""

from __future__ import annotations

import argparse
import asyncio
import csv
import json
from collections.abc import Iterator
from pathlib import Path

from _local import add_server_args, server_url
from tqdm import tqdm

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS


def read_texts(path: Path, text_column: str) -> Iterator[str]:
    if path.suffix == ".jsonl":
        for line in path.read_text().splitlines():
            if line.strip():
                row = json.loads(line)
                yield row.get("text") or f"{row.get('title', '')}. {row.get('description', '')}"
        return
    with path.open(newline="") as f:
        rows = list(csv.reader(f))
    if rows and rows[0] and rows[0][0].strip().isdigit():  # AG News: index, title, description
        for row in rows:
            yield f"{row[1]}. {row[2]}"
        return
    column = rows[0].index(text_column)
    for row in rows[1:]:
        yield row[column]


async def classify(classifier: QwenClassifier, texts: list[str], chunk: int) -> list[dict]:
    out: list[dict] = []
    with tqdm(total=len(texts), unit="row", desc="classifying") as bar:
        for start in range(0, len(texts), chunk):
            part = texts[start : start + chunk]
            for result in await classifier.abatch(part, return_exceptions=True):
                if isinstance(result, Exception):
                    out.append({"label": None, "error": f"{type(result).__name__}: {result}"})
                else:
                    out.append({"label": result.label, "scores": result.scores})
            bar.update(len(part))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("path", type=Path, help="CSV or JSONL file")
    parser.add_argument("--out", type=Path, default=Path("out/labels.jsonl"))
    parser.add_argument("--labels", nargs="+", default=list(AG_NEWS_LABELS))
    parser.add_argument("--text-column", default="text")
    parser.add_argument("--chunk", type=int, default=1024, help="rows per abatch call")
    parser.add_argument("--processes", type=int, default=1, help="client processes per chunk (QwenClassifier)")
    add_server_args(parser)
    args = parser.parse_args()
    texts = list(read_texts(args.path, args.text_column))
    with server_url(args) as url:
        classifier = QwenClassifier(
            labels=args.labels, base_url=url, model=args.served_model_name, client_processes=args.processes
        )
        # A batch is spread over the processes only with at least 1,024 rows for each.
        chunk = max(args.chunk, 1024 * args.processes) if args.processes > 1 else args.chunk
        try:
            results = asyncio.run(classify(classifier, texts, chunk))
        finally:
            classifier.close()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    with args.out.open("w") as f:
        for text, result in zip(texts, results):
            f.write(json.dumps({"text": text, **result}) + "\n")
    failed = sum(r["label"] is None for r in results)
    print(f"wrote {len(results)} rows to {args.out} ({failed} could not be classified)")


if __name__ == "__main__":
    main()
