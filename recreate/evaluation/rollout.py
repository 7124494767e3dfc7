"""Rollouts: one scaffold on one task, evaluated, cached, stored.

`run_task` runs the domain agent in a fresh sandbox session prepared by `domain.prepare`, then judges the
submission with `domain.evaluate` (which opens another fresh sandbox that receives only the submission),
and returns the Trajectory with its evaluation. `run_tasks` does many with bounded concurrency, each
attempt on the caller's threads or, with an executor, as a Ray task (`recreate.evaluation.ray_executor`);
this process alone caches, logs and stores what comes back. Finished rollouts are cached on disk under
RECREATE_HOME (`recreate.evaluation.cache`), so a resumed run (even after kill -9) pays nothing twice. The
cache key names everything that determines a result (`Rollouts.rollout_key`): the scaffold's
hash, the task's content, the domain and its options (evaluator included), the model and its sampling,
the sandbox, and the seed. A run whose model call, sandbox or evaluator failed (not the scaffold's doing:
`recreate.evaluation.errors`) is stored but neither scored nor cached; the same machine failure several
times in a row stops the run (`MachineDown`), as does the agent's endpoint failing several in a row
(`EndpointDown`: unreachable, refusing the key, 5xx past the client's retries), resumably.
"""

from __future__ import annotations

import hashlib
import json
import logging
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path
from typing import Any, Protocol

from langchain_core.language_models import BaseChatModel
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from recreate.agent import AgentContext, build_domain_agent
from recreate.domains.base import Domain, Task
from recreate.evaluation.cache import RolloutCache, settings_fingerprint, task_fingerprint
from recreate.evaluation.errors import (
    ERROR_KEY,
    REASON_KEY,
    EndpointDown,
    FailureKind,
    failure_kind,
    is_endpoint_down,
)
from recreate.evaluation.machine import MachineStreak, one_line, probe, same_failure, watched, watching
from recreate.experience.schema import Evaluation, Trajectory, new_id
from recreate.models import UsageLedger
from recreate.redact import redact
from recreate.sandbox import close_soon
from recreate.sandbox.base import Sandbox, SandboxSpec
from recreate.scaffold import Scaffold, load_scaffold

log = logging.getLogger(__name__)


# the scheme that turns a run's seed into sampling seeds (`recreate.agent.graph.step_seed`); rollouts
# cached under another scheme are other samples
SEEDING = 2


def agent_sandbox_spec(domain: Domain) -> SandboxSpec:
    """The sandbox the agent works in: the domain's `agent_spec()` where it defines one (e.g. the
    libraries its solutions are judged with), else the default."""
    spec = getattr(domain, "agent_spec", None)
    return spec() if callable(spec) else SandboxSpec()


class Executor(Protocol):
    """Runs `Rollouts.attempt` somewhere else and returns its trajectory (see `ray_executor`)."""

    def attempt(self, rollouts: Rollouts, task: Task, seed: int) -> Trajectory: ...


class Rollouts:
    """One scaffold + model + sandbox + domain, ready to run tasks. Thread-safe."""

    def __init__(
        self,
        scaffold: Scaffold | str | Path,
        domain: Domain,
        *,
        model: str | BaseChatModel,
        sandbox: str | Sandbox = "bwrap",
        ledger: UsageLedger | None = None,
        store: Any = None,
        run_id: str | None = None,
        cache: RolloutCache | None | bool = True,
        trajectory_dir: str | Path | None = None,
        executor: Executor | None = None,
        **agent_options: Any,
    ):
        """`executor`: where the attempts run (None: in this process, on the caller's thread; a
        `recreate.evaluation.ray_executor.RayExecutor`: as Ray tasks). The cache, the store, the run's
        log and the budget stay in this process whichever runs them."""
        self.scaffold = load_scaffold(scaffold)
        self.domain = domain
        self.ledger = ledger
        self.store = store
        self.run_id = run_id
        self.cache = RolloutCache() if cache is True else (cache or None)
        self.executor = executor
        # what a worker needs to build this runner again (`ray_executor`); nothing with a connection
        self.recipe = {
            "scaffold": self.scaffold, "domain": domain, "model": model, "sandbox": sandbox,
            "run_id": run_id, **agent_options,
        }  # fmt: skip
        self.agent = build_domain_agent(
            self.scaffold,
            model=model,
            sandbox=sandbox,
            sandbox_spec=agent_sandbox_spec(domain),
            ledger=ledger,
            trajectory_dir=trajectory_dir,
            domain=domain.name,
            **agent_options,
        )
        self.graph = self.agent.compile(public=False)  # every key: task ids, seeds, step records
        info = self.agent.recorder.model
        context = {
            "model": [info.name, info.base_url_host, info.sampling, info.policy],
            "agent": [self.agent.action_format, sampling_extras(model, agent_options)],
            "domain": settings_fingerprint(domain),
            "sandbox": [settings_fingerprint(self.agent.sandbox), repr(self.agent.sandbox_spec)],
            "seeding": SEEDING,
        }
        identity = json.dumps(context, sort_keys=True, default=str)
        self.context_key = hashlib.sha256(identity.encode()).hexdigest()
        self.scaffold_hash = self.scaffold.content_hash()
        self._store_lock = threading.Lock()
        self.streak = MachineStreak()
        self.endpoint_streak = MachineStreak(halt=EndpointDown)

    def rollout_key(self, task: Task) -> str:
        """What determines a rollout's result besides the scaffold and the seed (which name its file)."""
        return hashlib.sha256(f"{self.context_key}:{task_fingerprint(task)}".encode()).hexdigest()

    def cached(self, task: Task, seed: int = 0) -> Trajectory | None:
        if self.cache is None:
            return None
        return self.cache.get(self.scaffold_hash, task.id, seed, self.rollout_key(task))

    def run(self, task: Task, seed: int = 0) -> Trajectory:
        cached = self.cached(task, seed)
        if cached is not None:
            return cached
        self.streak.check()  # stopped for a machine failure: no more attempts in this process
        self.endpoint_streak.check()
        if self.ledger is not None:
            self.ledger.check_budget()
        traj = self.attempt(task, seed) if self.executor is None else self.executor.attempt(self, task, seed)
        if self.ledger is not None and out_of_budget(traj):
            self.ledger.check_budget()  # the shared budget ran out mid-run: raise, cache nothing
        return self._keep(task, traj)

    def attempt(self, task: Task, seed: int) -> Trajectory:
        """The agent's run and its verdict, or the kind and reason of the error that is no verdict
        (`ERROR_KEY`, `REASON_KEY`): what an executor's worker computes. Nothing is cached or stored."""
        started = time.time()
        traj, fault = self._rollout(task, seed)
        if out_of_budget(traj):
            return traj  # no verdict: the caller raises BudgetExceeded
        eval_started = time.time()
        kind: FailureKind | None = "machine" if fault else failure_kind(traj)
        if kind is not None:  # not the scaffold's doing: no score, no cache entry, run again next time
            why = fault or traj.outcome.error
            log.warning("rollout of %s is not scored (%s error): %s", task.id, kind, why)
        elif traj.outcome.exit_status == "context_exceeded":
            grew = f"the conversation outgrew it after {traj.totals.steps} model calls"
            reason = (
                f"no submission: {grew if traj.totals.steps else 'the prompt alone does not fit it'}"
                f" (the model's context; {traj.outcome.error})"
            )
            traj.evaluation = Evaluation(score=0.0, passed=False, feedback=reason)
        elif traj.outcome.exit_status == "error" and not traj.messages:  # the task's files, not the machine
            reason = f"the rollout failed before the agent ran: {traj.outcome.error}"
            traj.evaluation = Evaluation(score=0.0, passed=False, feedback=reason)
        else:
            traj.evaluation, kind, fault = self._evaluate(task, traj.outcome.submission)
        if kind is not None:
            traj.metadata[ERROR_KEY] = kind
            traj.evaluation = None
        if fault is not None:
            traj.metadata[REASON_KEY] = fault
        traj.metadata.update(
            eval_duration_s=round(time.time() - eval_started, 3),
            rollout_duration_s=round(time.time() - started, 3),
        )
        return traj

    def lost(self, task: Task, seed: int, reason: str) -> Trajectory:
        """The record of an attempt whose worker died (an executor's): a machine error, no score."""
        traj = self._failed(self._state(task, seed), task, RuntimeError(reason))
        traj.metadata |= {ERROR_KEY: "machine", REASON_KEY: reason}
        return traj

    def _keep(self, task: Task, traj: Trajectory) -> Trajectory:
        """A finished attempt cached (when it is a score), logged and stored; the streaks told."""
        kind = traj.metadata.get(ERROR_KEY)
        if self.cache is not None and kind is None and traj.evaluation is not None:
            self.cache.put(self.scaffold_hash, traj, self.rollout_key(task))
        self.agent.recorder.save(traj)  # the run's log: what it scored (what `recreate finetune` trains on)
        if self.store is not None:
            with self._store_lock:
                self.store.add(traj, index_later=True)  # the next step reads the files; searches wait
        error = traj.outcome.error or ""
        down = kind == "endpoint" and is_endpoint_down(error)  # not a refusal of this one request
        self.endpoint_streak.record(f"the agent model's endpoint failed: {error}" if down else None)
        if kind != "endpoint":
            self.streak.record(traj.metadata.get(REASON_KEY))
        return traj

    def _state(self, task: Task, seed: int) -> dict[str, Any]:
        return {
            "task": task.prompt,
            "task_id": task.id,
            "seed": seed,
            "run_id": self.run_id,
            "trajectory_id": new_id("t-"),
            "metadata": {
                "task_group": task.group,
                **({"task_metadata": task.metadata} if task.metadata else {}),
            },
        }

    def _rollout(self, task: Task, seed: int) -> tuple[Trajectory, str | None]:
        """The agent's run, and the machine's fault when it failed for the machine's reasons."""
        state = self._state(task, seed)
        sandbox, spec = self.agent.sandbox, self.agent.sandbox_spec
        try:
            session = sandbox.open(spec)
        except Exception as exc:  # nothing of the task or the scaffold has run yet: the machine's fault
            fault = f"the {sandbox.name} sandbox failed to open: {one_line(exc)}"
            return self._failed(state, task, exc), fault
        try:
            self.domain.prepare(task, session)
            traj = self.agent.trajectory(self.graph.invoke(state, context=AgentContext(session=session)))
        except Exception as exc:  # preparation failed (or the graph itself): the probe says whose fault
            traj = self._failed(state, task, exc)
        finally:
            close_soon(session)
        if traj.outcome.exit_status != "error" or failure_kind(traj) == "endpoint":
            return traj, None
        broken = probe(sandbox, spec)  # a failure the machine repeats on `true` is not the run's own
        return traj, f"the {sandbox.name} sandbox failed: {broken}" if broken else None

    def _failed(self, state: dict[str, Any], task: Task, exc: Exception) -> Trajectory:
        log.warning("rollout of %s failed before the agent could finish: %s", task.id, one_line(exc))
        error = redact(f"{type(exc).__name__}: {exc}")
        return self.agent.trajectory({**state, "exit_status": "error", "error": error, "messages": []})

    def _evaluate(
        self, task: Task, submission: str | None
    ) -> tuple[Evaluation | None, FailureKind | None, str | None]:
        """The verdict, or the kind and reason of an error that is no verdict: a sandbox that failed to
        open, or an evaluator that fails the same way on a plain wrong answer (not the submission's doing)."""
        sandbox = watched(self.agent.sandbox)
        with watching() as failed_opens:
            verdict, failure = self._judge(task, submission, sandbox)
            control = self._control(task) if failure and submission is not None else None
            again = self._judge(task, control, sandbox)[1] if control is not None else None
        if failed_opens:
            return None, "machine", f"the evaluation's {sandbox.name} sandbox failed: {failed_opens[0]}"
        if failure and again and same_failure(failure, again):
            return None, "evaluator", f"the evaluator fails on a plain wrong answer too: {failure}"
        if verdict is None:
            feedback = f"the evaluator crashed on this submission: {failure}"
            return Evaluation(score=0.0, passed=False, feedback=feedback), None, None
        return verdict, None, None

    def _judge(
        self, task: Task, submission: str | None, sandbox: Sandbox
    ) -> tuple[Evaluation | None, str | None]:
        """The verdict, and why the evaluator gave none: it raised, or it scored 0 with an error."""
        try:
            verdict = self.domain.evaluate(task, submission, sandbox)
        except Exception as exc:
            log.warning("evaluation of %s crashed: %s", task.id, one_line(exc))
            return None, one_line(exc)
        error = None if verdict.passed else verdict.details.get("error")
        return verdict, str(error) if error else None

    def _control(self, task: Task) -> str:
        """A plain wrong answer: the domain's first non-empty `wrong_submissions`, else "0"."""
        wrong = getattr(self.domain, "wrong_submissions", None)
        return next((s for s in (wrong(task) if callable(wrong) else []) if s.strip()), "0")

    def run_many(
        self,
        tasks: Sequence[Task],
        *,
        seeds: Iterable[int] = (0,),
        concurrency: int = 4,
        progress: bool = True,
        on_result: Callable[[Trajectory], None] | None = None,
    ) -> list[Trajectory]:
        """Every (task, seed) pair, in input order. A BudgetExceeded stops scheduling and is re-raised
        (finished rollouts are cached already)."""
        jobs = [(task, seed) for task in tasks for seed in seeds]
        results: list[Trajectory | None] = [None] * len(jobs)
        with _progress(progress) as bar, ThreadPoolExecutor(max_workers=max(1, concurrency)) as pool:
            tracker = bar.add_task(f"{self.scaffold.name} on {self.domain.name}", total=len(jobs))

            def one(i: int) -> None:
                task, seed = jobs[i]
                results[i] = traj = self.run(task, seed)
                if on_result is not None:
                    on_result(traj)
                bar.advance(tracker)

            futures = [pool.submit(one, i) for i in range(len(jobs))]
            try:
                done, pending = wait(futures, return_when=FIRST_EXCEPTION)
            except BaseException:  # Ctrl-C: no rollout starts; those running finish (and are kept)
                for future in futures:
                    future.cancel()
                raise
            for future in pending:
                future.cancel()
            for future in done:
                future.result()  # re-raise the first failure (BudgetExceeded, KeyboardInterrupt)
        return [r for r in results if r is not None]


def run_task(
    scaffold: Scaffold | str | Path,
    task: Task,
    domain: Domain,
    *,
    model: str | BaseChatModel,
    sandbox: str | Sandbox = "bwrap",
    seed: int = 0,
    ledger: UsageLedger | None = None,
    store: Any = None,
    **options: Any,
) -> Trajectory:
    """One evaluated rollout (from the cache when this scaffold already ran this task with this seed)."""
    runner = Rollouts(scaffold, domain, model=model, sandbox=sandbox, ledger=ledger, store=store, **options)
    return runner.run(task, seed)


def run_tasks(
    scaffold: Scaffold | str | Path,
    tasks: Sequence[Task],
    domain: Domain,
    *,
    model: str | BaseChatModel,
    sandbox: str | Sandbox = "bwrap",
    seeds: Iterable[int] = (0,),
    concurrency: int = 4,
    ledger: UsageLedger | None = None,
    store: Any = None,
    progress: bool = True,
    on_result: Callable[[Trajectory], None] | None = None,
    **options: Any,
) -> list[Trajectory]:
    """Evaluated rollouts of every (task, seed), `concurrency` at a time, in input order."""
    runner = Rollouts(scaffold, domain, model=model, sandbox=sandbox, ledger=ledger, store=store, **options)
    return runner.run_many(
        tasks, seeds=seeds, concurrency=concurrency, progress=progress, on_result=on_result
    )


def sampling_extras(model: str | BaseChatModel, options: dict[str, Any]) -> str:
    """The request fields that shape the samples beyond `ModelInfo.sampling` (which keeps scalars only):
    `extra_body` and `model_kwargs` whole, e.g. a chat template's switches, as canonical JSON."""
    given = {"extra_body": options.get("extra_body")}
    if isinstance(model, BaseChatModel):
        given |= {
            "model_extra_body": getattr(model, "extra_body", None),
            "model_kwargs": getattr(model, "model_kwargs", None),
        }
    return json.dumps(given, sort_keys=True, default=str)


def out_of_budget(traj: Trajectory) -> bool:
    """The rollout stopped because the run's budget ran out (no verdict)."""
    return (traj.outcome.error or "").startswith("budget exceeded")


def _progress(enabled: bool) -> Progress:
    return Progress(
        TextColumn("[bold]{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        disable=not enabled,
        transient=False,
    )
