"""``benchmarks.service_lists``' pure parts: the options and each path's summary over rounds."""

from __future__ import annotations

import pytest

from benchmarks.service_lists import Measurement, build_parser, summarise


def test_each_service_is_set_against_the_same_rounds_abatch() -> None:
    rows = [
        Measurement(0, "QwenClassifier.abatch", 100, 1.0, 100.0),
        Measurement(0, "qwen-fast api, 1 worker", 100, 1.0, 90.0),
        Measurement(1, "qwen-fast api, 1 worker", 100, 1.0, 100.0),
        Measurement(1, "QwenClassifier.abatch", 100, 1.0, 200.0),
        Measurement(2, "QwenClassifier.abatch", 100, 1.0, 100.0),
        Measurement(2, "qwen-fast api, 1 worker", 100, 1.0, 95.0),
    ]
    abatch, service = summarise(rows)
    assert abatch.path == "QwenClassifier.abatch" and abatch.median_per_s == 100.0
    assert abatch.median_ratio_to_abatch is None
    assert service.ratios_to_abatch == [0.9, 0.5, 0.95] and service.median_ratio_to_abatch == 0.9


def test_the_options_take_worker_counts_and_the_services_own_options() -> None:
    options = build_parser().parse_args(["--workers", "1,4", "--api-args=--max-queued-texts=8192"])
    assert options.workers == [1, 4] and options.api_args == "--max-queued-texts=8192"
    assert (options.list_texts, options.clients, options.base_url) == (256, 16, None)
    for bad in (["--workers", "0"], ["--workers", "one"], ["--clients", "0"]):
        with pytest.raises(SystemExit):
            build_parser().parse_args(bad)
