"""``qwen-fast eval``: accuracy, macro-F1 and calibration of a classifier on a labelled file,
with plots.

    from langchain_qwen_fast.evaluation import EvalOptions, evaluate, render_report
    from langchain_qwen_fast.training import LabelledFile

    report = evaluate(LabelledFile("val.csv"), EvalOptions(classifier="models/news", calibrate=True))
    print(render_report(report))

Modules: ``options`` (:class:`EvalOptions`), ``metrics`` (scores against the truth),
``report`` (running the classifier over a file, the calibration report, saving calibration)
and ``plots`` (the PNGs). Needs the ``eval`` extra.
"""

from __future__ import annotations

from langchain_qwen_fast.evaluation.options import EvalOptions
from langchain_qwen_fast.evaluation.report import evaluate, render_report

__all__ = ["EvalOptions", "evaluate", "render_report"]
