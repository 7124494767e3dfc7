"""Which tasks a scaffold was evolved on, so `recreate eval --split test` can refuse to score them.

Sources: the validation scores attached to every version in the scaffold's lineage (the gate's tasks),
and the train/val task lists of every evolve run (`<home>/runs/*/`) whose history holds a version of
that lineage. A plain seed directory has no lineage and was evolved on nothing.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from recreate.scaffold import Scaffold, ScaffoldError, ScaffoldStore

LINEAGE_FILE = ".lineage.json"  # written by ScaffoldStore.export next to an exported scaffold


def lineage_of(source: str | Path, scaffold: Scaffold, home: Path) -> list[dict[str, Any]]:
    """The lineage records (VersionInfo as dicts, root first, the version itself last) of a scaffold
    loaded from `source`."""
    path = Path(str(source)).expanduser()
    if (path / LINEAGE_FILE).is_file():
        return json.loads((path / LINEAGE_FILE).read_text(encoding="utf-8"))
    if scaffold.ref is None:
        return []
    location, _, _ = str(source).rpartition("@")
    stores = [ScaffoldStore(home / "scaffolds")]
    if location and Path(location).expanduser().is_dir():
        folder = Path(location).expanduser()
        stores = [ScaffoldStore(folder.parent), ScaffoldStore(folder), *stores]
    for store in stores:
        try:
            return [info.model_dump(mode="json") for info in store.lineage(scaffold.ref)]
        except (ScaffoldError, OSError, KeyError):
            continue
    return []


def evolved_task_ids(source: str | Path, scaffold: Scaffold, home: Path) -> set[str]:
    """Task ids whose outcomes shaped this version (empty for a root version: it was evolved on nothing)."""
    lineage = lineage_of(source, scaffold, home)
    if not lineage or not lineage[-1].get("parent"):
        return set()
    refs = {f"{info['name']}@v{info['version']}" for info in lineage}
    seen: set[str] = set()
    for info in lineage:
        for record in info.get("scores") or []:
            seen.update(str(task_id) for task_id in (record.get("scores") or {}))
    for run in sorted((home / "runs").glob("*/config.json")) if refs else []:
        config = json.loads(run.read_text(encoding="utf-8"))
        result_file = run.with_name("result.json")
        result = json.loads(result_file.read_text(encoding="utf-8")) if result_file.is_file() else {}
        made = {result.get("final")} | {
            e.get("ref") for e in result.get("history") or [] if isinstance(e, dict)
        }
        made |= _scored_by(lineage, run.parent.name)  # a run killed before its result.json
        if refs & (made - {config.get("seed_ref")}):  # a run that produced a version of this lineage
            seen.update(str(t) for t in (config.get("train") or []) + (config.get("val") or []))
    return seen


def _scored_by(lineage: list[dict[str, Any]], run_id: str) -> set[str]:
    """The versions of `lineage` that the run `run_id` validated (its gate's scores name the run)."""
    return {
        f"{info['name']}@v{info['version']}"
        for info in lineage
        if any(record.get("run") == run_id for record in info.get("scores") or [])
    }
