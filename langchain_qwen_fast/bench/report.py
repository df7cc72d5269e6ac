"""What a benchmark writes: the report's header (date, label, machine), its JSON file (a
dataclass written field by field; written again after each part of a longer run, so a run
cut short keeps what it measured), the rows as a Markdown table, and a bar chart of
requests/s (matplotlib, ``bench`` extra)."""

from __future__ import annotations

import dataclasses
import json
import platform
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from langchain_qwen_fast.bench.measure import PathRow


@dataclass
class Header:
    """When a report was made, the caller's label, and the machine."""

    date: str
    label: str
    machine: str


def header(label: str) -> Header:
    """The header of a report made now on this machine."""
    return Header(
        date=time.strftime("%Y-%m-%d %H:%M:%S"),
        label=label,
        machine=f"{platform.node()} {platform.machine()} python {platform.python_version()}",
    )


def _plain(value: object) -> object:
    """A value JSON has no type for: a dataclass as its fields, anything else (a path) as text."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return dataclasses.asdict(value)
    return str(value)


def as_json(report: object) -> str:
    """``report`` (a dataclass, or lists and mappings of them) as indented JSON, field by field."""
    return json.dumps(report, indent=1, default=_plain)


def write_json(path: Path, report: object) -> None:
    """Write ``report`` (see :func:`as_json`) to ``path``, its folder made if missing."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(as_json(report) + "\n")


def render_table(rows: Sequence[PathRow]) -> str:
    """The rows as a Markdown table."""
    head = (
        f"| {'path':<46} | {'req/s':>8} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} "
        f"| {'CPU ms/req':>10} | {'× fastest':>9} | {'cores: client/API/engine':>24} |"
    )
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]

    def f(v: float | None) -> str:
        return "" if v is None else f"{v:.2f}"

    for r in rows:
        busy = r.cores_busy or {}
        cores = "/".join(f(busy.get(role)) for role in ("client", "api_server", "engine_core")) if busy else ""
        lines.append(
            f"| {r.path:<46} | {r.requests_per_s:>8.1f} | {f(r.p50_ms):>7} | {f(r.p95_ms):>7} | "
            f"{f(r.p99_ms):>7} | {r.client_cpu_ms_per_request:>10.3f} | {r.ratio_to_fastest:>9.3f} "
            f"| {cores:>24} |"
        )
    return "\n".join(lines)


def plot(rows: Sequence[PathRow], path: Path, title: str) -> None:
    """A bar chart of each path's requests/s, written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r.path for r in rows][::-1]
    values = [r.requests_per_s for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    ax.barh(names, values, color=["#2a7" if n.startswith("QwenClassifier") else "#888" for n in names])
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
    ax.set_xlabel("classifications per second (higher is better)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["Header", "as_json", "header", "plot", "render_table", "write_json"]
