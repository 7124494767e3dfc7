"""Charts take every label as text: a task id, run or model name with "$...$" in it (from a tasks file,
or a model) is neither rendered as math nor a parse error that loses the page."""

from __future__ import annotations

import base64

from recreate.evaluation.metrics import Summary
from recreate.evaluation.report import write_chart
from recreate.ui.charts import Series, bar_chart, line_chart

MATH = r"a$\foo{$"  # matplotlib's mathtext fails on it: "Unknown symbol"


def test_ui_charts_draw_labels_with_dollars_as_text() -> None:
    for chart in (
        bar_chart([MATH, "b"], [1.0, 2.0], title=MATH),
        line_chart([Series(MATH, [0, 1], [0.2, 0.4], labels=[MATH, "$x$"])], title="curve"),
    ):
        svg = base64.b64decode(str(chart).split("base64,")[1].split('"')[0])
        assert svg.startswith(b"<?xml") and b"<svg" in svg


def test_the_eval_chart_draws_a_task_id_with_dollars(tmp_path) -> None:
    rows = [{"task_id": MATH, "seed": 0, "passed": True, "score": 1.0}]
    summary = Summary(tasks=1, rollouts=1, pass_at_1=1.0, pass_at_1_ci=(1.0, 1.0), mean_score=1.0,
                      mean_score_ci=(1.0, 1.0), total_cost_usd=0.0, cost_per_task_usd=None,
                      unpriced_rollouts=0, mean_steps=1.0, exit_statuses={"submitted": 1})  # fmt: skip
    path = write_chart(tmp_path / "chart.png", rows, summary, title=f"{MATH} on jsonl/all")
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
