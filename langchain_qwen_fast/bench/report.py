"""What a benchmark writes: the report's header (date, label, machine), its JSON file (written
again after each part, so a run cut short keeps what it measured), the rows as a Markdown
table, and a bar chart of requests/s (matplotlib, ``bench`` extra)."""

from __future__ import annotations

import json
import platform
import time
from pathlib import Path
from typing import Any


def header(label: str) -> dict[str, Any]:
    """The fields every report starts with: when, the caller's ``label`` and this machine."""
    return {
        "date": time.strftime("%Y-%m-%d %H:%M:%S"),
        "label": label,
        "machine": f"{platform.node()} {platform.machine()} python {platform.python_version()}",
    }


def write_json(path: Path, report: dict[str, Any]) -> None:
    """Write ``report`` to ``path`` (its folder made if missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=1))


def render_table(rows: list[dict[str, Any]]) -> str:
    """The rows as a Markdown table."""
    head = (
        f"| {'path':<46} | {'req/s':>8} | {'p50 ms':>7} | {'p95 ms':>7} | {'p99 ms':>7} "
        f"| {'CPU ms/req':>10} | {'× fastest':>9} | {'cores: client/API/engine':>24} |"
    )
    lines = [head, "|" + "|".join("-" * (len(c)) for c in head.split("|")[1:-1]) + "|"]
    for r in rows:

        def f(v: float | None) -> str:
            return "" if v is None else f"{v:.2f}"

        busy = r.get("cores_busy")
        cores = f"{busy['client']:.2f}/{busy['api_server']:.2f}/{busy['engine_core']:.2f}" if busy else ""
        lines.append(
            f"| {r['path']:<46} | {r['requests_per_s']:>8.1f} | {f(r['p50_ms']):>7} | {f(r['p95_ms']):>7} | "
            f"{f(r['p99_ms']):>7} | {r['client_cpu_ms_per_request']:>10.3f} | {r['ratio_to_fastest']:>9.3f} "
            f"| {cores:>24} |"
        )
    return "\n".join(lines)


def plot(rows: list[dict[str, Any]], path: Path, title: str) -> None:
    """A bar chart of each path's requests/s, written to ``path``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = [r["path"] for r in rows][::-1]
    values = [r["requests_per_s"] for r in rows][::-1]
    fig, ax = plt.subplots(figsize=(9, 0.45 * len(rows) + 1.2))
    ax.barh(names, values, color=["#2a7" if n.startswith("QwenClassifier") else "#888" for n in names])
    for y, v in enumerate(values):
        ax.text(v, y, f" {v:.0f}", va="center", fontsize=8)
    ax.set_xlabel("classifications per second (higher is better)")
    ax.set_title(title, fontsize=9)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


__all__ = ["header", "plot", "render_table", "write_json"]
