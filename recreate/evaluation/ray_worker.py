"""The Ray side of `ray_executor`: the task that runs one attempt in a worker, and the meter that keeps
the run's budget one budget across workers.

The meter (a Ray actor, one per executor, on a node Ray picks) holds, per ledger of the driver, the
driver's totals as of the last attempt it settled, and the usage of every attempt in flight, by try.
A worker records each model call there as it makes it and checks the budget against the run's whole
spend before each call: the overshoot is what calls in flight at that moment spend, as with threads.
A try whose worker died leaves its usage there, so the driver still records (and pays) it.
"""

from __future__ import annotations

import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from recreate.evaluation.errors import ERROR_KEY, REASON_KEY
from recreate.evaluation.machine import one_line
from recreate.models import Budget, UsageLedger, UsageRecord

if TYPE_CHECKING:
    from recreate.domains.base import Task
    from recreate.evaluation.rollout import Rollouts
    from recreate.experience.schema import Trajectory

RUNNERS_PER_WORKER = 8  # runners (one per scaffold version and model) a worker process keeps built


@dataclass(frozen=True)
class Metered:
    """What a worker needs to meter one attempt: the meter, the driver's ledger and attempt it counts
    under, and the run's budget and prices."""

    meter: Any  # the _Meter actor's handle
    ledger: str
    attempt: str
    budget: Budget | None
    prices: dict[str, Any]


@dataclass(frozen=True)
class Spend:
    """Totals as `Budget.check` reads them."""

    spent: dict[str, Any]

    def totals(self) -> dict[str, Any]:
        return self.spent


class Meter:
    """The run's spend as the workers see it (run as a Ray actor; see the module's docstring)."""

    def __init__(self) -> None:
        self.settled: dict[str, dict[str, Any]] = {}
        self.flight: dict[str, dict[str, dict[str, list[UsageRecord]]]] = {}  # ledger, attempt, try
        self.done: set[str] = set()  # settled attempts: a record that arrives late is counted already

    def add(self, ledger: str, attempt: str, tried: str, record: UsageRecord) -> None:
        if attempt not in self.done:
            self.flight.setdefault(ledger, {}).setdefault(attempt, {}).setdefault(tried, []).append(record)

    def spent(self, ledger: str) -> dict[str, Any]:
        view = UsageLedger()
        for tries in self.flight.get(ledger, {}).values():
            for records in tries.values():
                for record in records:
                    view.record(record)
        settled = self.settled.get(ledger, {})
        return {k: v + settled.get(k, 0) for k, v in view.totals().items()}

    def others(self, ledger: str, attempt: str, kept: str | None) -> list[UsageRecord]:
        """The usage of an attempt's tries other than `kept` (those whose worker died)."""
        tries = self.flight.get(ledger, {}).get(attempt, {})
        return [record for tried, records in tries.items() if tried != kept for record in records]

    def settle(self, ledger: str, attempt: str, totals: dict[str, Any]) -> None:
        """The attempt's usage is in the driver's `totals` now."""
        self.flight.get(ledger, {}).pop(attempt, None)
        self.done.add(attempt)
        self.settled[ledger] = totals


class AttemptLedger(UsageLedger):
    """A worker's ledger: the usage of the one attempt it meters (what goes back to the driver), told to
    the meter as it comes; the budget checked against the run's whole spend, read from the meter."""

    def begin(self, metered: Metered | None) -> str:
        """A new attempt (metered by nothing: the driver keeps no ledger); returns the try's id."""
        super().__init__(budget=metered and metered.budget, prices=metered and metered.prices)
        self.metered, self.tried = metered, uuid.uuid4().hex
        self.broken: str | None = None  # why the meter could not be read: the attempt is no score
        return self.tried

    def record(self, rec: UsageRecord) -> None:
        super().record(rec)
        if (m := self.metered) is not None:  # sent in order with this worker's checks
            m.meter.add.remote(m.ledger, m.attempt, self.tried, rec)

    def check_budget(self) -> None:
        if self.budget is not None and (m := self.metered) is not None:
            import ray

            try:
                spent = ray.get(m.meter.spent.remote(m.ledger))
            except ray.exceptions.RayError as exc:
                self.broken = f"the run's budget meter could not be read: {one_line(exc)}"
                raise
            self.budget.check(Spend(spent))  # type: ignore[arg-type]


_RUNNERS: OrderedDict[str, Rollouts] = OrderedDict()
_RUNNERS_LOCK = threading.Lock()


def attempt(
    recipe: list[Any], key: str, task: Task, seed: int, metered: Metered | None
) -> tuple[Trajectory, list[UsageRecord], str | None]:
    """One attempt in a Ray worker, with a runner built once per recipe (`recipe`: its object ref, fetched
    only then) and kept (the lock: one attempt at a time per process, since the runner's ledger meters
    one). Returns the trajectory, its usage and the id of this try."""
    import ray

    from recreate.evaluation.rollout import Rollouts

    with _RUNNERS_LOCK:
        runner = _RUNNERS.pop(key, None)
        if runner is None:
            ledger = AttemptLedger()
            runner = Rollouts(**ray.get(recipe[0]), ledger=ledger, cache=False, record=False)
        _RUNNERS[key] = runner
        while len(_RUNNERS) > RUNNERS_PER_WORKER:
            _RUNNERS.popitem(last=False)
        ledger = runner.ledger
        assert isinstance(ledger, AttemptLedger)
        tried = ledger.begin(metered)
        traj = runner.attempt(task, seed)
        if ledger.broken:  # the agent stopped at a model call for Ray's failure, not the scaffold's
            traj.evaluation = None
            traj.metadata |= {ERROR_KEY: "machine", REASON_KEY: ledger.broken}
        return traj, ledger.records(), tried
