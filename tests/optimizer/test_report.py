"""The run report: plots that say something for the run at hand (tokens when the models cost nothing,
no empty edits plot) and a page that shows only the plots it wrote."""

from __future__ import annotations

from pathlib import Path

from recreate.optimizer.optimizer import EvolveResult
from recreate.optimizer.report import write_report

SEED = {"ref": "minimal@v1", "round": 0, "parent": None, "accepted": True, "val": {"a": 0.0, "b": 1.0}}
REJECTED = {"round": 1, "parent": "minimal@v1", "accepted": False, "reason": "no usable proposal this round"}
ACCEPTED = {
    "ref": "minimal@v2", "round": 1, "parent": "minimal@v1", "accepted": True, "val": {"a": 1.0, "b": 1.0},
    "ops": [
        {"op": "add_rule", "text": "Print the answer.", "rationale": "runs printed nothing"},
        {"op": "replace_text", "field": "system_prompt", "old": "Act", "new": "Think, then act"},
    ],
    "reason": "accepted: improvement +0.500",
}  # fmt: skip


def _usage(cost: float) -> dict[str, dict[str, float]]:
    row = {"calls": 3, "prompt_tokens": 900, "completion_tokens": 100, "unpriced_calls": 0}
    return {"agent": row | {"cost_usd": cost}, "optimizer": row | {"cost_usd": cost / 2}}


def test_a_local_run_plots_tokens_per_role_and_no_empty_edits_plot(tmp_path: Path) -> None:
    result = EvolveResult("local", tmp_path, "minimal@v1", history=[SEED, REJECTED], usage=_usage(0.0))
    page = write_report(result, tmp_path / "report").read_text()
    assert (tmp_path / "report" / "spend_per_role.png").stat().st_size > 0
    assert not (tmp_path / "report" / "edits_per_component.png").exists()
    assert '<img src="spend_per_role.png">' in page and "edits_per_component" not in page
    assert "no usable proposal this round" in page


def test_a_paid_run_plots_its_cost_and_its_accepted_edits(tmp_path: Path) -> None:
    result = EvolveResult("paid", tmp_path, "minimal@v2", history=[SEED, ACCEPTED], usage=_usage(0.25))
    page = write_report(result, tmp_path / "report").read_text()
    for plot in ("scores.png", "spend_per_role.png", "edits_per_component.png"):
        assert (tmp_path / "report" / plot).stat().st_size > 0 and f'<img src="{plot}">' in page
    assert "$0.2500" in page and "Print the answer." in page and "runs printed nothing" in page
    assert "system_prompt: &#x27;Act&#x27; -&gt; &#x27;Think, then act&#x27;" in page  # what changed, escaped
