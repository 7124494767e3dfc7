"""The documents the index holds for a trajectory: one per step and a summary, with filterable metadata."""

from __future__ import annotations

from typing import Any

from recreate.experience.digest import (
    action_text,
    error_type,
    observation_text,
    one_line,
    outcome_label,
    task_statement,
)
from recreate.experience.schema import Trajectory
from recreate.text import clip_middle

OBSERVATION_CHARS = 600  # per step document; MiniLM reads ~256 tokens anyway


def base_metadata(traj: Trajectory) -> dict[str, Any]:
    scaffold = traj.scaffold
    meta: dict[str, Any] = {
        "trajectory_id": traj.trajectory_id,
        "task_id": traj.task_id,
        "domain": traj.domain,
        "run_id": traj.run_id or "",
        "scaffold_name": scaffold.name if scaffold else "",
        "scaffold_version": (scaffold.version or "") if scaffold else "",
        "model": traj.model.name if traj.model else "",
        "outcome": outcome_label(traj),
        "exit_status": traj.outcome.exit_status,
    }
    if traj.evaluation is not None:
        meta["score"] = float(traj.evaluation.score)
    return meta


def step_documents(traj: Trajectory) -> tuple[list[str], list[str], list[dict[str, Any]]]:
    base = base_metadata(traj)
    ids, docs, metas = [], [], []
    for position, step in enumerate(traj.steps):
        kind = error_type(step)
        text = f"{action_text(step)}\n{observation_text(step, OBSERVATION_CHARS)}"
        if step.error:
            text += f"\nerror: {clip_middle(step.error, 300)}"
        ids.append(f"{traj.trajectory_id}#{position}")
        docs.append(text)
        metas.append({**base, "step": step.index, "error_type": kind})
    return ids, docs, metas


def summary_document(traj: Trajectory) -> str:
    lines = [
        f"task {traj.task_id} ({traj.domain}): {clip_middle(one_line(task_statement(traj)), 800)}",
        f"outcome: {traj.outcome.exit_status}, {outcome_label(traj)}",
    ]
    if traj.evaluation is not None:
        lines.append(
            f"score {traj.evaluation.score:g}; feedback: {clip_middle(traj.evaluation.feedback, 800)}"
        )
    if traj.outcome.error:
        lines.append(f"error: {clip_middle(traj.outcome.error, 300)}")
    return "\n".join(lines)


def where_clause(filters: dict[str, Any]) -> dict[str, Any] | None:
    terms = [{key: value} for key, value in filters.items()]
    if not terms:
        return None
    return terms[0] if len(terms) == 1 else {"$and": terms}
