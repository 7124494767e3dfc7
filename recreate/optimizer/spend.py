"""What a run has spent besides money, across its sessions: rollouts paid and wall time.

Both live in the run's `spent.json`, so a resumed run counts what it spent before (as the USD ledger
does). Rollouts reserve a slot under `max_rollouts` before they start, so N running at once never
overshoot the limit; a rollout served from the cache frees its slot unpaid.
"""

from __future__ import annotations

import json
import math
import threading
import time
from pathlib import Path

from recreate.models import BudgetExceeded
from recreate.runs import BrokenRun, read_json


class RunSpend:
    def __init__(self, path: Path, *, max_rollouts: int | None, max_wall_s: float | None) -> None:
        self.path, self.max_rollouts, self.max_wall_s = path, max_rollouts, max_wall_s
        spent = read_json(path, dict) if path.exists() else {}
        self.rollouts_paid: int = spent.get("rollouts", 0)
        self._wall_before: float = spent.get("wall_s", 0.0)
        for name, value, kind in (
            ("rollouts", self.rollouts_paid, int),
            ("wall_s", self._wall_before, int | float),
        ):
            if isinstance(value, bool) or not isinstance(value, kind) or not 0 <= value < math.inf:
                raise BrokenRun(path, f"has {name} {value!r}, not a number of at least 0")
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._running = 0  # reserved against max_rollouts, not yet paid or found cached
        self._slots = threading.Condition(self._lock)

    def wall_s(self) -> float:
        return self._wall_before + time.monotonic() - self._started

    def check(self) -> None:
        """Raise BudgetExceeded when the rollouts or the wall time are spent (and record both)."""
        self.save()
        if self.max_rollouts is not None and self.rollouts_paid >= self.max_rollouts:
            raise BudgetExceeded("rollouts", self.rollouts_paid, self.max_rollouts)
        self.check_wall()

    def check_wall(self) -> None:
        elapsed = self.wall_s()
        if self.max_wall_s is not None and elapsed >= self.max_wall_s:
            raise BudgetExceeded("wall_s", elapsed, self.max_wall_s)

    def save(self) -> None:
        with self._lock:
            spent = {"rollouts": self.rollouts_paid, "wall_s": round(self.wall_s(), 3)}
            tmp = self.path.with_suffix(f".{threading.get_ident()}.tmp")
            tmp.write_text(json.dumps(spent))
            tmp.replace(self.path)

    def reserve(self) -> None:
        """Take a slot under max_rollouts, waiting while the rollouts already running could fill it."""
        self.save()
        limit = self.max_rollouts
        with self._slots:
            while limit is not None and self.rollouts_paid + self._running >= limit:
                if self.rollouts_paid >= limit:
                    raise BudgetExceeded("rollouts", self.rollouts_paid, limit)
                self._slots.wait()
            self._running += 1

    def release(self, *, paid: bool) -> None:
        """The reserved rollout ended: paid (it ran), or not (served from the cache, or failed)."""
        with self._slots:
            self._running -= 1
            if paid:
                self.rollouts_paid += 1
            self._slots.notify_all()
        self.save()
