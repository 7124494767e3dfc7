"""SQLite catalog of stored trajectories (WAL mode; one connection per thread, safe across threads and
processes). The JSON files are the source of truth; the catalog can always be rebuilt from them."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.experience.digest import outcome_label
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
-- columns: {", ".join(COLUMNS)}
"""
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


def check_filters(filters: dict[str, Any] | None, allowed: Iterable[str] = FILTER_KEYS) -> dict[str, Any]:
    filters = {k: v for k, v in (filters or {}).items() if v is not None and v != ""}
    unknown = sorted(set(filters) - set(allowed))
    if unknown:
        raise ValueError(f"unknown filter(s) {', '.join(unknown)}; known: {', '.join(allowed)}")
    return filters


class Catalog:
    def __init__(self, path: Path) -> None:
        self.path = path
        path.parent.mkdir(parents=True, exist_ok=True)
        self._local = threading.local()  # connections are per thread; closing each would checkpoint the WAL
        with self._connect() as db:
            db.execute("PRAGMA journal_mode=WAL")
            db.executescript(_SCHEMA)

    def close(self) -> None:
        """Close this thread's connection (other threads' connections close when they are freed)."""
        db = getattr(self._local, "db", None)
        if db is not None:
            db.close()
            self._local.db = None

    @contextmanager
    def _connect(self) -> Iterator[sqlite3.Connection]:
        db = getattr(self._local, "db", None)
        if db is None:
            db = sqlite3.connect(self.path, timeout=60, isolation_level=None, check_same_thread=True)
            db.execute("PRAGMA busy_timeout=60000")
            db.execute("PRAGMA synchronous=NORMAL")
            self._local.db = db
        yield db

    def insert(self, entry: CatalogEntry, commit_file: Callable[[], None]) -> None:
        """Insert `entry` and run `commit_file` inside one write transaction: either both happen or the
        row does not; a crash after `commit_file` leaves a file without a row, which `rebuild` adopts."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                try:
                    db.execute(
                        _INSERT,
                        [getattr(entry, c) for c in COLUMNS],
                    )
                except sqlite3.IntegrityError as exc:
                    raise DuplicateTrajectoryError(entry.id) from exc
                commit_file()
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise

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

    def set_indexed(self, ids: Iterable[str], value: int = 1) -> None:
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            db.executemany("UPDATE trajectories SET indexed = ? WHERE id = ?", [(value, i) for i in ids])
            db.execute("COMMIT")

    def replace_all(self, entries: Iterable[CatalogEntry]) -> None:
        """Rebuild: the catalog becomes exactly `entries` (used by reindex, from the files)."""
        with self._connect() as db:
            db.execute("BEGIN IMMEDIATE")
            try:
                db.execute("DELETE FROM trajectories")
                db.executemany(
                    _INSERT,
                    [[getattr(e, c) for c in COLUMNS] for e in entries],
                )
                db.execute("COMMIT")
            except BaseException:
                db.execute("ROLLBACK")
                raise
