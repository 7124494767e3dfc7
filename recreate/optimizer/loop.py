"""The evolve loop as a LangGraph graph.

    start ─► plan ─Send per task─► work (rollout + instance reflection) ─► synthesize ─► gate ─┐
               ▲                                                                            │
               └──────────────────────────── next round ◄──────────────────────────────────┘─► finish

State holds only JSON data (refs, ids, scores, proposals); everything with a connection lives on the
`EvolveLoop` object. Checkpoints (SQLite) let a killed run resume; rollouts and reflections are also
cached on disk, so a node re-run after a kill pays nothing twice.

Held out means held out: the meta-agent's tools never show a run of a validation (or test) task. The gate
of round r scores parent and candidate on the same fresh seeds of that round (`val_seed`), so a parent's
lucky evaluation is never reused against its child; the store's HEAD moves only when the gate accepts.
A rollout whose model call failed is no score (it is counted in the round's errors), and a reflection
that fails is recorded on that task's proposal while the others go on.
"""

from __future__ import annotations

import contextlib
import contextvars
import hashlib
import json
import random
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

from langgraph.graph import END, START, StateGraph
from langgraph.types import Send

from recreate import progress
from recreate.domains.base import Domain, Task
from recreate.evaluation.errors import (
    MachineDown,
    endpoint_down,
    error_reason,
    is_endpoint_error,
    is_rollout_error,
)
from recreate.experience.schema import Trajectory
from recreate.models import BudgetExceeded
from recreate.optimizer.counters import memory_votes
from recreate.optimizer.final_test import final_test
from recreate.optimizer.proposals import Proposal
from recreate.optimizer.protocol import resolve_protocol
from recreate.optimizer.reflect import reflect_on_run
from recreate.optimizer.scaffold_gate import scaffold_gate
from recreate.optimizer.spend import RunSpend
from recreate.optimizer.state import EvolveConfig, EvolveState, task_seed, val_seed
from recreate.optimizer.synthesis import apply_directly, bootstrap, synthesize
from recreate.redact import redact
from recreate.sandbox import resolve_sandbox
from recreate.scaffold import Scaffold, ScaffoldStore

Rollout = Callable[[Scaffold, Task, int], tuple[Trajectory, bool]]  # -> (trajectory, came from cache)


def _isolated(fn: Callable[..., Any], *args: Any) -> Any:
    """Run a nested agent outside this graph's run context, so it does not inherit the evolve
    checkpointer (its own steps are not ours to checkpoint; our caches make its result durable)."""
    return contextvars.Context().run(fn, *args)


def test_tasks(domain: Domain, trainset: list[Task], valset: list[Task]) -> list[Task]:
    """The domain's test split less any task the run trains or validates on (none, for a sound split)."""
    with contextlib.suppress(ValueError, LookupError, OSError):  # a domain without a test split
        used = {t.id for t in [*trainset, *valset]}
        return [t for t in domain.tasks("test") if t.id not in used]
    return []


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
        finetune: Any = None,
    ):
        """`finetune`: a `recreate.finetune.evolve_step.FinetuneStep` that trains the agent's model every
        K rounds (None: the model stays as it is)."""
        self.domain, self.seed_ref, self.scaffolds = domain, seed_ref, scaffolds
        self.trainset, self.valset = trainset, valset
        self.tasks = {t.id: t for t in [*trainset, *valset]}
        self.testset = test_tasks(domain, trainset, valset)
        # validation and test tasks, which the meta-agent must never see (training ones excepted, when a
        # user insisted on validating on training tasks)
        self.held_out = frozenset({t.id for t in [*valset, *self.testset]} - {t.id for t in trainset})
        self.train_prompts = {t.id: t.prompt for t in trainset if t.id not in self.held_out}
        self.experience, self.rollout, self.sandbox = experience, rollout, resolve_sandbox(sandbox)
        # indexing stays off the critical path: a reflection's search does not wait for this round's runs
        # to be embedded; `plan` flushes the index, so it sees every training run of the earlier rounds
        experience.search_waits = False
        self.model, self.synthesis_model = optimizer_model, synthesis_model
        self.run_dir, self.config, self.finetune = run_dir, config, finetune
        self.protocol = resolve_protocol(config.optimizer_protocol, optimizer_model)
        # what else decides a reflection or synthesis, in its cache name: the model and the ablations
        name = getattr(optimizer_model, "model_name", None) or getattr(optimizer_model, "model", "")
        deciding = [str(name), str(config.ablations), config.reflect_steps, str(config.size_budget)]
        self.optimizer_tag = hashlib.sha256(json.dumps(deciding).encode()).hexdigest()[:8]
        self.spend = RunSpend(
            run_dir / "spent.json", max_rollouts=config.max_rollouts, max_wall_s=config.max_wall_s
        )

    def _run(self, scaffold: Scaffold, task: Task, seed: int) -> Trajectory:
        self.spend.reserve()
        cached = True  # a failed rollout is not paid
        try:
            self.spend.check_wall()
            traj, cached = _isolated(self.rollout, scaffold, task, seed)
        finally:
            self.spend.release(paid=not cached)
        return traj

    def seed_of(self, *parts: object) -> int:
        return task_seed(self.config.seed, *parts)

    def run_all(self, jobs: list[tuple[Scaffold, Task, int]]) -> list[Trajectory]:
        """(scaffold, task, seed) rollouts, `max_concurrency` at a time, in the order given."""
        with ThreadPoolExecutor(self.config.max_concurrency) as pool:
            return list(pool.map(lambda job: self._run(*job), jobs))

    def evaluate(
        self,
        scaffold: Scaffold,
        gate_round: int | tuple[str, int] | str,
        *,
        tasks: list[Task] | None = None,
        runs: int | None = None,
    ) -> tuple[dict[str, float], list[str]]:
        """Scores per (task, seed) on the seeds of `gate_round` (the same for every version scored there:
        paired) over `tasks` (default: the validation split), and the errors, which are no scores."""
        tasks = self.valset if tasks is None else tasks
        runs, began = runs or self.config.val_seeds, time.monotonic()
        label = scaffold.ref or scaffold.name
        if self.finetune is not None:  # the model changes too: say which one runs (the served one)
            label += f" with {self.finetune.policy.server.info.model}"
        progress.validating(label, len(tasks), runs)
        jobs = [(task, i) for task in tasks for i in range(runs)]
        seeded = [(scaffold, task, val_seed(self.config.seed, gate_round, task.id, i)) for task, i in jobs]
        trajectories = self.run_all(seeded)
        trajectories = self._machine_errors_retried(seeded, trajectories)
        keys = [task.id if runs == 1 else f"{task.id}#{i}" for task, i in jobs]
        done = list(zip(keys, trajectories, strict=True))
        scores = {key: t.evaluation.score for key, t in done if t.evaluation and not is_rollout_error(t)}
        errors = [f"{key}: {error_reason(t)}" for key, t in done if is_rollout_error(t)]
        progress.validated(label, scores, errors, time.monotonic() - began)
        return scores, errors

    def _machine_errors_retried(
        self, jobs: list[tuple[Scaffold, Task, int]], done: list[Trajectory]
    ) -> list[Trajectory]:
        """A held-out score with a hole where the machine or the evaluator failed (not the endpoint, whose
        errors the gate leaves out and counts) would compare versions on different tasks: such runs are
        tried again once, then the run stops, resumably, naming the failure."""
        failed = [i for i, t in enumerate(done) if is_rollout_error(t) and not is_endpoint_error(t)]
        if not failed:
            return done
        again = self.run_all([jobs[i] for i in failed])
        for i, traj in zip(failed, again, strict=True):
            if is_rollout_error(traj) and not is_endpoint_error(traj):
                raise MachineDown(
                    f"a validation run failed twice for no reason of its own: {error_reason(traj)}"
                )
            done[i] = traj
        return done

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
        self.scaffolds.set_head(ref, event="evolve v0")  # v0 is accepted; without a HEAD the newest counts
        scores, errors = self.evaluate(self.scaffolds.load(ref), 0)
        self.scaffolds.attach_scores(ref, scores, label="val", run=self.run_dir.name)
        entry |= {"ref": ref, "val": scores, "errors": [f"validation run {e}" for e in errors]}
        update = {"round": 0, "current": ref, "current_val": scores, "history": [entry]}
        if self.finetune is not None:
            entry["model"] = update["model"] = self.finetune.model_name
        return update

    def plan(self, state: EvolveState) -> dict[str, Any]:
        # every training run of the earlier rounds is searchable (held-out runs, which no search shows,
        # are indexed in the background)
        self.experience.flush_index([r["trajectory_id"] for r in state.get("results", [])])
        rng = random.Random(task_seed(self.config.seed, "batch", state["round"]))
        ids = [t.id for t in self.trainset]
        batch = rng.sample(ids, min(self.config.batch_size, len(ids)))
        progress.round_started(state["round"], self.config.rounds, state["current"], batch)
        return {"batch": batch}

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
        failed = Proposal(source=task.id, trajectory_ids=[traj.trajectory_id], status="failed")
        if is_rollout_error(traj):  # its endpoint, machine or evaluator failed: nothing to learn from
            proposal = failed
            proposal.errors.append(f"the rollout failed (no score): {error_reason(traj)}")
        else:
            try:
                proposal = self._cached(
                    f"reflect-{self.protocol}-{self.optimizer_tag}-{scaffold.content_hash()[:16]}-{traj.trajectory_id}",
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
                        hidden_tasks=self.held_out,
                        protocol=self.protocol,
                        prompts=self.train_prompts,
                    ),
                )
            except BudgetExceeded:
                raise
            except Exception as exc:  # one failing reflection is recorded; the batch goes on
                down = endpoint_down(exc, "optimizer")
                if down is not None:  # the optimizer's endpoint, not the scaffold: stop, resumably
                    raise down from exc
                proposal = failed
                proposal.errors.append(f"the reflection failed: {redact(f'{type(exc).__name__}: {exc}')}")
        score = traj.evaluation.score if traj.evaluation and not is_rollout_error(traj) else None
        result = {
            "round": item["round"],
            "task_id": task.id,
            "trajectory_id": traj.trajectory_id,
            "score": score,  # None: an endpoint error, no score
            "error": error_reason(traj) if score is None else None,
            "started": began,
            "finished": time.time(),
        }
        progress.task_done(item["round"], traj, proposal.model_dump(mode="json"))
        return {"results": [result | {"proposal": proposal.model_dump(mode="json")}]}

    def synthesize(self, state: EvolveState) -> dict[str, Any]:
        self.spend.check()
        rnd = state["round"]
        scaffold = self.scaffolds.load(state["current"])
        results = [r for r in state.get("results", []) if r["round"] == rnd]
        proposals = [Proposal(**r["proposal"]) for r in results]
        proposals.sort(key=lambda p: p.source)  # fan-out order is not deterministic; the patch must be
        if self.config.ablations.no_synthesis:
            patch = apply_directly(proposals, scaffold=scaffold, sandbox=self.sandbox)
        else:
            outcomes = {r["task_id"]: {"score": r["score"], "error": r.get("error")} for r in results}
            try:
                patch = self._cached(
                    f"synth-{self.protocol}-{self.optimizer_tag}-{rnd}-{scaffold.content_hash()[:16]}",
                    lambda: synthesize(
                        proposals,
                        scaffold=scaffold,
                        domain_text=self.domain.describe(),
                        model=self.synthesis_model,
                        sandbox=self.sandbox,
                        size_budget=self.config.size_budget,
                        outcomes=outcomes,
                        protocol=self.protocol,
                    ),
                )
            except Exception as exc:
                down = endpoint_down(exc, "synthesis")
                if down is not None:  # as in `work`: stop, resumably, at this round's synthesis
                    raise down from exc
                raise
        scored = [self.experience.get(r["trajectory_id"]) for r in results if r["score"] is not None]
        votes = memory_votes(scaffold, scored)
        if votes and patch.status in ("ok", "empty"):  # the counters move even when nothing else does
            patch.ops = votes + patch.ops
            patch.status = "ok"
        progress.synthesized(rnd, len(proposals), patch.model_dump(mode="json"))
        return {"patches": [{"round": rnd, **patch.model_dump(mode="json")}]}

    def gate(self, state: EvolveState) -> dict[str, Any]:
        update = scaffold_gate(self, state)
        progress.decided(state["round"], update["history"][-1])
        return update

    def next_step(self, state: EvolveState) -> str:
        return "plan" if state["round"] < self.config.rounds else "finish"

    def after_gate(self, state: EvolveState) -> str:
        if self.finetune is not None and self.finetune.due(state):
            return "finetune"
        return self.next_step(state)

    def finetune_node(self, state: EvolveState) -> dict[str, Any]:
        self.spend.check()
        progress.finetuning(state["round"], self.finetune.model_name, self.finetune.settings.every)
        update = self.finetune(self, state)
        progress.finetuned(state["round"], update["models"][-1])
        return update

    def finish(self, state: EvolveState) -> dict[str, Any]:
        update: dict[str, Any] = {"final": state["current"]}
        if self.config.test_seeds and self.testset:
            update["test"] = final_test(self, state)
        return update

    # -- plumbing ----------------------------------------------------------------------------------
    def _cached(self, key: str, make: Callable[[], Proposal]) -> Proposal:
        path = self.run_dir / "proposals" / f"{key}.json"
        if path.exists():
            return Proposal.model_validate_json(path.read_text(encoding="utf-8"))
        self.spend.check()
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
        g.add_node("finetune", self.finetune_node)
        g.add_node("finish", self.finish)
        g.add_edge(START, "start")
        g.add_conditional_edges("start", self.next_step, ["plan", "finish"])
        g.add_conditional_edges("plan", self.fan_out, ["work"])
        g.add_edge("work", "synthesize")
        g.add_edge("synthesize", "gate")
        g.add_conditional_edges("gate", self.after_gate, ["plan", "finish", "finetune"])
        g.add_conditional_edges("finetune", self.next_step, ["plan", "finish"])
        g.add_edge("finish", END)
        return g
