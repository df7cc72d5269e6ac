"""Classify sample news headlines through a local vLLM server, printing label and latency.

python examples/quickstart.py                  # starts a local server itself
python examples/quickstart.py --base-url http://127.0.0.1:8000/v1
"""

from __future__ import annotations

import argparse
import time

from _local import add_server_args, server_url

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.testing.samples import AG_NEWS_LABELS, SAMPLE_HEADLINES, headlines


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_server_args(parser)
    args = parser.parse_args()
    with server_url(args) as url:
        classifier = QwenClassifier(labels=list(AG_NEWS_LABELS), base_url=url, model=args.served_model_name)
        classifier.invoke("warm-up")  # first call learns the label tokens from the server
        print(f"\n{'label':<9} {'p':>5} {'ms':>6}  headline")
        for headline in SAMPLE_HEADLINES:
            start = time.perf_counter()
            result = classifier.invoke(headline)
            ms = (time.perf_counter() - start) * 1000
            print(f"{result.label:<9} {result.confidence:5.2f} {ms:6.1f}  {headline}")
        texts = headlines(300)  # distinct: identical texts would be sent once and answered everywhere
        start = time.perf_counter()
        results = classifier.batch(texts)
        seconds = time.perf_counter() - start
        print(f"\nbatch of {len(results)} distinct headlines: {len(results) / seconds:.0f} classifications/s")


if __name__ == "__main__":
    main()
