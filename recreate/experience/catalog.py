"""SQLite catalog of stored trajectories and their steps (WAL mode; one connection per thread, safe
across threads and processes). The JSON files are the source of truth; the catalog can always be
rebuilt from them.

The `steps` table (one row per step: its index document id, step number and error type) lets filtered
searches find the matching documents in SQL instead of asking Chroma to scan its metadata."""

from __future__ import annotations

import json
import sqlite3
import threading
import weakref
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.experience.digest import error_type, outcome_label
from recreate.experience.schema import Trajectory

COLUMNS = (
    "id",
    "run_id",
    "task_id",
    "domain",
    "scaffold_name",
    "scaffold_version",
    "scaffold_hash",
    "model",
    "exit_status",
    "outcome",
    "score",
    "cost_usd",
    "n_steps",
    "started_at",
    "finished_at",
    "added_at",
    "source",
    "path",
    "indexed",
)
_SCHEMA = f"""
CREATE TABLE IF NOT EXISTS trajectories (
  id TEXT PRIMARY KEY, run_id TEXT, task_id TEXT NOT NULL, domain TEXT NOT NULL, scaffold_name TEXT,
  scaffold_version TEXT, scaffold_hash TEXT, model TEXT, exit_status TEXT NOT NULL, outcome TEXT NOT NULL,
  score REAL, cost_usd REAL, n_steps INTEGER NOT NULL, started_at TEXT, finished_at TEXT,
  added_at TEXT NOT NULL, source TEXT, path TEXT NOT NULL, indexed INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS by_task ON trajectories (domain, task_id);
CREATE INDEX IF NOT EXISTS by_run ON trajectories (run_id);
CREATE INDEX IF NOT EXISTS by_unindexed ON trajectories (indexed) WHERE indexed = 0;
CREATE TABLE IF NOT EXISTS steps (
  id TEXT PRIMARY KEY, trajectory_id TEXT NOT NULL, step INTEGER NOT NULL, error_type TEXT NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS steps_by_error ON steps (error_type, trajectory_id);
CREATE INDEX IF NOT EXISTS steps_by_trajectory ON steps (trajectory_id);
CREATE INDEX IF NOT EXISTS steps_by_step ON steps (step);
-- columns: {", ".join(COLUMNS)}
"""
VERSION = 2  # PRAGMA user_version; 2 added the steps table (older catalogs are backfilled by the store)
_INSERT_STEPS = "INSERT OR REPLACE INTO steps (id, trajectory_id, step, error_type) VALUES (?, ?, ?, ?)"
_INSERT = f"INSERT INTO trajectories ({', '.join(COLUMNS)}) VALUES ({', '.join('?' * len(COLUMNS))})"
# Filters that select trajectories; the step index additionally understands `error_type` and `step`.
FILTER_KEYS = (
    "domain",
    "task_id",
    "run_id",
    "scaffold_name",
    "scaffold_version",
    "model",
    "outcome",
    "exit_status",
)
STEP_KEYS = ("error_type", "step")  # filters on the steps themselves
StepRow = tuple[str, str, int, str]


class DuplicateTrajectoryError(ValueError):
    """A trajectory with this id is already stored; the stored one is left untouched."""

    def __init__(self, trajectory_id: str) -> None:
        super().__init__(f"trajectory {trajectory_id!r} is already stored")
        self.trajectory_id = trajectory_id


@dataclass(frozen=True)
class CatalogEntry:
    id: str
    run_id: str | None
    task_id: str
    domain: str
    scaffold_name: str | None
    scaffold_version: str | None
    scaffold_hash: str | None
    model: str | None
    exit_status: str
    outcome: str
    score: float | None
    cost_usd: float | None
    n_steps: int
    started_at: str | None
    finished_at: str | None
    added_at: str
    source: str | None
    path: str
    indexed: int


def entry_for(traj: Trajectory, *, path: str, added_at: str, source: str | None) -> CatalogEntry:
    scaffold = traj.scaffold
    return CatalogEntry(
        id=traj.trajectory_id,
        run_id=traj.run_id,
        task_id=traj.task_id,
        domain=traj.domain,
        scaffold_name=scaffold.name if scaffold else None,
        scaffold_version=scaffold.version if scaffold else None,
        scaffold_hash=scaffold.hash if scaffold else None,
        model=traj.model.name if traj.model else None,
        exit_status=traj.outcome.exit_status,
        outcome=outcome_label(traj),
        score=traj.evaluation.score if traj.evaluation else None,
        cost_usd=traj.totals.cost_usd,
        n_steps=len(traj.steps),
        started_at=traj.started_at,
        finished_at=traj.finished_at,
        added_at=added_at,
        source=source,
        path=path,
        indexed=0,
    )


def step_rows(traj: Trajectory) -> list[StepRow]:
    """(index document id, trajectory id, step number, error type) for each step."""
    return [
        (f"{traj.trajectory_id}#{position}", traj.trajectory_id, step.index, error_type(step))
        for position, step in enumerate(traj.steps)
    ]


def check_filters(filters: dict[str, Any] | None, allowed: Iterable[str] = FILTER_KEYS) -> dict[str, Any]:
    filters = {k: v for k, v in (filters or {}).items() if v is not None and v != ""}
    unknown = sorted(set(filters) - set(allowed))
    if unknown:
        raise ValueError(f"unknown filter(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    return filters


class _Connection(sqlite3.Connection):
    """Weakly referable: the catalog reaches every thread's connection, and a finished thread's
    connection still goes with the thread. `busy` is held while its thread uses it, since closing a
    connection that another thread is stepping through crashes the interpreter (CPython's sqlite3)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.busy = threading.RLock()
        self.closed = False


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()  # connections are per thread; closing each would checkpoint the WAL
        self._open: weakref.WeakSet[_Connection] = weakref.WeakSet()  # every thread's, for `close`
        self._open_lock = threading.Lock()
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)
            if not db.execute("SELECT 1 FROM trajectories LIMIT 1").fetchone():
                db.execute(f"PRAGMA user_version = {VERSION}")

    def needs_step_rows(self) -> bool:
        """True for a catalog written before the steps table existed (see `add_step_rows`)."""
        with self._connect() as db:
            return db.execute("PRAGMA user_version").fetchone()[0] < VERSION

    def add_step_rows(self, rows: Iterable[StepRow]) -> None:
        """Backfill the steps of an older catalog, and mark it current."""
        with self._transaction() as db:
            db.executemany(_INSERT_STEPS, rows)
            db.execute(f"PRAGMA user_version = {VERSION}")

    def close(self) -> None:
        """Close every thread's connection (a background index pass leaves one on its pool thread, open
        for as long as the catalog lives otherwise); a thread that uses the catalog again reconnects."""
        with self._open_lock:
            connections = list(self._open)
            self._open.clear()
        for db in connections:
            with db.busy:  # a thread's statement in progress ends first
                db.closed = True
                db.close()

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        while True:
            db: _Connection | None = getattr(self._local, "db", None)
            if db is None or db.closed:  # none yet, or closed by `close`
                # any thread may close it (`close`); each thread still uses only its own
                db = sqlite3.connect(
                    self.path, timeout=60, isolation_level=None, check_same_thread=False, factory=_Connection
                )
                db.execute("PRAGMA busy_timeout=60000")
                db.execute("PRAGMA synchronous=NORMAL")
                with self._open_lock:
                    self._open.add(db)
                self._local.db = db
            with db.busy:
                if not db.closed:  # else `close` got to it between the check above and the lock
                    yield db
                    return

    @contextmanager
    def _transaction(self) -> Iterator[sqlite3.Connection]:
        """One write transaction: committed when the block ends, rolled back if it raises."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                yield db
            except BaseException:
                db.execute("ROLLBACK")
                raise
            db.execute("COMMIT")

    def insert(
        self, entry: CatalogEntry, commit_file: Callable[[], None], steps: Iterable[StepRow] = ()
    ) -> None:
        """Insert `entry` (and its `steps`) and run `commit_file` inside one write transaction: either
        both happen or the row does not; a crash after `commit_file` leaves a file without a row, which
        `rebuild` adopts."""
        with self._transaction() as db:
            try:
                db.execute(_INSERT, [getattr(entry, c) for c in COLUMNS])
            except sqlite3.IntegrityError as exc:
                raise DuplicateTrajectoryError(entry.id) from exc
            db.executemany(_INSERT_STEPS, steps)
            commit_file()

    def get(self, trajectory_id: str) -> CatalogEntry | None:
        with self._connect() as db:
            row = db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM trajectories WHERE id = ?", (trajectory_id,)
            ).fetchone()
        return CatalogEntry(*row) if row else None

    def query(
        self, filters: dict[str, Any] | None = None, *, limit: int | None = None, unindexed: bool = False
    ) -> list[CatalogEntry]:
        filters = check_filters(filters)
        clauses = [f"{key} = ?" for key in filters]
        if unindexed:
            clauses.append("indexed = 0")
        sql = f"SELECT {', '.join(COLUMNS)} FROM trajectories"
        if clauses:
            sql += " WHERE " + " AND ".join(clauses)
        sql += " ORDER BY added_at, id"
        if limit is not None:
            sql += f" LIMIT {int(limit)}"
        with self._connect() as db:
            return [CatalogEntry(*row) for row in db.execute(sql, list(filters.values()))]

    def count(self) -> int:
        with self._connect() as db:
            return db.execute("SELECT COUNT(*) FROM trajectories").fetchone()[0]

    def size(self, filters: dict[str, Any] | None = None) -> tuple[int, int]:
        """(trajectories, steps) matching `filters`, without loading the rows."""
        filters = check_filters(filters)
        where = " AND ".join(f"{key} = ?" for key in filters) or "1"
        with self._connect() as db:
            found = db.execute(
                f"SELECT COUNT(*), COALESCE(SUM(n_steps), 0) FROM trajectories WHERE {where}",
                list(filters.values()),
            ).fetchone()
        return int(found[0]), int(found[1])

    def unindexed(self, ids: list[str]) -> set[str]:
        """Those of `ids` not yet marked indexed (a batch: one placeholder per id)."""
        if not ids:
            return set()
        with self._connect() as db:
            marks = ",".join("?" * len(ids))
            rows = db.execute(f"SELECT id FROM trajectories WHERE indexed = 0 AND id IN ({marks})", ids)
            return {row[0] for row in rows}

    def set_indexed(self, ids: Iterable[str], value: int = 1) -> None:
        with self._transaction() as db:
            db.executemany("UPDATE trajectories SET indexed = ? WHERE id = ?", [(value, i) for i in ids])

    def replace_all(self, entries: Iterable[CatalogEntry], steps: Iterable[StepRow]) -> None:
        """Rebuild: the catalog becomes exactly `entries` and `steps` (used by reindex, from the files)."""
        with self._transaction() as db:
            db.execute("DELETE FROM trajectories")
            db.execute("DELETE FROM steps")
            db.executemany(_INSERT, [[getattr(e, c) for c in COLUMNS] for e in entries])
            db.executemany(_INSERT_STEPS, steps)
            db.execute(f"PRAGMA user_version = {VERSION}")

    # -- index documents matching filters (scope "steps": step ids "<trajectory>#<n>"; "summaries": ids)
    def count_matching(self, scope: str, filters: dict[str, Any], limit: int) -> int:
        """How many documents match, counting no further than `limit` (cheap when many match)."""
        sql, params = _matching_sql(scope, filters)
        with self._connect() as db:
            return int(db.execute(f"SELECT COUNT(*) FROM ({sql} LIMIT ?)", [*params, limit]).fetchone()[0])

    def matching(self, scope: str, filters: dict[str, Any]) -> list[str]:
        sql, params = _matching_sql(scope, filters)
        with self._connect() as db:
            return [row[0] for row in db.execute(sql, params)]

    def match_fraction(self, scope: str, filters: dict[str, Any]) -> float:
        """Estimated share of `scope`'s documents that match, from one cheap count per filter table
        (assuming the trajectory-level and step-level filters independent)."""
        trajectories, steps = self.size({})
        total = steps if scope == "steps" else trajectories
        if not total:
            return 0.0
        by_trajectory = {k: v for k, v in filters.items() if k not in STEP_KEYS}
        fraction = self.size(by_trajectory)[1 if scope == "steps" else 0] / total
        with self._connect() as db:
            for key in STEP_KEYS:
                if key in filters:
                    found = db.execute(f"SELECT COUNT(*) FROM steps WHERE {key} = ?", (filters[key],))
                    fraction *= found.fetchone()[0] / total
        return fraction

    def keep_matching(self, scope: str, filters: dict[str, Any], ids: list[str]) -> set[str]:
        """The members of `ids` that match `filters` (looked up id by id)."""
        sql, params = _matching_sql(scope, filters, among=True)
        with self._connect() as db:
            return {row[0] for row in db.execute(sql, [json.dumps(ids), *params])}


def _matching_sql(scope: str, filters: dict[str, Any], among: bool = False) -> tuple[str, list[Any]]:
    """SQL selecting the ids of `scope`'s documents that match `filters`; with `among`, only those in
    a JSON list given as the first parameter (CROSS JOIN makes SQLite look them up one by one instead
    of scanning every match)."""
    step_filters = {k: v for k, v in filters.items() if k in STEP_KEYS}
    trajectory_filters = check_filters({k: v for k, v in filters.items() if k not in STEP_KEYS})
    join = "CROSS JOIN" if among else "JOIN"
    ids = f"json_each(?) j {join} " if among else ""
    if scope == "steps":
        sql = f"SELECT s.id FROM {ids}steps s {join} trajectories t WHERE t.id = s.trajectory_id"
        clauses = ["s.id = j.value"] if among else []
    elif scope == "summaries" and not step_filters:
        sql = f"SELECT t.id FROM {ids}trajectories t WHERE 1"
        clauses = ["t.id = j.value"] if among else []
    else:
        raise ValueError(f"the catalog cannot filter scope {scope!r} by {', '.join(step_filters)}")
    clauses += [f"t.{k} = ?" for k in trajectory_filters] + [f"s.{k} = ?" for k in step_filters]
    return " AND ".join([sql, *clauses]), [*trajectory_filters.values(), *step_filters.values()]
