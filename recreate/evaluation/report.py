"""Evaluation reports: results JSON, a rich summary table, an HTML page with a per-task table and a PNG."""

from __future__ import annotations

import html
import json
import math
import os
import uuid
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table

from recreate.console import make_console
from recreate.evaluation.errors import ERROR_KEY, error_reason, is_rollout_error
from recreate.evaluation.metrics import Summary
from recreate.experience.schema import Trajectory

FEEDBACK_CHARS = 300


def task_row(traj: Trajectory) -> dict[str, Any]:
    ev = traj.evaluation
    feedback = error_reason(traj) if is_rollout_error(traj) else ev.feedback if ev else ""
    return {
        "task_id": traj.task_id,
        "seed": traj.seed,
        "group": traj.metadata.get("task_group"),
        "passed": bool(ev and ev.passed),
        "score": ev.score if ev else None,  # None: no verdict (an error, or not evaluated)
        "exit_status": traj.outcome.exit_status,
        "error": traj.metadata.get(ERROR_KEY),  # endpoint, machine, evaluator: no score, rerun to retry
        "steps": traj.totals.steps,
        "format_errors": traj.totals.format_errors,
        "cost_usd": traj.totals.cost_usd,
        "duration_s": traj.metadata.get("rollout_duration_s", traj.totals.duration_s),
        "feedback": feedback[:FEEDBACK_CHARS],
        "trajectory_id": traj.trajectory_id,
    }


def write_json(path: Path, doc: dict[str, Any]) -> Path:
    """Atomic (temp + rename): a reader never sees half a results file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
    tmp.write_text(json.dumps(doc, indent=1, default=str), encoding="utf-8")
    os.replace(tmp, path)
    return path


def _fmt_ci(value: float, ci: tuple[float, float]) -> str:
    if any(math.isnan(x) for x in ci):
        return f"{value:.3f}"
    return f"{value:.3f} [{ci[0]:.3f}, {ci[1]:.3f}]"


def _fmt_cost(value: float | None) -> str:
    return "unknown" if value is None else f"${value:.4f}"


def summary_table(summary: Summary, title: str) -> Table:
    table = Table(title=title, show_header=True)
    table.add_column("metric")
    table.add_column("value", justify="right")
    table.add_row("tasks / rollouts", f"{summary.tasks} / {summary.rollouts}")
    if summary.rollouts:
        table.add_row("pass@1 (95% CI)", _fmt_ci(summary.pass_at_1, summary.pass_at_1_ci))
        table.add_row("mean score (95% CI)", _fmt_ci(summary.mean_score, summary.mean_score_ci))
    else:  # every rollout an error: a 0 here would read as a measurement
        table.add_row("pass@1 (95% CI)", "n/a (no rollout scored)")
    table.add_row("cost per task", _fmt_cost(summary.cost_per_task_usd))
    table.add_row("total cost", f"${summary.total_cost_usd:.4f}" + (
        f" (+{summary.unpriced_rollouts} unpriced rollouts)" if summary.unpriced_rollouts else ""
    ))  # fmt: skip
    table.add_row("mean steps", f"{summary.mean_steps:.1f}")
    table.add_row("exit statuses", ", ".join(f"{k}={v}" for k, v in sorted(summary.exit_statuses.items())))
    if summary.endpoint_errors:
        table.add_row("endpoint errors (not scored; rerun to retry)", str(summary.endpoint_errors))
    if summary.machine_errors:
        table.add_row("sandbox/evaluator errors (not scored; rerun to retry)", str(summary.machine_errors))
    return table


def print_summary(summary: Summary, title: str, console: Console | None = None) -> None:
    (console or make_console()).print(summary_table(summary, title))


def write_chart(path: Path, rows: list[dict[str, Any]], summary: Summary, title: str) -> Path:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    with matplotlib.rc_context({"text.parse_math": False}):  # a task id's "$..$" is text, not math
        return _draw_chart(plt, path, rows, summary, title)


def _draw_chart(plt: Any, path: Path, rows: list[dict[str, Any]], summary: Summary, title: str) -> Path:
    fig, (left, right) = plt.subplots(
        1, 2, figsize=(max(7.0, 4 + 0.25 * len(rows)), 3.8), gridspec_kw={"width_ratios": [3, 1]}
    )
    labels = [f"{r['task_id']}" + (f"/s{r['seed']}" if r["seed"] else "") for r in rows]
    colours = ["#adb5bd" if r.get("error") else "#2a9d8f" if r["passed"] else "#e76f51" for r in rows]
    heights = [max(r["score"] or 0.0, 0.02) for r in rows]  # a 0 (or no score) stays visible
    left.bar(range(len(rows)), heights, color=colours)
    left.set_xticks(range(len(rows)), labels, rotation=70, ha="right", fontsize=7)
    left.set_ylim(0, 1.05)
    left.set_ylabel("score")
    left.set_title("per task (green: passed, red: failed)")
    values = [summary.pass_at_1, summary.mean_score]
    cis = [summary.pass_at_1_ci, summary.mean_score_ci]
    errors = [[0 if math.isnan(c[0]) else v - c[0] for v, c in zip(values, cis, strict=True)],
              [0 if math.isnan(c[1]) else c[1] - v for v, c in zip(values, cis, strict=True)]]  # fmt: skip
    right.bar([0, 1], values, yerr=errors, capsize=6, color=["#264653", "#8ab17d"])
    right.set_xticks([0, 1], ["pass@1", "mean score"])
    right.set_ylim(0, 1.05)
    right.set_title("95% bootstrap CI")
    fig.suptitle(title)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_html(path: Path, doc: dict[str, Any], chart: str | None) -> Path:
    summary = doc["summary"]
    esc = html.escape
    run = "".join(
        f"<tr><th>{esc(k)}</th><td>{esc(str(v))}</td></tr>" for k, v in doc["run"].items() if v is not None
    )
    head = (
        f"<p><b>pass@1</b> {_fmt_ci(summary['pass_at_1'], tuple(summary['pass_at_1_ci']))} &nbsp; "
        f"<b>mean score</b> {_fmt_ci(summary['mean_score'], tuple(summary['mean_score_ci']))} &nbsp; "
        f"<b>cost per task</b> {_fmt_cost(summary['cost_per_task_usd'])} &nbsp; "
        f"<b>tasks</b> {summary['tasks']} ({summary['rollouts']} rollouts)</p>"
    )
    columns = ["task_id", "seed", "group", "passed", "score", "exit_status", "steps", "cost_usd", "feedback"]
    rows = "".join(
        "<tr class='{}'>{}</tr>".format(
            "pass" if r["passed"] else "fail",
            "".join(f"<td>{esc('' if r[c] is None else str(r[c]))}</td>" for c in columns),
        )
        for r in doc["tasks"]
    )
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>{esc(doc["title"])}</title>
<style>body{{font-family:sans-serif;margin:2em}} table{{border-collapse:collapse;font-size:13px}}
td,th{{border:1px solid #ccc;padding:3px 6px;text-align:left;vertical-align:top}}
tr.pass td:nth-child(4){{color:#2a9d8f}} tr.fail td:nth-child(4){{color:#e76f51}}</style></head><body>
<h1>{esc(doc["title"])}</h1>{head}
{f'<img src="{esc(chart)}" alt="scores">' if chart else ""}
<h2>Run</h2><table>{run}</table>
<h2>Tasks</h2><table><tr>{"".join(f"<th>{c}</th>" for c in columns)}</tr>{rows}</table>
</body></html>"""
    path.write_text(page, encoding="utf-8")
    return path
