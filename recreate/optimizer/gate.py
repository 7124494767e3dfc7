"""The gate: a candidate version is accepted only if it holds up against its parent on held-out tasks.

Scores are paired (same validation tasks, same seeds). Accept when the candidate's mean is not worse
than the parent's by more than `tolerance`; the reason is recorded either way.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass


@dataclass
class GateResult:
    accepted: bool
    reason: str
    parent_mean: float
    candidate_mean: float
    wins: int
    losses: int
    ties: int
    n: int

    def to_dict(self) -> dict:
        return asdict(self)


def paired_gate(
    parent: dict[str, float], candidate: dict[str, float], *, tolerance: float = 0.0
) -> GateResult:
    tasks = sorted(set(parent) & set(candidate))
    if not tasks:
        return GateResult(False, "no validation task was scored for both versions", 0.0, 0.0, 0, 0, 0, 0)
    diffs = [candidate[t] - parent[t] for t in tasks]
    p_mean = sum(parent[t] for t in tasks) / len(tasks)
    c_mean = sum(candidate[t] for t in tasks) / len(tasks)
    wins, losses = sum(d > 0 for d in diffs), sum(d < 0 for d in diffs)
    accepted = c_mean >= p_mean - tolerance
    verdict = "accepted" if accepted else "rejected"
    reason = (
        f"{verdict}: val mean {c_mean:.3f} vs parent {p_mean:.3f} (tolerance {tolerance:g}) "
        f"on {len(tasks)} paired tasks; {wins} better, {losses} worse"
    )
    return GateResult(accepted, reason, p_mean, c_mean, wins, losses, len(tasks) - wins - losses, len(tasks))
