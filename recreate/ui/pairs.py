"""The two axes of an evolve run: every (scaffold version, model version) pair a gate measured, with the
seeds each number comes from, read from the run's history (scaffold gates) and models (model gates)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class Measurement:
    """One gate's validation runs of one pair: `source` names the gate, whose seeds are its own."""

    scaffold: str
    model: str | None
    source: str  # "validation of v0", "scaffold gate, round 2", "model gate, round 2"
    scores: dict[str, float]  # "task" or "task#seed" -> score
    accepted: bool  # the pair the gate kept (the candidate when accepted, else the parent)

    @property
    def mean(self) -> float:
        return sum(self.scores.values()) / len(self.scores)

    @property
    def n(self) -> int:
        return len(self.scores)

    @property
    def tasks(self) -> int:
        return len({key.rsplit("#", 1)[0] for key in self.scores})

    @property
    def seeds(self) -> str:
        """Runs per task, e.g. "3 seeds per task"."""
        per_task = self.n / max(1, self.tasks)
        return f"{per_task:g} seed{'s' if per_task != 1 else ''} per task"


def measurements(history: list[dict[str, Any]], models: list[dict[str, Any]]) -> list[Measurement]:
    """In the order the run measured them: each scaffold gate (candidate and re-scored parent, on the
    model then served) and each model gate (parent and candidate model, on the scaffold then HEAD)."""
    out: list[Measurement] = []

    def add(scaffold: Any, model: Any, source: str, scores: Any, accepted: bool) -> None:
        if scaffold and scores:
            out.append(Measurement(str(scaffold), model and str(model), source, dict(scores), accepted))

    for h in history:
        rnd, ok = h.get("round", 0), bool(h.get("accepted"))
        source = f"scaffold gate, round {rnd}" if rnd else "validation of v0"
        add(h.get("parent"), h.get("model"), source, h.get("parent_val"), not ok)
        add(h.get("ref"), h.get("model"), source, h.get("val"), ok)
    for m in models:
        source, ok = f"model gate, round {m.get('round')}", bool(m.get("accepted"))
        add(m.get("scaffold"), m.get("parent"), source, m.get("parent_val"), not ok)
        add(m.get("scaffold"), m.get("model"), source, m.get("val"), ok)
    return out


def version_grid(
    history: list[dict[str, Any]], models: list[dict[str, Any]]
) -> dict[tuple[str, str], tuple[float, int]]:
    """(mean validation score, runs) of each (scaffold version, model version) pair that a gate
    measured, over all its measurements (each gate scores on its own fresh seeds)."""
    pooled: dict[tuple[str, str], list[float]] = {}
    for m in measurements(history, models):
        if m.model:
            pooled.setdefault((m.scaffold, m.model), []).extend(m.scores.values())
    return {pair: (sum(v) / len(v), len(v)) for pair, v in pooled.items()}


def best_pair(history: list[dict[str, Any]], models: list[dict[str, Any]]) -> Measurement | None:
    """The best validation mean a gate kept (the later one on a tie: the run went on from it)."""
    kept = [m for m in measurements(history, models) if m.accepted]
    return max(reversed(kept), key=lambda m: m.mean, default=None)
