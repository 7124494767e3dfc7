"""Keeping the store's three copies in agreement: the trajectory files are the truth, the SQLite catalog
and the Chroma index are derived from them. `rebuild` makes both again from the files; `compare` says
where they disagree (an empty DriftReport when they agree). `ExperienceStore.reindex` and
`ExperienceStore.verify` are these two."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

from recreate.experience.catalog import Catalog, entry_for, step_rows
from recreate.experience.index import ExperienceIndex
from recreate.experience.reports import DriftReport, IngestReport
from recreate.experience.schema import SchemaError, load_trajectory, utcnow

INDEX_BATCH = 256  # trajectories embedded and written to the index at a time


class Stored(Protocol):
    """What of an ExperienceStore these read: its folders, catalog, index and memory items."""

    root: Path
    files: Path
    catalog: Catalog

    @property
    def index(self) -> ExperienceIndex: ...

    def wait_for_index(self) -> None: ...

    def memory_items(self) -> list[dict[str, Any]]: ...


def trajectory_files(store: Stored) -> dict[str, Path]:
    """Every stored trajectory file by its id (its name)."""
    return {p.stem: p for p in sorted(store.files.glob("*/*.json"))}


def rebuild(store: Stored, progress: Callable[[int], None] | None = None) -> IngestReport:
    """Rebuild the catalog and the index from the trajectory files. Unreadable files are reported and
    left where they are; stale temp files of killed writers are removed."""
    store.wait_for_index()
    report = IngestReport()
    for tmp in store.files.glob("*/.*.tmp"):
        tmp.unlink(missing_ok=True)
    old = {e.id: e for e in store.catalog.query()}
    entries, trajectories, steps = [], [], []
    for stem, path in trajectory_files(store).items():
        try:
            traj = load_trajectory(path)
        except SchemaError as exc:
            report.errors.append(f"{path}: {exc}")
            continue
        if traj.trajectory_id != stem:
            report.errors.append(f"{path}: holds trajectory {traj.trajectory_id!r}, not {stem!r}")
            continue
        added_at = old[stem].added_at if stem in old else utcnow()
        source = old[stem].source if stem in old else None
        entries.append(
            entry_for(traj, path=str(path.relative_to(store.root)), added_at=added_at, source=source)
        )
        trajectories.append(traj)
        steps += step_rows(traj)
    store.catalog.replace_all(entries, steps)
    index = store.index
    index.reset()
    for start in range(0, len(trajectories), INDEX_BATCH):
        batch = trajectories[start : start + INDEX_BATCH]
        index.add(batch)
        store.catalog.set_indexed([t.trajectory_id for t in batch])
        if progress:
            progress(len(batch))
    memory = store.memory_items()
    for name in {i.get("scaffold_name", "") for i in memory}:
        index.add_memory([i for i in memory if i.get("scaffold_name", "") == name], scaffold_name=name)
    report.added = [t.trajectory_id for t in trajectories]
    return report


def compare(store: Stored) -> DriftReport:
    """Compare files, catalog and index; an empty report means they agree."""
    index = store.index  # opened first: what it picks up on opening is indexed before we compare
    store.wait_for_index()
    files = set(trajectory_files(store))
    entries = {e.id: e for e in store.catalog.query()}
    drift = DriftReport(
        uncataloged_files=sorted(files - set(entries)),
        missing_files=sorted(i for i, e in entries.items() if not (store.root / e.path).exists()),
    )
    summaries, steps = index.ids("summaries"), index.ids("steps")
    expected_steps = {f"{i}#{n}" for i, e in entries.items() for n in range(e.n_steps)}
    step_owner = {s.rsplit("#", 1)[0] for s in expected_steps - steps}
    drift.missing_in_index = sorted((set(entries) - summaries) | step_owner)
    drift.extra_in_index = sorted((summaries - set(entries)) | (steps - expected_steps))
    for scope, indexed in (("steps", steps), ("summaries", summaries)):
        copied = index.vector_file_ids(scope)
        if copied is not None:
            drift.vectors_missing += sorted(indexed - copied)
    memory = {str(i["id"]) for i in store.memory_items()}
    indexed_memory = index.ids("memory")
    drift.memory_missing, drift.memory_extra = (
        sorted(memory - indexed_memory),
        sorted(indexed_memory - memory),
    )
    return drift
