"""The experience store: one JSON file per trajectory (the source of truth), a SQLite catalog, and a
Chroma index. Writes are atomic and safe under concurrent threads and processes; duplicates are refused
and reported; the catalog and the index can always be rebuilt from the files (`reindex`)."""

from __future__ import annotations

import json
import logging
import os
import re
import threading
import uuid
from collections.abc import Callable, Iterable, Sequence
from pathlib import Path
from typing import Any

from chromadb.api.types import EmbeddingFunction
from filelock import FileLock

from recreate.config import Settings
from recreate.experience.catalog import (
    Catalog,
    CatalogEntry,
    DuplicateTrajectoryError,
    check_filters,
    entry_for,
    step_rows,
)
from recreate.experience.consistency import INDEX_BATCH, compare, rebuild
from recreate.experience.digest import cap_observations
from recreate.experience.index import SCOPES, ExperienceIndex, Hit, filter_keys
from recreate.experience.indexer import BackgroundIndexer
from recreate.experience.ownership import IndexBusyError
from recreate.experience.reports import DriftReport, IngestReport
from recreate.experience.schema import SchemaError, Trajectory, load_trajectory, utcnow
from recreate.jsonl import append_jsonl

_SAFE_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,199}$")
MAX_OBSERVATION_CHARS = 200_000
log = logging.getLogger(__name__)


class TrajectoryNotFoundError(KeyError):
    """No trajectory with this id in the store."""

    def __str__(self) -> str:  # KeyError would print the message in quotes
        return str(self.args[0])


class StoreError(RuntimeError):
    """The store cannot do what was asked without risking stored data; the message says what to do."""


class ExperienceStore:
    def __init__(
        self,
        root: str | Path,
        *,
        embedding: str | EmbeddingFunction = "minilm",
        chroma_url: str | None = None,
        index: bool = True,
        max_observation_chars: int = MAX_OBSERVATION_CHARS,
        vector_cache: bool = True,
    ) -> None:
        """`vector_cache`: keep every embedded document's vector (`vector-cache.sqlite`, ~1.5 KB per
        distinct document): a repeated step, a re-import or a `reindex` costs no model call."""
        self.root = Path(root)
        self.files = self.root / "trajectories"
        self.files.mkdir(parents=True, exist_ok=True)
        self.catalog = Catalog(self.root / "catalog.sqlite")
        self.memory_file = self.root / "memory.jsonl"
        self.auto_index = index
        self.max_observation_chars = max_observation_chars
        self._embedding, self._chroma_url = embedding, chroma_url
        self._vector_cache = self.root / "vector-cache.sqlite" if vector_cache else None
        self._index: ExperienceIndex | None = None
        self._index_lock = threading.Lock()
        self._sync_lock = threading.Lock()  # one sync at a time, or two could index the same entries
        self._indexer = BackgroundIndexer(self._sync_if_owner)  # `add(..., index_later=True)`
        # False: a search answers from what is indexed now, without waiting for background indexing;
        # an evolve loop sets it and calls `flush_index` at each round's start instead
        self.search_waits = True
        if self.catalog.needs_step_rows():
            self._backfill_step_rows()

    def _backfill_step_rows(self) -> None:
        """Catalogs written before the steps table existed get it from the files, once."""
        rows = []
        for entry in self.catalog.query():
            try:
                rows += step_rows(load_trajectory(self.root / entry.path))
            except (SchemaError, OSError):
                continue  # `verify` reports missing or broken files; the rest still gets its rows
        self.catalog.add_step_rows(rows)

    def close(self) -> None:
        """Index what is stored (`flush_index`, when this store opened its index), release the catalog
        connection and the Chroma client; the store reopens them on next use."""
        if self._index is not None:
            self.flush_index()
        self.wait_for_index()
        self.catalog.close()
        with self._index_lock:
            if self._index is not None:
                self._index.close()
                self._index = None

    def __enter__(self) -> ExperienceStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    @property
    def index(self) -> ExperienceIndex:
        with self._index_lock:
            opened = self._index is None
            if opened:
                self._index = ExperienceIndex(
                    self.root / "chroma",
                    embedding=self._embedding,
                    url=self._chroma_url,
                    vector_cache=self._vector_cache,
                )
            index = self._index
        if opened and self.auto_index and index.writable() and self.catalog.query(unindexed=True, limit=1):
            self._index_in_background()  # stored but not indexed by a killed run or a non-owner process
        return index

    # -- writing -----------------------------------------------------------------------------------
    def add(
        self, trajectory: Trajectory | dict[str, Any], *, source: str | None = None, index_later: bool = False
    ) -> CatalogEntry:
        """Store one trajectory; DuplicateTrajectoryError if its id is taken, SchemaError if invalid.
        `index_later`: return once its file and catalog row are written and index it in the background
        when adds go quiet (searches, verify and close do not wait for quiet: they index at once)."""
        report = self.ingest([trajectory], source=source, strict=True, index=not index_later)
        if index_later and self.auto_index:
            self._index_in_background()
        return self.catalog.get(report.added[0])  # type: ignore[return-value]

    def _index_in_background(self) -> None:
        self._indexer.schedule()

    def _sync_if_owner(self) -> None:
        if self.index.writable():
            self.sync_index()

    def wait_for_index(self) -> None:
        """Until the background indexing of `add(..., index_later=True)` is done."""
        error = self._indexer.wait()
        if error is not None:
            # the entries stay marked unindexed: the next sync_index (or reindex) picks them up
            log.warning("background indexing failed: %s", error)

    def flush_index(self, trajectory_ids: Sequence[str] | None = None) -> int:
        """Index every run stored so far, now (a pass in the background indexer, with its retries), and
        wait for it; with `trajectory_ids`, only when one of those runs is not indexed yet (else return
        at once, leaving the others to the background). Returns how many stored runs are still not
        indexed after a pass: 0, unless indexing failed even when tried again (logged; they stay
        marked for the next flush, add or opening) or another process owns the index (which indexes
        them)."""
        if trajectory_ids is not None and not self._unindexed(trajectory_ids):
            return 0
        if self.auto_index and self.catalog.query(unindexed=True, limit=1):
            self._indexer.schedule()
        self.wait_for_index()
        left = len(self.catalog.query(unindexed=True)) if self.auto_index else 0
        if left:
            log.warning(
                "%d stored runs are not indexed yet (indexing failed, or another process owns the index); "
                "searches see them once they are",
                left,
            )
        return left

    def ingest(
        self,
        items: Iterable[Trajectory | dict[str, Any] | Path],
        *,
        source: str | None = None,
        strict: bool = False,
        progress: Callable[[int], None] | None = None,
        index: bool = True,
    ) -> IngestReport:
        """Store many trajectories; bad ones and duplicates are skipped and reported (raised if strict).
        With `index=False` they are left for `sync_index`."""
        report, pending = IngestReport(), []
        for item in items:
            label = str(item) if isinstance(item, Path) else source or "input"
            try:
                traj = item if isinstance(item, Trajectory) else load_trajectory(item)
                traj = cap_observations(traj, self.max_observation_chars, report.truncated)
                entry = self._write(traj, source)
            except DuplicateTrajectoryError as exc:
                if strict:
                    raise
                report.duplicates.append(exc.trajectory_id)
                continue
            except (SchemaError, StoreError) as exc:
                if strict:
                    raise
                report.errors.append(f"{label}: {exc}")
                continue
            report.added.append(entry.id)
            if index:
                pending.append(traj)
            if len(pending) >= INDEX_BATCH:
                self._index_now(pending, report)
            if progress:
                progress(1)
        self._index_now(pending, report)
        if index and self.auto_index and self.index.writable():
            self.sync_index()  # entries other processes stored while this one owns the index
        return report

    def _unindexed(self, ids: Sequence[str], batch: int = 900) -> set[str]:
        """Those of `ids` not indexed yet (asked in batches, under SQLite's limit on parameters)."""
        return set().union(
            *(self.catalog.unindexed(list(ids[i : i + batch])) for i in range(0, len(ids), batch))
        )

    def _index_now(self, pending: list[Trajectory], report: IngestReport) -> None:
        if self.auto_index and pending:
            try:
                with self._sync_lock:  # a background sync may have indexed some of them meanwhile
                    waiting = self.catalog.unindexed([t.trajectory_id for t in pending])
                    fresh = [t for t in pending if t.trajectory_id in waiting]
                    self.index.add(fresh)
                    self.catalog.set_indexed([t.trajectory_id for t in fresh])
            except IndexBusyError:
                report.index_deferred += len(pending)
        pending.clear()

    def _write(self, traj: Trajectory, source: str | None) -> CatalogEntry:
        if not _SAFE_ID.match(traj.trajectory_id):
            raise StoreError(
                f"trajectory id {traj.trajectory_id!r} is not usable as a file name "
                "(letters, digits, '.', '_', '-'; at most 200 chars)"
            )
        domain_dir = re.sub(r"[^A-Za-z0-9._-]+", "_", traj.domain) or "_"
        final = self.files / domain_dir / f"{traj.trajectory_id}.json"
        final.parent.mkdir(parents=True, exist_ok=True)
        data = traj.to_json().encode("utf-8")
        tmp = final.with_name(f".{final.name}.{uuid.uuid4().hex[:8]}.tmp")
        tmp.write_bytes(data)

        def commit_file() -> None:
            try:
                os.link(tmp, final)  # never overwrites: refuses if the name exists
            except FileExistsError:
                if final.read_bytes() != data:
                    raise StoreError(
                        f"{final} exists with other content but is not in the catalog; "
                        "run `recreate experience reindex` to adopt it"
                    ) from None

        entry = entry_for(traj, path=str(final.relative_to(self.root)), added_at=utcnow(), source=source)
        try:
            self.catalog.insert(entry, commit_file, step_rows(traj))
        finally:
            tmp.unlink(missing_ok=True)
        return entry

    def add_memory(self, items: Iterable[dict[str, Any]], *, scaffold_name: str = "") -> int:
        items = [dict(item, scaffold_name=scaffold_name) for item in items]
        for item in items:
            if not item.get("id"):
                raise StoreError(f"memory item without an id: {json.dumps(item)[:200]}")
        with FileLock(str(self.memory_file) + ".lock"):
            append_jsonl(self.memory_file, items)
        if self.auto_index and self.index.writable():
            for name in {i["scaffold_name"] for i in items}:
                self.index.add_memory([i for i in items if i["scaffold_name"] == name], scaffold_name=name)
        return len(items)

    # -- reading -----------------------------------------------------------------------------------
    def get(self, trajectory_id: str) -> Trajectory:
        entry = self.catalog.get(trajectory_id)
        if entry is None:
            raise TrajectoryNotFoundError(f"no trajectory {trajectory_id!r} in {self.root}")
        return load_trajectory(self.root / entry.path)

    def list(self, filters: dict[str, Any] | None = None, *, limit: int | None = None) -> list[CatalogEntry]:
        return self.catalog.query(filters, limit=limit)

    def search(
        self, query: str, *, scope: str = "steps", filters: dict[str, Any] | None = None, k: int = 5
    ) -> list[Hit]:
        """Semantic search; filters are answered by the catalog, not by Chroma's slow metadata scan.

        Steps and summaries are ranked exactly (every stored vector scored from the vector file) while
        the index is embedded and within `index.exact_limit`; beyond that, or with a Chroma server, by
        the best of `k * index.overfetch` HNSW candidates. A filter matching few documents
        (≤ `index.brute_force_limit`) has them scored exactly; one matching many walks the ranking
        and keeps the matching ids (catalog lookups), falling back to scoring all the matching
        documents when the HNSW candidates hold fewer than k of them."""
        filters = check_filters(filters, filter_keys(scope))
        index, catalog = self.index, self.catalog  # opening the index picks up runs left unindexed
        if self.search_waits:
            self.wait_for_index()
        if scope == "memory":
            return index.search(query, scope=scope, filters=filters, k=k)
        vector = index.embed(query)
        if not filters:
            return index.hits(scope, index.ranked(scope, vector, k))
        many = catalog.count_matching(scope, filters, index.brute_force_limit + 1) > index.brute_force_limit
        if many and catalog.match_fraction(scope, filters) * index.overfetch >= 2:
            chosen = index.ranked(
                scope, vector, k, keep=lambda ids: catalog.keep_matching(scope, filters, ids)
            )
            if len(chosen) == k:
                return index.hits(scope, chosen)
        return index.nearest_among(scope, vector, catalog.matching(scope, filters), k)

    def memory_items(self) -> list[dict[str, Any]]:
        items: dict[str, dict[str, Any]] = {}
        if self.memory_file.exists():
            for line in self.memory_file.read_text(encoding="utf-8").splitlines():
                try:
                    item = json.loads(line)
                except json.JSONDecodeError:
                    continue  # a torn last line from a killed writer; the earlier lines stand
                items[str(item["id"])] = item
        return list(items.values())

    def export(self, path: str | Path, filters: dict[str, Any] | None = None) -> int:
        """Write the matching trajectories as schema-v1 JSONL (atomically); returns how many."""
        path = Path(path)
        tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex[:8]}.tmp")
        entries = self.list(filters)
        with tmp.open("w", encoding="utf-8") as fh:
            for entry in entries:
                fh.write((self.root / entry.path).read_text(encoding="utf-8").strip() + "\n")
        tmp.replace(path)
        return len(entries)

    # -- consistency ---------------------------------------------------------------------------------
    def sync_index(self) -> int:
        """Index catalog entries not yet in the index (written with index=False, by a process that did not
        own the index, or by a killed run). Raises IndexBusyError if another process owns the index."""
        with self._sync_lock:
            entries = self.catalog.query(unindexed=True)
            for start in range(0, len(entries), INDEX_BATCH):
                batch = entries[start : start + INDEX_BATCH]
                self.index.add([load_trajectory(self.root / e.path) for e in batch])
                self.catalog.set_indexed([e.id for e in batch])
            return len(entries)

    def reindex(self, progress: Callable[[int], None] | None = None) -> IngestReport:
        """Rebuild the catalog and the index from the trajectory files (see consistency.rebuild)."""
        return rebuild(self, progress)

    def verify(self) -> DriftReport:
        """Compare files, catalog and index; an empty report means they agree."""
        return compare(self)


def open_store(settings: Settings, **options: Any) -> ExperienceStore:
    """The store under `<home>/experience`, with the configured embedding and Chroma server (if any)."""
    options.setdefault("embedding", settings.embedding)
    return ExperienceStore(settings.home / "experience", chroma_url=settings.chroma_url, **options)


__all__ = [
    "SCOPES",
    "open_store",
    "DriftReport",
    "DuplicateTrajectoryError",
    "ExperienceStore",
    "IngestReport",
    "StoreError",
    "TrajectoryNotFoundError",
]
