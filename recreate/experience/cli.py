"""`recreate experience ...`: the experience store in the recreate home (RECREATE_HOME)."""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from recreate.cli_options import emit_json, home_option, json_option
from recreate.config import load_settings
from recreate.console import echo, make_console
from recreate.experience.catalog import check_filters
from recreate.experience.digest import one_line
from recreate.experience.embeddings import make_embedding
from recreate.experience.importers import FORMATS, read_path
from recreate.experience.index import filter_keys
from recreate.experience.reports import DriftReport
from recreate.experience.store import ExperienceStore, TrajectoryNotFoundError, open_store
from recreate.experience.views import DEFAULT_BUDGET, VIEWS, render

app = typer.Typer(help="Stored agent runs: list, inspect, search, import, export, keep the index in sync.")
console = make_console()

DomainOpt = typer.Option(None, "--domain", help="only this domain")
TaskOpt = typer.Option(None, "--task", help="only this task id")
OutcomeOpt = typer.Option(None, "--outcome", help="passed | failed | unevaluated")
RunOpt = typer.Option(None, "--run", help="only this run id")
VersionOpt = typer.Option(None, "--scaffold-version", help="only this scaffold version, e.g. v3")
_SHOWN = 20  # problem lines printed per kind; the count of the rest follows
_FILES = "trajectories"  # a store's folder of trajectory files, made when the store is first opened
T = TypeVar("T")


def _store(home: Path | None, **options: Any) -> ExperienceStore:
    return open_store(load_settings(home=home), **options)


def _root(home: Path | None) -> Path:
    return load_settings(home=home).home / "experience"


def _read(home: Path | None, read: Callable[[ExperienceStore], T], nothing: T) -> T:
    """`read(store)`, or `nothing` where no store was ever opened in this home: opening one creates its
    folders and files, and a command that only reads writes nothing (a missing home stays missing)."""
    if not (_root(home) / _FILES).is_dir():
        return nothing
    with _store(home) as store:
        return read(store)


def _filters(**values: Any) -> dict[str, Any]:
    return {k: v for k, v in values.items() if v is not None}


def _progress() -> Progress:
    return Progress(
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
        console=console,
    )


@app.command("ls")
def ls_command(
    domain: str = DomainOpt,
    task: str = TaskOpt,
    outcome: str = OutcomeOpt,
    run: str = RunOpt,
    scaffold_version: str = VersionOpt,
    limit: int = typer.Option(50, "--limit", min=1, help="show the newest N"),
    home: Path = home_option(),
    as_json: bool = json_option("the entries (a list)"),
) -> None:
    """List stored trajectories."""
    filters = _filters(
        domain=domain, task_id=task, outcome=outcome, run_id=run, scaffold_version=scaffold_version
    )
    entries = _read(home, lambda store: store.list(filters), [])
    if as_json:
        emit_json([dataclasses.asdict(e) for e in entries[-limit:]])
        return
    for e in entries[-limit:]:
        score = "-" if e.score is None else f"{e.score:g}"
        version = f"{e.scaffold_name or '-'}@{e.scaffold_version or '-'}"
        echo(
            f"{e.id}  task={e.task_id}  domain={e.domain}  scaffold={version}  "
            f"{e.outcome}({score})  {e.exit_status}  steps={e.n_steps}"
        )
    echo(f"{len(entries)} trajectories in {_root(home)}", err=True)


@app.command("show")
def show_command(
    trajectory_id: str = typer.Argument(..., help="a trajectory id (see `recreate experience ls`)"),
    view: str = typer.Option("index", "--view", help=f"one of {', '.join(VIEWS)}"),
    budget: int = typer.Option(
        DEFAULT_BUDGET, "--budget", min=1, help="approximate token budget (chars / 4)"
    ),
    home: Path = home_option(),
    as_json: bool = json_option("the whole trajectory (schema v1), not a view"),
) -> None:
    """Show one trajectory through a compact view."""
    trajectory = _read(home, lambda store: store.get(trajectory_id), None)
    if trajectory is None:
        raise TrajectoryNotFoundError(f"no trajectory {trajectory_id!r} in {_root(home)} (nothing stored)")
    if as_json:
        emit_json(trajectory.model_dump(mode="json"))
        return
    echo(render(trajectory, view, budget))


@app.command("search")
def search_command(
    query: str = typer.Argument(..., help="what to look for, in words"),
    k: int = typer.Option(5, "-k", min=1, help="number of hits"),
    scope: str = typer.Option("steps", "--scope", help="steps | summaries | memory"),
    domain: str = DomainOpt,
    task: str = TaskOpt,
    outcome: str = OutcomeOpt,
    error_type: str = typer.Option(None, "--error-type", help="steps only, e.g. ModuleNotFoundError"),
    home: Path = home_option(),
    as_json: bool = json_option("the hits (a list)"),
) -> None:
    """Semantic search; prints trajectory id, task id, step, cosine distance (0 = same meaning) and a
    snippet per hit, nearest first."""
    filters = _filters(domain=domain, task_id=task, outcome=outcome, error_type=error_type)
    check_filters(filters, filter_keys(scope))  # bad options fail alike in an empty home
    hits = _read(home, lambda store: store.search(query, scope=scope, filters=filters, k=k), [])
    if as_json:
        emit_json([dataclasses.asdict(hit) for hit in hits])
        return
    if not hits:
        echo(f"no hits in {_root(home)}", err=True)
    for hit in hits:
        meta = hit.metadata
        step = meta.get("step", "-")
        task_id = meta.get("task_id", "-")
        echo(
            f"{hit.trajectory_id or hit.id}  task={task_id}  step={step}  distance={hit.distance:.3f}  "
            f"{one_line(hit.document)[:160]}"
        )


@app.command("import")
def import_command(
    path: Path = typer.Argument(..., help="a file or folder of runs"),
    fmt: str = typer.Option("auto", "--format", help=f"one of {', '.join(FORMATS)}"),
    domain: str = typer.Option(None, "--domain", help="domain for the imported runs (default per format)"),
    home: Path = home_option(),
) -> None:
    """Import mini-swe-agent .traj.json, OpenAI chat JSONL, LangSmith exports or schema-v1 files."""
    batch = read_path(path, fmt, domain=domain)
    # nothing else runs beside an import: the embedding takes every core (measured 1.6x over half of 2)
    settings = load_settings(home=home)
    store = _store(home, embedding=make_embedding(settings.embedding, threads=os.cpu_count()))
    with store, _progress() as progress:
        bar = progress.add_task("importing", total=len(batch.trajectories))
        report = store.ingest(
            batch.trajectories, source=str(path), progress=lambda n: progress.advance(bar, n)
        )
    report.errors[:0] = batch.errors
    if report.errors:
        echo(f"not imported ({len(report.errors)}; everything else was stored):", err=True)
    for lines in (report.errors, report.truncated):
        for line in lines[:_SHOWN]:
            echo(f"  {line}", err=True)
        if len(lines) > _SHOWN:
            echo(f"  ... and {len(lines) - _SHOWN} more", err=True)
    if report.duplicates:
        echo(
            f"  duplicates (already stored, left as they are): {', '.join(report.duplicates[:10])}", err=True
        )
    echo(report.summary())
    if report.errors:
        raise SystemExit(1)  # typer.Exit codes are dropped by the root main (standalone_mode=False)


@app.command("reindex")
def reindex_command(home: Path = home_option()) -> None:
    """Rebuild the catalog and the Chroma index from the trajectory files."""
    with _store(home) as store, _progress() as progress:
        bar = progress.add_task("reindexing", total=len(list(store.files.glob("*/*.json"))))
        report = store.reindex(progress=lambda n: progress.advance(bar, n))
    for line in report.errors:
        echo(f"  {line}", err=True)
    echo(f"reindexed {len(report.added)} trajectories; {len(report.errors)} unreadable file(s) left in place")


@app.command("verify")
def verify_command(home: Path = home_option()) -> None:
    """Check that files, catalog and index agree; exit code 1 on drift."""
    drift = _read(home, lambda store: store.verify(), DriftReport())
    if drift.ok:
        echo("ok: files, catalog and index agree")
        return
    for line in drift.lines():
        echo(f"drift: {line}")
    echo("run `recreate experience reindex` to rebuild the catalog and index from the files")
    raise SystemExit(1)  # typer.Exit codes are dropped by the root main (standalone_mode=False)


@app.command("export")
def export_command(
    out: Path = typer.Argument(..., help="the JSONL file to write"),
    domain: str = DomainOpt,
    task: str = TaskOpt,
    outcome: str = OutcomeOpt,
    run: str = RunOpt,
    scaffold_version: str = VersionOpt,
    home: Path = home_option(),
) -> None:
    """Write matching trajectories as schema-v1 JSONL (the input of fine-tuning)."""
    filters = _filters(
        domain=domain, task_id=task, outcome=outcome, run_id=run, scaffold_version=scaffold_version
    )
    count = _read(home, lambda store: store.export(out, filters), None)
    if count is None:  # nothing stored: the file the user asked for, empty
        out.write_text("", encoding="utf-8")
        count = 0
    echo(f"wrote {count} trajectories to {out}")
