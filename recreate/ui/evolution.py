"""What the run page (and its static export, report.html) shows of an evolve run: both axes of the
evolution (scaffold versions and model versions, each with its gate decision), the scaffold × model
grid with the seeds behind each number, the fine-tuning steps with their training metrics, the final
test, the edits with their evidence, the proposals of each round, the spend and the charts."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from markupsafe import Markup

from recreate.ui.charts import ACCEPTED, REJECTED, Series, bar_chart, line_chart
from recreate.ui.lineage import RoundProposals, VersionNode, proposals_by_round, version_tree
from recreate.ui.pairs import Measurement, best_pair, measurements
from recreate.ui.runs import EvolveRun, mean

# training metrics shown beside each fine-tuning step (the training page plots them all)
TRAIN_METRICS = ("loss", "reward_mean", "kl_mu_pi", "clip_frac", "ratio_q50", "train_s")


@dataclass
class GridCell:
    measured: list[Measurement]  # every gate's runs of the pair, in the order the run made them

    @property
    def mean(self) -> float:
        return sum(sum(m.scores.values()) for m in self.measured) / self.n

    @property
    def n(self) -> int:
        return sum(m.n for m in self.measured)


@dataclass
class RunView:
    run: EvolveRun
    nodes: list[VersionNode]  # the scaffold lineage as a tree
    scaffolds: list[dict[str, Any]]  # one per scaffold gate (history), with val mean, n, seeds
    models: list[dict[str, Any]]  # one per fine-tuning step, with its gate and training metrics
    grid_rows: list[str]  # scaffold versions
    grid_cols: list[str]  # model versions
    grid: dict[tuple[str, str], GridCell]
    best: Measurement | None
    final_scaffold: str | None
    final_model: str | None
    rounds: list[RoundProposals]
    reflections: list[dict[str, Any]]  # every reflection with its transcript (a finished run's)
    usage: dict[str, dict[str, float]]
    scores_chart: Markup
    cost_chart: Markup

    @property
    def test(self) -> dict[str, Any] | None:
        return (self.run.result or {}).get("test")

    @property
    def edits(self) -> list[dict[str, Any]]:
        return [h for h in self.scaffolds if h.get("ops")]


def short(version: str | None) -> str:
    """A version's short name for a chart: "v3" of "arith@v3", "ft1" of "base+ft1-ab12", "base"."""
    if not version:
        return "-"
    if "@" in version:
        return version.rsplit("@", 1)[1]
    return version.rsplit("+", 1)[1].split("-", 1)[0] if "+" in version else "base"


def _scaffold_rows(run: EvolveRun) -> list[dict[str, Any]]:
    rows = []
    for h in run.history:
        val = h.get("val") or {}
        tasks = len({k.rsplit("#", 1)[0] for k in val})
        rows.append(h | {"val_mean": mean(val), "n": len(val), "tasks": tasks, "gate": h.get("gate") or {}})
    return rows


def training_id(run: EvolveRun, rnd: int) -> str | None:
    """The training page's id of the fine-tuning step after round `rnd`, when its metrics exist."""
    folder = run.dir / "finetune" / f"round-{rnd:03d}" / "train"
    return (
        f"runs/{run.id}/finetune/{folder.parent.name}/train" if (folder / "metrics.jsonl").is_file() else None
    )


def _model_rows(run: EvolveRun) -> list[dict[str, Any]]:
    rows = []
    for m in run.models:
        train = m.get("train") or {}
        rows.append(
            m
            | {
                "val_mean": mean(m.get("val")),
                "parent_mean": mean(m.get("parent_val")),
                "gate": m.get("gate") or {},
                "training": training_id(run, int(m.get("round", 0))),
                "metrics": {k: train[k] for k in TRAIN_METRICS if isinstance(train.get(k), int | float)},
            }
        )
    return rows


def _grid(run: EvolveRun) -> tuple[list[str], list[str], dict[tuple[str, str], GridCell]]:
    grid: dict[tuple[str, str], GridCell] = {}
    for m in measurements(run.history, run.models):
        grid.setdefault(
            (m.scaffold, m.model or run.config.get("agent_model", "?")), GridCell([])
        ).measured.append(m)
    rows = list(dict.fromkeys(s for s, _ in grid))
    cols = list(dict.fromkeys(m for _, m in grid))
    return rows, cols, grid


def _scores_chart(scaffolds: list[dict[str, Any]], models: list[dict[str, Any]]) -> Markup:
    """Validation mean of each candidate by round: scaffold versions (circles) and model versions
    (squares, just after the round whose end trained them); green accepted, red rejected."""
    gated = [h for h in scaffolds if h["val_mean"] is not None]
    tuned = [m for m in models if m["val_mean"] is not None]
    series = [
        Series(
            "scaffold versions",
            [int(h.get("round", 0)) for h in gated],
            [h["val_mean"] for h in gated],
            [ACCEPTED if h.get("accepted") else REJECTED for h in gated],
            labels=[short(h.get("ref")) for h in gated],
        )
    ]
    if tuned:
        series.append(
            Series(
                "model versions",
                [int(m.get("round", 0)) + 0.25 for m in tuned],
                [m["val_mean"] for m in tuned],
                [ACCEPTED if m.get("accepted") else REJECTED for m in tuned],
                marker="s",
                labels=[short(m.get("model")) for m in tuned],
            )
        )
    return line_chart(
        series, "validation mean per candidate", y_range=(0.0, 1.0), x_label="round", integer_x=True
    )


def _amount(value: Any) -> float:
    """A usage number; 0 for anything else (a hand-edited file: the usage table shows it as it is)."""
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0.0


def _cost_chart(usage: dict[str, dict[str, float]]) -> Markup:
    costs = [_amount(u.get("cost_usd")) for u in usage.values()]
    if any(costs):
        return bar_chart(list(usage), costs, "cost per role", "USD")
    tokens = [_amount(u.get("prompt_tokens")) + _amount(u.get("completion_tokens")) for u in usage.values()]
    return bar_chart(list(usage), tokens, "tokens per role (no cost)", "tokens")  # local models: free


def run_view(run: EvolveRun) -> RunView:
    scaffolds, models = _scaffold_rows(run), _model_rows(run)
    rows, cols, grid = _grid(run)
    usage = run.usage()
    return RunView(
        run=run,
        nodes=version_tree(run),
        scaffolds=scaffolds,
        models=models,
        grid_rows=rows,
        grid_cols=cols,
        grid=grid,
        best=best_pair(run.history, run.models),
        final_scaffold=run.final_scaffold,
        final_model=run.final_model,
        rounds=proposals_by_round(run),
        reflections=list((run.result or {}).get("proposals") or []),
        usage=usage,
        scores_chart=_scores_chart(scaffolds, models),
        cost_chart=_cost_chart(usage),
    )
