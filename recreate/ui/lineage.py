"""Versions of an evolve run as a tree, the gate's decisions, the proposals of each round and the
trajectories cited as evidence for each edit (read from the scaffold store and the run's proposals)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recreate.scaffold import ScaffoldStore
from recreate.scaffold.diff import ScaffoldDiff
from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.model import Scaffold
from recreate.scaffold.store import VersionInfo
from recreate.ui.runs import EvolveRun, mean, read_json


@dataclass
class VersionNode:
    ref: str
    parent: str | None
    accepted: bool
    round: int
    val_mean: float | None
    reason: str
    gate: dict[str, Any]
    n_ops: int
    children: list[VersionNode] = field(default_factory=list)


def version_tree(run: EvolveRun) -> list[VersionNode]:
    """The run's versions as trees (roots: versions whose parent is not in the run, i.e. the seed)."""
    nodes = {
        h["ref"]: VersionNode(
            h["ref"],
            h.get("parent"),
            bool(h.get("accepted")),
            int(h.get("round", 0)),
            mean(h.get("val")),
            str(h.get("reason", "")),
            dict(h.get("gate") or {}),
            len(h.get("ops") or []),
        )
        for h in run.history
        if h.get("ref")
    }
    roots = []
    for node in nodes.values():
        parent = nodes.get(node.parent or "")
        (parent.children if parent else roots).append(node)
    return roots


@dataclass
class RoundProposals:
    round: int
    rows: list[dict[str, Any]]  # one per training task: task, trajectory, status, cause, n_ops
    outcome: str  # what the gate did with the round's patch


def proposals_by_round(run: EvolveRun) -> list[RoundProposals]:
    by_round: dict[int, list[dict[str, Any]]] = {}
    for row in run.results:
        p = row.get("proposal")  # a running run's rows hold the whole proposal; a finished one's a brief
        if p is not None:
            errors = p.get("errors") or []
            row = row | {
                "proposal_status": p.get("status"), "cause": p.get("cause"), "n_ops": len(p.get("ops") or []),
                "diagnosis": p.get("diagnosis", ""), "proposal_error": errors[-1] if errors else None,
            }  # fmt: skip
        by_round.setdefault(int(row.get("round", 0)), []).append(row)
    decided = {int(h.get("round", 0)): h for h in run.history if h.get("parent")}
    out = []
    for rnd, rows in sorted(by_round.items()):
        entry = decided.get(rnd + 1)  # round r's proposals become the candidate judged in round r + 1
        if entry is None:
            outcome = "pending" if run.status == "running" else "no candidate"
        elif not entry.get("ref"):
            outcome = entry.get("reason") or "no candidate"
        else:
            outcome = f"{'accepted' if entry.get('accepted') else 'rejected'} as {entry['ref']}"
        out.append(RoundProposals(rnd + 1, rows, outcome))  # numbered from 1, as the CLI and report do
    return out


def _cached(run_dir: Path, kind: str, key: str) -> dict[str, Any] | None:
    """A saved proposal by its key's end: names carry the protocol and the optimizer's settings first
    (older runs: nothing)."""
    folder = run_dir / "proposals"
    found = read_json(folder / f"{kind}-{key}.json")
    if found is None:
        for path in sorted(folder.glob(f"{kind}-*-{key}.json")):
            return read_json(path)
    return found


def reflection(run_dir: Path, trajectory_id: str, scaffold_hash: str | None) -> dict[str, Any] | None:
    """The ReCreate-Agent's proposal for one trajectory (diagnosis, cause, ops, errors, its messages),
    if it was saved. Its file is named by the scaffold's hash; without one, the run's proposals are
    searched."""
    if scaffold_hash:
        return _cached(run_dir, "reflect", f"{scaffold_hash[:16]}-{trajectory_id}")
    for path in (run_dir / "proposals").glob(f"reflect-*-{trajectory_id}.json"):
        return read_json(path)
    return None


@dataclass
class VersionView:
    info: VersionInfo
    scaffold: Scaffold
    diff: ScaffoldDiff | None  # against the parent; None for a root version
    evidence: list[str]  # trajectory ids cited by the edit ops, the version and the round's synthesis
    entry: dict[str, Any] | None  # the run's history entry (gate decision), when a run is given
    synthesis: dict[str, Any] | None


def version_view(store: ScaffoldStore, ref: str, run: EvolveRun | None) -> VersionView:
    info = store.resolve(ref)
    scaffold = store.load(ref)
    diff = None
    if info.parent:
        try:
            diff = store.diff(info.parent, ref)
        except ScaffoldError:
            diff = None  # the parent was removed from the store; the ops below still say what changed
    entry = run.entry_of(ref) if run else None
    synthesis = None
    if run is not None and entry is not None and info.parent:
        parent_hash = store.resolve(info.parent).hash[:16]
        synthesis = _cached(run.dir, "synth", f"{int(entry['round']) - 1}-{parent_hash}")
    cited = [e for op in info.ops for e in op.get("evidence") or []]
    cited += list(info.evidence) + list((synthesis or {}).get("evidence") or [])
    return VersionView(info, scaffold, diff, list(dict.fromkeys(map(str, cited))), entry, synthesis)
