"""Reading py-spy's collapsed stacks: samples per process, by function."""

from __future__ import annotations

from benchmarks.cpu_profile import summarize_profile

API = 'process 10:"python -m vllm.entrypoints.openai.api_server --model m"'
ENGINE = 'process 11:"VLLM::EngineCore"'
COLLAPSED = f"""{API};run (runners.py:10);decode (detokenizer.py:5) 30
{API};run (runners.py:10);validate (protocol.py:40) 10
{API};{ENGINE};busy_loop (core.py:1);execute_model (model_runner.py:9);forward (qwen3.py:3) 45
{API};{ENGINE};busy_loop (core.py:1);schedule (scheduler.py:2) 15
not a sample line
"""


def test_samples_go_to_the_innermost_process_with_self_and_inclusive_shares() -> None:
    report = summarize_profile(COLLAPSED)
    assert list(report) == ["VLLM::EngineCore", "python -m vllm.entrypoints.openai.api_server --model m"]
    engine = report["VLLM::EngineCore"]
    assert engine.samples == 60
    assert engine.self_pct == {"forward (qwen3.py)": 75.0, "schedule (scheduler.py)": 25.0}
    assert engine.inclusive_pct["busy_loop (core.py)"] == 100.0
    assert engine.inclusive_pct["execute_model (model_runner.py)"] == 75.0
    api = report["python -m vllm.entrypoints.openai.api_server --model m"]
    assert api.samples == 40 and api.self_pct["decode (detokenizer.py)"] == 75.0
    assert "busy_loop (core.py)" not in api.inclusive_pct  # a child's frames stay the child's
