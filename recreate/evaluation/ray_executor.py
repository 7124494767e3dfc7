"""Rollouts as Ray tasks: `--executor ray` (a local Ray on loopback) or `--executor ray://HOST:PORT`.

What runs where. The driver (the process running `recreate eval|evolve` or `optimize()`) keeps the
concurrency cap (one of its threads waits on each rollout in flight), checks the budget before each
attempt, and alone writes the rollout cache, the run's trajectories and the experience store. A Ray task
runs one attempt (`Rollouts.attempt`: the agent in a fresh sandbox on the worker's node, then the
evaluation in another) metered by a ledger that holds what was left of the budget when it started, and
returns the trajectory with the usage of its model calls, which the driver adds to the run's ledger.
A worker that dies (killed, out of memory, its node gone) is run again by Ray up to `RETRIES` times; past
that the attempt is a machine error: stored for the record, never a score, never cached, run again on
resume.

Workers build the agent from the runner's inputs (scaffold, domain, model spec, sandbox, agent options)
and read their settings and API keys from their own environment: the local cluster's workers inherit the
driver's; a cluster's nodes need them set where `ray start` runs. No key travels in a task's arguments or
a runtime_env, so none lands in Ray's logs.
"""

from __future__ import annotations

import hashlib
import importlib.util
import logging
import os
import threading
from collections import OrderedDict
from typing import TYPE_CHECKING, Any
from urllib.parse import urlsplit

from recreate.errors import Arg, ArgumentError
from recreate.evaluation.machine import one_line
from recreate.models import Budget, UsageLedger, UsageRecord

if TYPE_CHECKING:
    from recreate.domains.base import Task
    from recreate.evaluation.rollout import Executor, Rollouts
    from recreate.experience.schema import Trajectory

THREADS = "threads"
RETRIES = 2  # runs again of an attempt whose worker died, before it is recorded as a machine error
OBJECT_STORE_BYTES = 128 * 1024**2  # the local cluster's: trajectories are small
RUNNERS_PER_WORKER = 8  # runners (one per scaffold version and model) a worker process keeps built


def make_executor(spec: str | Executor | None, *, concurrency: int = 4) -> Executor | None:
    """The executor `spec` names: None for "threads" (or None), a `RayExecutor` for "ray" (a local
    cluster with `concurrency` slots, or the cluster this process already joined) and "ray://HOST:PORT"
    (a Ray cluster's client port); an executor object is returned as it is."""
    if spec is None or spec == THREADS:
        return None
    if not isinstance(spec, str):
        return spec
    address = None if spec == "ray" else _ray_address(spec)
    if importlib.util.find_spec("ray") is None:
        raise ArgumentError(
            "{executor}: Ray is not installed here; `pip install 'recreate[ray]'`",
            executor=Arg("executor", repr(spec), spec),
        )
    return RayExecutor(address, num_cpus=max(2, concurrency))


def _ray_address(spec: str) -> str:
    try:
        parts = urlsplit(spec)
        port = parts.port
    except ValueError:
        port = None
    if parts.scheme == "ray" and parts.hostname and port and not parts.path.strip("/"):
        return spec
    raise ArgumentError(
        "{executor} is no executor; use threads (the default), ray (a Ray on this machine) "
        "or ray://HOST:PORT (a Ray cluster's client port, 10001 unless its head set another)",
        executor=Arg("executor", repr(spec), spec),
    )


def budget_left(ledger: UsageLedger | None) -> Budget | None:
    """What `ledger`'s budget has left, as a budget (raises BudgetExceeded when nothing is left)."""
    if ledger is None or ledger.budget is None:
        return None
    budget, spent = ledger.budget, ledger.totals()
    used = {
        "max_usd": spent["cost_usd"],
        "max_tokens": spent["prompt_tokens"] + spent["completion_tokens"],
        "max_calls": spent["calls"],
    }
    left = {k: None if getattr(budget, k) is None else getattr(budget, k) - v for k, v in used.items()}
    if any(v is not None and v <= 0 for v in left.values()):
        ledger.check_budget()  # raises, naming the limit (totals only grow)
    return Budget(**left)


class RayExecutor:
    """Runs each attempt of a `Rollouts` as a Ray task; connects (or starts the local Ray) on first use."""

    def __init__(self, address: str | None = None, *, num_cpus: int = 2, retries: int = RETRIES):
        self.address, self.num_cpus, self.retries = address, num_cpus, retries
        self._remote: Any = None
        self._lock = threading.Lock()
        # each runner's recipe, put in the object store once: a worker fetches it only to build the runner
        self._recipes: OrderedDict[str, Any] = OrderedDict()

    def connect(self) -> Any:
        """The remote attempt function, after joining the cluster (or starting a local one)."""
        with self._lock:
            if self._remote is None:
                ray = _import_ray()
                if not ray.is_initialized():
                    self._init(ray)
                self._remote = ray.remote(num_cpus=1, max_retries=self.retries)(_attempt)
            return self._remote

    def _init(self, ray: Any) -> None:
        quiet = {"logging_level": logging.ERROR, "log_to_driver": True}
        where = (
            f"cannot join the Ray cluster at {self.address}"
            if self.address
            else "the local Ray did not start"
        )
        if not self.address and ray._private.ray_constants.ENABLE_RAY_CLUSTER:  # imported too early
            logging.getLogger(__name__).warning("the local Ray listens on this machine's address too")
        try:
            if self.address:
                ray.init(address=self.address, **quiet)
            else:
                ray.init(
                    address="local", num_cpus=self.num_cpus, include_dashboard=False,
                    object_store_memory=OBJECT_STORE_BYTES, **quiet,
                )  # fmt: skip
        except Exception as exc:  # one line: what failed, what to do
            ray.shutdown()  # whatever it started
            raise RuntimeError(f"{where} ({one_line(exc)}); or run with --executor threads") from None

    def attempt(self, rollouts: Rollouts, task: Task, seed: int) -> Trajectory:
        remote = self.connect()
        from ray.exceptions import RayError, RayTaskError

        ledger = rollouts.ledger
        meter = None if ledger is None else (budget_left(ledger), ledger.prices)
        key = runner_key(rollouts)
        try:
            recipe = self._recipe(key, rollouts)
            ref = remote.remote([recipe], key, task, seed, meter)  # in a list: not fetched unless needed
        except TypeError as exc:  # Ray could not serialize an input (a model object with a live client)
            raise ArgumentError(
                f"{{executor}} sends each rollout's inputs to a Ray worker and this one cannot go: "
                f"{one_line(exc)[:200]}; pass the model as a spec (NAME@URL) and the sandbox by name",
                executor=Arg("executor", "'ray'", "ray"),
            ) from None
        try:
            traj, usage = _import_ray().get(ref)
        except RayTaskError as exc:  # our code raised in the worker: as it would on a thread
            raise exc.as_instanceof_cause() from None
        except RayError as exc:  # its worker (or node) died, every time Ray ran it
            reason = f"the Ray worker running it died ({1 + self.retries} tries): {one_line(exc)}"
            return rollouts.lost(task, seed, reason)
        for record in usage:
            ledger.record(record)  # type: ignore[union-attr]
        return traj

    def _recipe(self, key: str, rollouts: Rollouts) -> Any:
        with self._lock:
            if key not in self._recipes:
                self._recipes[key] = _import_ray().put(rollouts.recipe)
            self._recipes.move_to_end(key)
            while len(self._recipes) > RUNNERS_PER_WORKER:
                self._recipes.popitem(last=False)
            return self._recipes[key]


def runner_key(rollouts: Rollouts) -> str:
    """What names a runner a worker may keep built: everything in its recipe."""
    rest = sorted((k, repr(v)) for k, v in rollouts.recipe.items() if k not in ("scaffold", "domain"))
    text = f"{rollouts.context_key}:{rollouts.scaffold_hash}:{rest}"
    return hashlib.sha256(text.encode()).hexdigest()


def _import_ray() -> Any:
    # on Linux Ray gives a local cluster the machine's address (listening on every interface); this
    # switch, read when ray is imported, keeps a local one on 127.0.0.1 (a cluster's nodes set their own)
    os.environ.setdefault("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "0")
    import ray

    return ray


# -- in the worker -------------------------------------------------------------------------------------
class _AttemptLedger(UsageLedger):
    """A worker's ledger: what the run's budget had left, and the usage of the one attempt it meters."""

    def begin(self, budget: Budget | None, prices: dict[str, Any]) -> None:
        super().__init__(budget=budget, prices=prices)


_RUNNERS: OrderedDict[str, Rollouts] = OrderedDict()
_RUNNERS_LOCK = threading.Lock()


def _attempt(
    recipe: list[Any],
    key: str,
    task: Task,
    seed: int,
    meter: tuple[Budget | None, dict[str, Any]] | None,
) -> tuple[Trajectory, list[UsageRecord]]:
    """One attempt in a Ray worker, with a runner built once per recipe (`recipe`: its object ref, fetched
    only then) and kept (the lock: one attempt at a time per process, since the runner's ledger meters
    one)."""
    import ray

    from recreate.evaluation.rollout import Rollouts

    with _RUNNERS_LOCK:
        runner = _RUNNERS.pop(key, None)
        if runner is None:
            ledger = None if meter is None else _AttemptLedger()
            runner = Rollouts(**ray.get(recipe[0]), ledger=ledger, cache=False, record=False)
        _RUNNERS[key] = runner
        while len(_RUNNERS) > RUNNERS_PER_WORKER:
            _RUNNERS.popitem(last=False)
        if isinstance(runner.ledger, _AttemptLedger) and meter is not None:
            runner.ledger.begin(*meter)
        traj = runner.attempt(task, seed)
        return traj, runner.ledger.records() if runner.ledger is not None else []
