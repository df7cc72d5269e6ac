"""From a labelled CSV to a served, calibrated classifier: the README's four commands, run.

    python examples/accuracy_loop.py                                  # the tiny test model, on CPU
    python examples/accuracy_loop.py --base-model Qwen/Qwen3-0.6B --method head

Writes generated, labelled news headlines (train and validation files), then runs
``qwen-fast train``, ``qwen-fast serve`` (in the background), ``qwen-fast eval --calibrate
--save-calibration``, and finally loads the calibrated classifier and labels sample headlines.
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import tempfile
from pathlib import Path

from _local import TINY_MODEL

from langchain_qwen_fast import QwenClassifier
from langchain_qwen_fast.testing.samples import SAMPLE_HEADLINES, labelled_news
from langchain_qwen_fast.testing.tiny_model import build_test_model
from langchain_qwen_fast.training.data import write_labelled

QWEN_FAST = [sys.executable, "-m", "langchain_qwen_fast.cli"]


def run(*args: str) -> None:
    print("$ qwen-fast " + " ".join(args), flush=True)
    subprocess.run([*QWEN_FAST, *args], check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base-model", help="model to fine-tune (default: the tiny test model, built here)")
    parser.add_argument("--method", choices=["sft", "head"], default="sft")
    parser.add_argument(
        "--epochs", type=int, default=3, help="the epoch cap (training stops earlier once it stops improving)"
    )
    parser.add_argument("--work", help="folder for data, model and reports (default: a temporary one)")
    args = parser.parse_args()
    work = Path(args.work or tempfile.mkdtemp(prefix="accuracy-loop-"))
    base = args.base_model or str(build_test_model(TINY_MODEL, "tiny"))
    train_csv = write_labelled(work / "train.csv", labelled_news(1200, 0))
    val_csv = write_labelled(work / "val.csv", labelled_news(400, 2))
    model = work / "model"

    # 1. Train (labels in the file's sorted order unless --labels says otherwise).
    rate = "2e-3" if args.method == "sft" else "1e-3"
    run("train", str(train_csv), "--base-model", base, "--method", args.method, "--out", str(model),
        "--learning-rate", rate, "--epochs", str(args.epochs), "--no-progress")  # fmt: skip

    # 2. Serve it as it is (in the background here; a terminal of its own in real use).
    server = subprocess.Popen(
        [*QWEN_FAST, "serve", "--model", str(model), "--port", "0", "--log", str(work / "server.log")],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        url = ""
        assert server.stdout is not None
        for line in server.stdout:
            print(line, end="", flush=True)
            found = re.search(r"ready in .* at (http\S+/v1)", line)
            if found:
                url = found.group(1)
                break
        if not url:
            raise SystemExit(f"the server did not start; log: {work / 'server.log'}")

        # 3. Evaluate and calibrate on the validation file; save the calibration.
        run("eval", str(val_csv), "--classifier", str(model), "--base-url", url, "--calibrate", "--target-accuracy",
            "0.98", "--save-calibration", "--out", str(work / "eval"), "--latency-samples", "5")  # fmt: skip

        # 4. Use it: the saved, calibrated classifier.
        classifier = QwenClassifier.load(model, base_url=url)
        threshold = classifier.abstain_below
        print(f"\ncalibrated classifier: temperature {classifier.temperature:.3f}, abstain_below {threshold}")
        for headline, result in zip(SAMPLE_HEADLINES, classifier.batch(list(SAMPLE_HEADLINES))):
            label = result.label or "(abstains)"
            print(f"{label:<11} {max((result.scores or {}).values(), default=0):.2f}  {headline}")
    finally:
        server.terminate()
        server.wait(60)


if __name__ == "__main__":
    main()
