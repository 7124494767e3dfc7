"""Trajectories for the UI: one page of the experience catalog at a time (SQL LIMIT/OFFSET on a
read-only connection, so a store of any size costs the same per page), one trajectory by id, and the
experience store's semantic search with the CLI's filters."""

from __future__ import annotations

import sqlite3
import threading
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.experience.catalog import COLUMNS, FILTER_KEYS, CatalogEntry
from recreate.experience.index import filter_keys
from recreate.experience.schema import SchemaError, Trajectory, load_trajectory

PAGE_SIZE = 50


@dataclass
class Page:
    entries: list[Any]  # catalog entries, or an eval's result rows
    total: int
    offset: int
    size: int = PAGE_SIZE

    @property
    def next_offset(self) -> int | None:
        return self.offset + self.size if self.offset + self.size < self.total else None

    @property
    def prev_offset(self) -> int | None:
        return max(0, self.offset - self.size) if self.offset > 0 else None


class TrajectoryReader:
    def __init__(self, home: Path, *, embedding: str = "hash", chroma_url: str | None = None) -> None:
        self.home = home
        self.root = home / "experience"
        self.catalog_path = self.root / "catalog.sqlite"
        self._embedding, self._chroma_url = embedding, chroma_url
        self._store: Any = None
        self._store_lock = threading.Lock()  # pages render in a thread pool: one store, opened once

    def close(self) -> None:
        """Close the store the searches opened (its files and index connections)."""
        with self._store_lock:
            if self._store is not None:
                self._store.close()
                self._store = None

    def _connect(self) -> closing[sqlite3.Connection]:
        # closed on leaving the block (a connection's own `with` only commits, and its statement cache
        # is a reference cycle: unclosed, the file stays open until the garbage collector runs)
        return closing(sqlite3.connect(f"file:{self.catalog_path}?mode=ro", uri=True))

    def page(self, filters: dict[str, str], offset: int = 0, size: int = PAGE_SIZE) -> Page:
        """Newest first: in reverse order of storing (the catalog's rowid, so SQLite walks its b-tree or
        the filter's index backwards instead of sorting every match). Filters: the catalog's columns and
        `error_type` (of any step); other keys are ignored."""
        if not self.catalog_path.is_file():
            return Page([], 0, 0, size)
        chosen = {k: v for k, v in filters.items() if k in FILTER_KEYS and v}
        clauses, args = [f"{key} = ?" for key in chosen], list(chosen.values())
        if filters.get("error_type"):  # as the CLI's search: trajectories with a step of this error type
            clauses.append("id IN (SELECT trajectory_id FROM steps WHERE error_type = ?)")
            args.append(filters["error_type"])
        where = " AND ".join(clauses) or "1"
        with self._connect() as db:
            total = db.execute(f"SELECT COUNT(*) FROM trajectories WHERE {where}", args).fetchone()[0]
            rows = db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM trajectories WHERE {where} "
                "ORDER BY rowid DESC LIMIT ? OFFSET ?",
                [*args, size, max(0, offset)],
            ).fetchall()
        return Page([CatalogEntry(*row) for row in rows], total, max(0, offset), size)

    def entry(self, trajectory_id: str) -> CatalogEntry | None:
        if not self.catalog_path.is_file():
            return None
        with self._connect() as db:
            row = db.execute(
                f"SELECT {', '.join(COLUMNS)} FROM trajectories WHERE id = ?", (trajectory_id,)
            ).fetchone()
        return CatalogEntry(*row) if row else None

    def load(self, trajectory_id: str) -> Trajectory | None:
        """From the store, else from a run's or an eval's own copy (runs keep theirs); None when no
        copy loads."""
        return self.read(trajectory_id)[0]

    def read(self, trajectory_id: str) -> tuple[Trajectory | None, str]:
        """The trajectory (its first copy that loads), or None and why the copies there do not load
        ("" when there is none)."""
        problem = ""
        for path in self._copies(trajectory_id):
            if path.is_file():
                try:
                    return load_trajectory(path), ""
                except (SchemaError, OSError, ValueError) as exc:  # ValueError: not UTF-8
                    problem = problem or self._problem(path, exc)
        return None, problem

    def _problem(self, path: Path, exc: Exception) -> str:
        """Why `path` does not load; of a file outside the home (a link out of it) only its kind, as
        a schema error quotes values of the file."""
        try:
            inside = path.resolve().is_relative_to(self.home.resolve())
        except (OSError, RuntimeError):
            inside = False
        if not inside:
            return f"{type(exc).__name__} (a file outside the home)"
        return f"{type(exc).__name__}: {exc}"[:500]

    def _copies(self, trajectory_id: str) -> list[Path]:
        """Where a trajectory may be: the store's file (a path inside the store) and the runs' copies."""
        entry = self.entry(trajectory_id)
        stored = Path(entry.path) if entry else None
        inside = stored is not None and not stored.is_absolute() and ".." not in stored.parts
        candidates = [self.root / stored] if stored is not None and inside else []
        if "/" not in trajectory_id and not trajectory_id.startswith("."):
            candidates += [p / "trajectories" / f"{trajectory_id}.json" for p in self._run_dirs()]
        return candidates

    def _run_dirs(self) -> list[Path]:
        return [
            p
            for root in ("runs", "evals")
            if (self.home / root).is_dir()
            for p in (self.home / root).iterdir()
        ]

    def siblings(self, traj: Trajectory, limit: int = 20) -> list[CatalogEntry]:
        """Other runs of the same task (other versions, other seeds): candidates for a side-by-side."""
        page = self.page({"domain": traj.domain, "task_id": traj.task_id}, 0, limit + 1)
        return [e for e in page.entries if e.id != traj.trajectory_id][:limit]

    def _indexed(self) -> bool:
        """Whether there is an index to search: opening the store's embedded index where there is none
        would create one (a GET, which any web page can send, writes nothing to the home)."""
        return self._chroma_url is not None or (self.root / "chroma").is_dir()

    def search(self, query: str, scope: str, filters: dict[str, str], k: int) -> list[Any]:
        """The store's own search (ExperienceStore.search), with background indexing off: the UI never
        writes to the store."""
        if not self.catalog_path.is_file() or not self._indexed():
            return []
        with self._store_lock:
            if self._store is None:
                from recreate.experience.store import ExperienceStore

                self._store = ExperienceStore(
                    self.root, embedding=self._embedding, chroma_url=self._chroma_url, index=False
                )
            store = self._store
        return store.search(query, scope=scope, filters=search_filters(scope, filters), k=k)


def search_filters(scope: str, filters: dict[str, str]) -> dict[str, str]:
    """The filled-in filters, each one the search of `scope` answers; ValueError names one it does not
    (never a filter silently dropped)."""
    chosen = {key: value for key, value in filters.items() if value}
    allowed = filter_keys(scope)
    unknown = sorted(set(chosen) - set(allowed))
    if unknown:
        raise ValueError(
            f"the {scope} search cannot filter by {', '.join(unknown)} (it filters by {', '.join(allowed)}): "
            "clear that field or choose another scope"
        )
    return chosen
