"""The evolve loop as a LangGraph graph.

    start ─► plan ─Send per task─► work (rollout + instance reflection) ─► synthesize ─► gate ─┐
               ▲                                                                            │
               └──────────────────────────── next round ◄──────────────────────────────────┘─► finish

State holds only JSON data (refs, ids, scores, proposals); everything with a connection lives on the
`EvolveLoop` object. Checkpoints (SQLite) let a killed run resume; rollouts and reflections are also
cached on disk, so a node re-run after a kill pays nothing twice.
"""

from __future__ import annotations

import contextvars
import hashlib
import json
import operator
import random
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send
from typing_extensions import TypedDict  # pydantic (LangGraph server schemas) needs it on 3.11

from recreate.domains.base import Domain, Task
from recreate.experience.schema import Trajectory
from recreate.models import BudgetExceeded
from recreate.optimizer.counters import memory_votes
from recreate.optimizer.gate import paired_gate
from recreate.optimizer.proposals import Proposal
from recreate.optimizer.reflect import Ablations, reflect_on_run
from recreate.optimizer.synthesis import SizeBudget, apply_directly, bootstrap, synthesize
from recreate.scaffold import Scaffold, ScaffoldStore

Rollout = Callable[[Scaffold, Task, int], tuple[Trajectory, bool]]  # -> (trajectory, came from cache)


@dataclass
class EvolveConfig:
    rounds: int = 3
    batch_size: int = 4
    max_concurrency: int = 4
    tolerance: float = 0.0
    seed: int = 0
    ablations: Ablations = field(default_factory=Ablations)
    size_budget: SizeBudget = field(default_factory=SizeBudget)
    max_rollouts: int | None = None  # counted over the whole run, across resumes (like the $ ledger)
    max_wall_s: float | None = None  # likewise
    reflect_steps: int = 16
    bootstrap: bool = False  # let the optimizer model write v0 from the seed and the domain description


class EvolveState(TypedDict, total=False):
    round: int
    current: str  # the accepted version, "name@vN"
    current_val: dict[str, float]  # its validation score per task
    batch: list[str]
    results: Annotated[list[dict[str, Any]], operator.add]  # one per (round, task)
    patches: Annotated[list[dict[str, Any]], operator.add]  # one per round
    history: Annotated[list[dict[str, Any]], operator.add]  # one per version (v0 and each candidate)
    final: str


def _isolated(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a nested agent outside this graph's run context, so it does not inherit the evolve
    checkpointer (its own steps are not ours to checkpoint; our caches make its result durable)."""
    return contextvars.Context().run(fn, *args)


def task_seed(base: int, *parts: object) -> int:
    digest = hashlib.sha256(json.dumps([base, *parts], default=str).encode()).hexdigest()
    return int(digest[:8], 16)


class EvolveLoop:
    def __init__(
        self,
        *,
        domain: Domain,
        trainset: list[Task],
        valset: list[Task],
        seed_ref: str,
        scaffolds: ScaffoldStore,
        experience: Any,
        rollout: Rollout,
        optimizer_model: Any,
        synthesis_model: Any,
        sandbox: Any,
        run_dir: Path,
        config: EvolveConfig,
    ):
        self.domain, self.seed_ref, self.scaffolds = domain, seed_ref, scaffolds
        self.trainset, self.valset = trainset, valset
        self.tasks = {t.id: t for t in [*trainset, *valset]}
        self.experience, self.rollout, self.sandbox = experience, rollout, sandbox
        self.model, self.synthesis_model = optimizer_model, synthesis_model
        self.run_dir, self.config = run_dir, config
        self._spent_file = run_dir / "spent.json"  # rollouts and wall time of earlier sessions of the run
        spent = json.loads(self._spent_file.read_text()) if self._spent_file.exists() else {}
        self.rollouts_paid: int = spent.get("rollouts", 0)
        self._wall_before: float = spent.get("wall_s", 0.0)
        self.started = time.monotonic()
        self._spent_lock = threading.Lock()
        self._rollouts_running = 0  # reserved against max_rollouts, not yet paid or found cached
        self._rollout_slots = threading.Condition(self._spent_lock)

    # -- budget ------------------------------------------------------------------------------------
    def wall_s(self) -> float:
        return self._wall_before + time.monotonic() - self.started

    def _check_limits(self) -> None:
        cfg = self.config
        self._save_spent()
        if cfg.max_rollouts is not None and self.rollouts_paid >= cfg.max_rollouts:
            raise BudgetExceeded("rollouts", self.rollouts_paid, cfg.max_rollouts)
        self._check_wall()

    def _check_wall(self) -> None:
        cfg = self.config
        elapsed = self.wall_s()
        if cfg.max_wall_s is not None and elapsed >= cfg.max_wall_s:
            raise BudgetExceeded("wall_s", elapsed, cfg.max_wall_s)

    def _save_spent(self) -> None:
        with self._spent_lock:
            spent = {"rollouts": self.rollouts_paid, "wall_s": round(self.wall_s(), 3)}
            tmp = self._spent_file.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(spent))
            tmp.replace(self._spent_file)

    def _reserve_rollout(self) -> None:
        """Take a slot under max_rollouts, waiting while rollouts already running could fill it: with
        N rollouts at a time the limit is never overshot (a cached one frees its slot unpaid)."""
        self._save_spent()
        limit = self.config.max_rollouts
        with self._rollout_slots:
            while limit is not None and self.rollouts_paid + self._rollouts_running >= limit:
                if self.rollouts_paid >= limit:
                    raise BudgetExceeded("rollouts", self.rollouts_paid, limit)
                self._rollout_slots.wait()
            self._rollouts_running += 1

    def _run(self, scaffold: Scaffold, task: Task, seed: int) -> Trajectory:
        self._reserve_rollout()
        cached = True  # a failed rollout is not paid
        try:
            self._check_wall()
            traj, cached = _isolated(self.rollout, scaffold, task, seed)
        finally:
            with self._rollout_slots:
                self._rollouts_running -= 1
                if not cached:
                    self.rollouts_paid += 1
                self._rollout_slots.notify_all()
        self._save_spent()
        return traj

    def evaluate(self, scaffold: Scaffold) -> dict[str, float]:
        """Validation scores per task; the same seed per task for every version (paired)."""

        def one(task: Task) -> tuple[str, float]:
            traj = self._run(scaffold, task, task_seed(self.config.seed, "val", task.id))
            return task.id, traj.evaluation.score if traj.evaluation else 0.0

        with ThreadPoolExecutor(self.config.max_concurrency) as pool:
            return dict(pool.map(one, self.valset))

    # -- nodes -------------------------------------------------------------------------------------
    def start(self, state: EvolveState) -> dict[str, Any]:
        if state.get("current"):
            return {}
        ref, entry = self.seed_ref, {"parent": None, "accepted": True, "round": 0, "reason": "seed"}
        if self.config.bootstrap:
            seed = self.scaffolds.load(self.seed_ref)
            patch = self._cached(
                "bootstrap",
                lambda: bootstrap(
                    seed, domain_text=self.domain.describe(), model=self.synthesis_model, sandbox=self.sandbox
                ),
            )
            if patch.status == "ok":
                ref = self.scaffolds.apply(
                    self.seed_ref, patch.ops, message="bootstrap", sandbox=self.sandbox
                ).ref
                entry |= {"parent": self.seed_ref, "ops": patch.ops, "reason": "bootstrap"}
        scores = self.evaluate(self.scaffolds.load(ref))
        self.scaffolds.attach_scores(ref, scores, label="val")
        entry |= {"ref": ref, "val": scores}
        return {"round": 0, "current": ref, "current_val": scores, "history": [entry]}

    def plan(self, state: EvolveState) -> dict[str, Any]:
        rng = random.Random(task_seed(self.config.seed, "batch", state["round"]))
        ids = [t.id for t in self.trainset]
        return {"batch": rng.sample(ids, min(self.config.batch_size, len(ids)))}

    def fan_out(self, state: EvolveState) -> list[Send]:
        return [
            Send("work", {"task_id": t, "round": state["round"], "current": state["current"]})
            for t in state["batch"]
        ]

    def work(self, item: dict[str, Any]) -> dict[str, Any]:
        began = time.time()
        scaffold = self.scaffolds.load(item["current"])
        task = self.tasks[item["task_id"]]
        traj = self._run(scaffold, task, task_seed(self.config.seed, "train", item["round"], task.id))
        proposal = self._cached(
            f"reflect-{scaffold.content_hash()[:16]}-{traj.trajectory_id}",
            lambda: reflect_on_run(
                traj,
                scaffold=scaffold,
                domain=self.domain,
                task=task,
                model=self.model,
                experience=self.experience,
                sandbox=self.sandbox,
                ablations=self.config.ablations,
                max_steps=self.config.reflect_steps,
            ),
        )
        score = traj.evaluation.score if traj.evaluation else 0.0
        result = {
            "round": item["round"],
            "task_id": task.id,
            "trajectory_id": traj.trajectory_id,
            "score": score,
            "started": began,
            "finished": time.time(),
        }
        return {"results": [result | {"proposal": proposal.model_dump(mode="json")}]}

    def synthesize(self, state: EvolveState) -> dict[str, Any]:
        self._check_limits()
        rnd = state["round"]
        scaffold = self.scaffolds.load(state["current"])
        proposals = [Proposal(**r["proposal"]) for r in state.get("results", []) if r["round"] == rnd]
        proposals.sort(key=lambda p: p.source)  # fan-out order is not deterministic; the patch must be
        if self.config.ablations.no_synthesis:
            patch = apply_directly(proposals, scaffold=scaffold, sandbox=self.sandbox)
        else:
            patch = self._cached(
                f"synth-{rnd}-{scaffold.content_hash()[:16]}",
                lambda: synthesize(
                    proposals,
                    scaffold=scaffold,
                    domain_text=self.domain.describe(),
                    model=self.synthesis_model,
                    sandbox=self.sandbox,
                    size_budget=self.config.size_budget,
                ),
            )
        if patch.status == "ok":
            runs = [self.experience.get(r["trajectory_id"]) for r in state["results"] if r["round"] == rnd]
            patch.ops = memory_votes(scaffold, runs) + patch.ops
        return {"patches": [{"round": rnd, **patch.model_dump(mode="json")}]}

    def gate(self, state: EvolveState) -> dict[str, Any]:
        rnd, parent = state["round"], state["current"]
        patch = next(p for p in reversed(state["patches"]) if p["round"] == rnd)
        entry: dict[str, Any] = {"round": rnd + 1, "parent": parent, "accepted": False, "ops": patch["ops"]}
        if patch["status"] != "ok":
            entry["reason"] = "no usable proposal this round: " + (
                "; ".join(patch["errors"]) or "nothing to change"
            )
            return {"round": rnd + 1, "history": [entry]}
        try:
            info = self.scaffolds.apply(
                parent,
                patch["ops"],
                rationale=patch["diagnosis"],
                message=f"round {rnd + 1}",
                sandbox=self.sandbox,
            )
        except Exception as exc:  # an invalid candidate is rejected, never a crash
            entry["reason"] = f"candidate failed validation: {type(exc).__name__}: {exc}"
            return {"round": rnd + 1, "history": [entry]}
        if info.ref == parent:
            entry["reason"] = "the patch did not change the scaffold"
            return {"round": rnd + 1, "history": [entry]}
        scores = self.evaluate(self.scaffolds.load(info.ref))
        verdict = paired_gate(state["current_val"], scores, tolerance=self.config.tolerance)
        self.scaffolds.attach_scores(info.ref, scores, label="val", gate=verdict.to_dict())
        entry |= {
            "ref": info.ref,
            "val": scores,
            "accepted": verdict.accepted,
            "reason": verdict.reason,
            "gate": verdict.to_dict(),
        }
        if verdict.accepted:
            return {"round": rnd + 1, "current": info.ref, "current_val": scores, "history": [entry]}
        self.scaffolds.rollback(info.name, to=parent)
        return {"round": rnd + 1, "history": [entry]}

    def next_step(self, state: EvolveState) -> str:
        return "plan" if state["round"] < self.config.rounds else "finish"

    def finish(self, state: EvolveState) -> dict[str, Any]:
        return {"final": state["current"]}

    # -- plumbing ----------------------------------------------------------------------------------
    def _cached(self, key: str, make: Callable[[], Proposal]) -> Proposal:
        path = self.run_dir / "proposals" / f"{key}.json"
        if path.exists():
            return Proposal.model_validate_json(path.read_text(encoding="utf-8"))
        self._check_limits()
        proposal = _isolated(make)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(".tmp")
        tmp.write_text(proposal.model_dump_json(), encoding="utf-8")
        tmp.replace(path)
        return proposal

    def graph(self) -> StateGraph:
        g = StateGraph(EvolveState)
        g.add_node("start", self.start)
        g.add_node("plan", self.plan)
        g.add_node("work", self.work)
        g.add_node("synthesize", self.synthesize)
        g.add_node("gate", self.gate)
        g.add_node("finish", self.finish)
        g.add_edge(START, "start")
        g.add_conditional_edges("start", self.next_step, ["plan", "finish"])
        g.add_conditional_edges("plan", self.fan_out, ["work"])
        g.add_edge("work", "synthesize")
        g.add_edge("synthesize", "gate")
        g.add_conditional_edges("gate", self.next_step, ["plan", "finish"])
        g.add_edge("finish", END)
        return g
