"""The run report: one self-contained file (styles and SVG charts inline, no script, no server links)
rendered from the UI's run template, with both axes of the evolution when the run fine-tunes."""

from __future__ import annotations

import re
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
GATE = {"improvement": 0.25, "low": -0.5, "high": 0.75, "n": 4, "tasks": 2, "wins": 2, "losses": 1}
MODEL_STEP = {
    "round": 1, "scaffold": "minimal@v2", "parent": "base", "model": "base+ft1-abcd", "accepted": False,
    "trajectories": 8, "reward_mean": 0.625, "train": {"loss": 0.125, "kl_mu_pi": 0.01},
    "val": {"a#0": 1.0, "a#1": 0.0, "b#0": 1.0, "b#1": 1.0},
    "parent_val": {"a#0": 1.0, "a#1": 1.0, "b#0": 1.0, "b#1": 0.0},
    "gate": GATE, "reason": "rejected: the lower bound is not above 0 <b>",
}  # fmt: skip


def _usage(cost: float) -> dict[str, dict[str, float]]:
    row = {"calls": 3, "prompt_tokens": 900, "completion_tokens": 100, "unpriced_calls": 0}
    return {"agent": row | {"cost_usd": cost}, "optimizer": row | {"cost_usd": cost / 2}}


def _self_contained(page: str) -> None:
    assert "<script" not in page and 'href="/' not in page and 'src="/' not in page
    assert re.findall(r'<img class="chart" alt="[^"]*" src="(\w+):', page) == ["data", "data"]


def test_a_local_run_plots_tokens_per_role_in_one_self_contained_file(tmp_path: Path) -> None:
    result = EvolveResult("local", tmp_path, "minimal@v1", history=[SEED, REJECTED], usage=_usage(0.0))
    path = write_report(result, tmp_path / "report")
    assert [p.name for p in path.parent.iterdir()] == ["report.html"]
    page = path.read_text()
    _self_contained(page)
    assert 'alt="tokens per role (no cost)"' in page and "no usable proposal this round" in page
    assert "Model versions" not in page  # no fine-tuning: one axis


def test_a_paid_run_plots_its_cost_and_shows_its_edits(tmp_path: Path) -> None:
    result = EvolveResult("paid", tmp_path, "minimal@v2", history=[SEED, ACCEPTED], usage=_usage(0.25))
    page = write_report(result, tmp_path / "report").read_text()
    _self_contained(page)
    assert 'alt="cost per role"' in page and "$0.2500" in page
    assert "Print the answer." in page and "runs printed nothing" in page and "[rules]" in page
    assert "system_prompt: &#39;Act&#39; -&gt; &#39;Think, then act&#39;" in page  # what changed, escaped


def test_a_fine_tuning_run_shows_its_model_versions_gates_and_pairs(tmp_path: Path) -> None:
    test = {
        "tasks": 2, "seeds": 1,
        "seed": {"scaffold": "minimal@v1", "model": "base", "mean": 0.5, "low": 0.0, "high": 1.0, "n": 2},
        "final": {"scaffold": "minimal@v2", "model": "base", "mean": 1.0, "low": 1.0, "high": 1.0, "n": 2},
        "difference": {"mean": 0.5, "low": 0.0, "high": 1.0, "n": 2, "better": 1, "worse": 0},
    }  # fmt: skip
    history = [SEED | {"model": "base"}, ACCEPTED | {"model": "base", "parent_val": {"a": 0.0, "b": 1.0}}]
    result = EvolveResult(
        "ft", tmp_path, "minimal@v2", history=history, usage=_usage(0.0),
        models=[MODEL_STEP], final_model="base", test=test,
    )  # fmt: skip
    page = write_report(result, tmp_path / "report").read_text()
    _self_contained(page)
    models = page[page.index('id="model-gates"') : page.index("</table>", page.index('id="model-gates"'))]
    assert "base+ft1-abcd" in models and "rejected" in models and "+0.250" in models
    assert "[-0.500, +0.750]" in models and "4 (2 tasks)" in models and "2 / 1" in models
    assert "loss 0.125" in models and "&lt;b&gt;" in models  # training metrics; the reason escaped
    grid = page[page.index('id="pair-grid"') :]
    assert "0.750 <small>(4 runs)</small>" in grid  # base+ft1 on minimal@v2: one gate's 4 runs
    assert "model gate, round 1 · 2 seeds per task" in grid
    assert "final − seed: <b>+0.500</b>" in page and 'id="final-model">base<' in page
