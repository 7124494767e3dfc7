"""On-demand inspection of the experience store: list, read (views), search and compare, as compact text
within a token budget (tokens ≈ chars / 4). The meta-agent reaches these through `experience_tools`.

Held-out tasks (an optimizer run's validation and test tasks) are invisible here in every call: their
runs stay in the store for reports and for TAPO, but the meta-agent must not learn from the tasks the gate
judges it on. A hidden run reads as "no trajectory", and searches skip it (and memory items citing it).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection
from typing import Any

from recreate.experience.digest import action_text, error_type, is_failure, one_line, outcome_label
from recreate.experience.schema import Trajectory
from recreate.experience.store import ExperienceStore, TrajectoryNotFoundError
from recreate.experience.views import CHARS_PER_TOKEN, DEFAULT_BUDGET, fit, render, section

COMPARE_CONTEXT = 3  # steps shown on each side after the point of divergence


class ExperienceInspector:
    def __init__(
        self,
        store: ExperienceStore,
        *,
        budget_tokens: int = DEFAULT_BUDGET,
        allow_evaluation: bool = True,
        allow_steps: bool = True,
        hidden_tasks: Collection[str] = (),
    ) -> None:
        """`allow_evaluation=False` hides evaluation feedback and details (pass/fail and score stay);
        `allow_steps=False` refuses step-level search (step documents hold actions and outputs);
        `hidden_tasks`: task ids whose runs are never shown."""
        self.store = store
        self.budget_tokens = budget_tokens
        self.allow_evaluation = allow_evaluation
        self.allow_steps = allow_steps
        self.hidden_tasks = frozenset(hidden_tasks)

    def _hidden_runs(self) -> set[str]:
        return {e.id for task in self.hidden_tasks for e in self.store.list({"task_id": task})}

    def _load(self, trajectory_id: str) -> Trajectory:
        entry = self.store.catalog.get(trajectory_id)
        if entry is not None and entry.task_id in self.hidden_tasks:
            raise TrajectoryNotFoundError(f"no trajectory {trajectory_id!r}")
        traj = self.store.get(trajectory_id)
        if self.allow_evaluation or traj.evaluation is None:
            return traj
        hidden = traj.evaluation.model_copy(update={"feedback": "(hidden)", "details": {}})
        return traj.model_copy(update={"evaluation": hidden})

    def _budget(self, budget_tokens: int | None) -> int:
        return budget_tokens or self.budget_tokens

    def list_experiences(
        self, filters: dict[str, Any] | None = None, limit: int = 50, budget_tokens: int | None = None
    ) -> str:
        entries = [e for e in self.store.list(filters) if e.task_id not in self.hidden_tasks]
        lines = [
            f"  {e.id} | task {e.task_id} | {e.domain} | {e.scaffold_name or '-'}@{e.scaffold_version or '-'}"
            " | "
            f"{e.outcome} {'' if e.score is None else f'{e.score:g} '}| {e.exit_status} | {e.n_steps} steps"
            for e in entries[-limit:]
        ]
        budget = self._budget(budget_tokens)
        title = f"{len(entries)} trajectories" + (f" (newest {limit} shown)" if len(entries) > limit else "")
        return fit(section(title, lines, budget * CHARS_PER_TOKEN - 40), budget)

    def read_trajectory(
        self, trajectory_id: str, view: str = "index", budget_tokens: int | None = None
    ) -> str:
        if not self.allow_evaluation and view.strip() == "evaluation":
            raise ValueError("evaluation details are not available in this run")
        return render(self._load(trajectory_id), view, self._budget(budget_tokens))

    def search_experience(
        self,
        query: str,
        filters: dict[str, Any] | None = None,
        k: int = 5,
        scope: str = "steps",
        budget_tokens: int | None = None,
    ) -> str:
        if not self.allow_evaluation and scope == "summaries":
            raise ValueError("summaries hold evaluation feedback, which is not available in this run")
        if not self.allow_steps and scope == "steps":
            raise ValueError("the agent's steps are not available in this run; search summaries or memory")
        hits = self._visible_hits(query, scope, filters, k)
        budget = self._budget(budget_tokens)
        per_hit = max(budget * CHARS_PER_TOKEN // max(len(hits), 1) - 120, 80)
        lines = []
        for hit in hits:
            meta = hit.metadata
            where = f"{hit.trajectory_id} step {meta.get('step')}" if scope == "steps" else hit.id
            label = f"task {meta.get('task_id', '-')} | {meta.get('outcome', '-')}"
            if scope == "steps":
                label += f" | {meta.get('error_type')}"
            elif scope == "memory":
                label = f"memory {meta.get('title', '')}"
            snippet = one_line(hit.document)[:per_hit]
            lines.append(f"[{hit.distance:.3f}] {where} | {label}\n    {snippet}")
        return fit("\n".join(lines) or "no matches", budget)

    def _visible_hits(self, query: str, scope: str, filters: dict[str, Any] | None, k: int) -> list[Any]:
        """The k nearest hits outside the hidden tasks: asks for more until k are visible or none are left."""
        if not self.hidden_tasks:
            return self.store.search(query, scope=scope, filters=filters, k=k)
        hidden_runs = self._hidden_runs()
        citing = {
            str(item["id"])
            for item in self.store.memory_items()
            if hidden_runs & set(item.get("evidence") or [])
        }
        wanted = k
        while True:
            hits = self.store.search(query, scope=scope, filters=filters, k=wanted)
            visible = [
                h
                for h in hits
                if h.metadata.get("task_id") not in self.hidden_tasks
                and h.trajectory_id not in hidden_runs
                and not (scope == "memory" and h.id in citing)
            ]
            if len(visible) >= k or len(hits) < wanted:
                return visible[:k]
            wanted *= 4

    def compare(self, trajectory_ids: list[str], budget_tokens: int | None = None) -> str:
        """Where successful and failed runs of the same task diverge."""
        trajs = [self._load(i) for i in trajectory_ids]
        by_task: dict[str, list[Trajectory]] = defaultdict(list)
        for traj in trajs:
            by_task[traj.task_id].append(traj)
        budget = self._budget(budget_tokens)
        table = [
            f"  {t.trajectory_id} | task {t.task_id} | {outcome_label(t)} | {t.outcome.exit_status} | "
            f"{len(t.steps)} steps | {sum(map(is_failure, t.steps))} failing"
            for t in trajs
        ]
        parts = ["\n".join(["runs:", *table])]
        for task_id, group in by_task.items():
            good = [t for t in group if outcome_label(t) == "passed"]
            bad = [t for t in group if outcome_label(t) != "passed"]
            if not good or not bad:
                parts.append(
                    f"task {task_id}: no passed/failed pair to compare ({len(good)} passed, {len(bad)} not)"
                )
                continue
            parts.append(divergence(good[0], bad[0], budget * CHARS_PER_TOKEN // (2 * len(by_task))))
        return fit("\n\n".join(parts), budget)


def divergence(good: Trajectory, bad: Trajectory, limit: int) -> str:
    good_actions = [one_line(action_text(s)) for s in good.steps]
    bad_actions = [one_line(action_text(s)) for s in bad.steps]
    same = 0
    while same < min(len(good_actions), len(bad_actions)) and good_actions[same] == bad_actions[same]:
        same += 1
    width = max(limit // (2 * COMPARE_CONTEXT + 4), 60)
    lines = [
        f"task {good.task_id}: passed {good.trajectory_id} vs failed {bad.trajectory_id}",
        f"  identical first {same} step(s)" if same else "  they differ from the first step",
    ]
    for label, traj in (("passed", good), ("failed", bad)):
        after = traj.steps[same : same + COMPARE_CONTEXT]
        if not after:
            lines.append(f"  {label}: stops after step {same - 1} ({traj.outcome.exit_status})")
        for step in after:
            mark = f" [{error_type(step)}]" if is_failure(step) else ""
            lines.append(f"  {label} step {step.index}: {action_text(step)[:width]}{mark}")
    if bad.evaluation is not None and bad.evaluation.feedback:
        lines.append(f"  failed run's feedback: {one_line(bad.evaluation.feedback)[: width * 2]}")
    return "\n".join(lines)
