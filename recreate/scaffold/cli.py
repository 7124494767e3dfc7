"""`recreate scaffold ...`: validate, inspect and version scaffolds."""

from __future__ import annotations

import sys
from pathlib import Path

import typer
from rich.console import Console
from rich.table import Table

from recreate.cli_options import emit_json, home_option, json_option, sandbox_option
from recreate.console import echo, make_console
from recreate.sandbox import get_sandbox
from recreate.scaffold.errors import ScaffoldValidationError
from recreate.scaffold.files import write_dir
from recreate.scaffold.load import load_scaffold
from recreate.scaffold.mini_swe import import_config
from recreate.scaffold.mini_swe_export import export_config
from recreate.scaffold.model import Scaffold
from recreate.scaffold.render import render_instance, render_system
from recreate.scaffold.store import ScaffoldStore
from recreate.scaffold.validate import validate_scaffold

app = typer.Typer(help="Validate, inspect and version scaffolds.", no_args_is_help=True)

StoreOption = typer.Option(None, "--store", help="Store root (default: <RECREATE_HOME>/scaffolds).")
HomeOption = home_option()


def _console() -> Console:
    return make_console()  # created per call so that it sees the terminal width of this invocation


def _store(root: Path | None) -> ScaffoldStore:
    return ScaffoldStore(root)


def _load(source: str, root: Path | None) -> Scaffold:
    return load_scaffold(source, store=_store(root))


def _report_problems(exc: ScaffoldValidationError) -> None:
    console = _console()
    console.print(f"[red]invalid[/red] {exc.source or 'scaffold'}: {len(exc.problems)} problem(s)")
    table = Table()
    for column in ("file", "field", "problem"):
        table.add_column(column, overflow="fold")
    for problem in exc.problems:
        table.add_row(problem.file, problem.field or "-", problem.message)
    console.print(table)


@app.command()
def validate(
    source: str = typer.Argument(..., help="A scaffold directory or a stored ref (name@v3)."),
    sandbox: str | None = sandbox_option("Also run tool smoke tests: bwrap, local, docker."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
) -> None:
    """Check a scaffold; list every problem with its file and field (exit 1 if any)."""
    try:
        scaffold = _load(source, store)
        validate_scaffold(scaffold, sandbox=get_sandbox(sandbox) if sandbox else None)
    except ScaffoldValidationError as exc:
        _report_problems(exc)
        raise typer.Exit(1) from None
    smoke = (
        f"smoke tests passed in {sandbox}"
        if sandbox
        else "static checks only (pass --sandbox for smoke tests)"
    )
    _console().print(
        f"[green]valid[/green] {scaffold.name}: {len(scaffold.tools)} tools, {len(scaffold.rules)} rules, "
        f"{len(scaffold.memory)} memory items; {smoke}"
    )


@app.command()
def show(
    source: str = typer.Argument(..., help="A scaffold directory or a stored ref."),
    task: str | None = typer.Option(
        None, "--task", help="Also render the instance prompt for this task text."
    ),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
    as_json: bool = json_option("the scaffold (its fields, ref and hash)"),
) -> None:
    """Print a scaffold: its rendered system message, tools, memory and limits."""
    console = _console()
    scaffold = _load(source, store)
    if as_json:
        doc = {"ref": scaffold.ref, "hash": scaffold.content_hash(), **scaffold.model_dump(mode="json")}
        emit_json(doc)
        return
    console.print(
        f"[bold]{scaffold.ref or scaffold.name}[/bold]  domain={scaffold.domain}  "
        f"hash={scaffold.content_hash()[:12]}  action_format={scaffold.action_format}"
    )
    console.print(f"limits: {scaffold.limits.model_dump()}")
    console.rule("system message")
    echo(render_system(scaffold))
    if task is not None:
        console.rule("instance prompt")
        echo(render_instance(scaffold, task=task))
    if scaffold.tools:
        console.rule("tools")
        for tool in scaffold.tools:
            console.print(f"{tool.name} ({tool.language}): {tool.description}", markup=False)
    if scaffold.memory:
        console.rule("memory")
        for item in scaffold.memory:
            console.print(f"[{item.id}] {item.title} (+{item.helpful}/-{item.harmful})", markup=False)


@app.command()
def commit(
    directory: Path = typer.Argument(..., help="A scaffold directory to store as the next version."),
    message: str = typer.Option("", "--message", "-m", help="Why this version (kept in its lineage)."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
) -> None:
    """Store a scaffold directory as the next version of its name (validated first)."""
    try:
        info = _store(store).commit(load_scaffold(directory), message=message)
    except ScaffoldValidationError as exc:
        _report_problems(exc)
        raise typer.Exit(1) from None
    _console().print(f"{info.ref} {info.hash[:12]}")


@app.command()
def apply(
    ref: str = typer.Argument(..., help="The stored version to edit (name, name@v3)."),
    ops_file: str = typer.Argument(..., help="JSON file with edit ops ('-' reads stdin)."),
    sandbox: str | None = sandbox_option("Run tool smoke tests in this backend."),
    message: str = typer.Option("", "--message", "-m", help="Why this version (kept in its lineage)."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
) -> None:
    """Apply edit ops to a stored version and store the result as its child (all or nothing)."""
    text = _read_ops(ops_file)
    try:
        box = get_sandbox(sandbox) if sandbox else None
        info = _store(store).apply(ref, text, sandbox=box, message=message)
    except ScaffoldValidationError as exc:
        _report_problems(exc)
        raise typer.Exit(1) from None
    _console().print(f"{info.ref} {info.hash[:12]} (parent {info.parent})")


def _read_ops(ops_file: str) -> str:
    """The ops file's text ('-': stdin); a usage error naming OPS_FILE when it cannot be read as text."""
    source = "stdin" if ops_file == "-" else ops_file
    try:
        return sys.stdin.read() if ops_file == "-" else Path(ops_file).read_text(encoding="utf-8")
    except UnicodeDecodeError:
        problem = "is not UTF-8 text"
    except OSError as exc:
        problem = f"cannot be read ({exc.strerror or exc})"
    raise typer.BadParameter(
        f"{source} {problem}; pass a JSON file of edit ops (a list, or {{\"ops\": [...]}}), or '-' for stdin",
        param_hint="OPS_FILE",
    )


@app.command()
def diff(
    a: str = typer.Argument(..., help="A scaffold directory or stored ref."),
    b: str = typer.Argument(..., help="A scaffold directory or stored ref."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
) -> None:
    """Show what changed between two scaffolds, per component."""
    _console().print(
        _store(store).diff(_load(a, store), _load(b, store)).render(), markup=False, highlight=False
    )


@app.command()
def log(
    name: str = typer.Argument(..., help="A scaffold name."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
    as_json: bool = json_option("the versions (a list)"),
) -> None:
    """List the versions of a scaffold with their lineage and scores."""
    scaffolds = _store(store)
    if as_json:
        emit_json([i.model_dump(mode="json") for i in scaffolds.log(name)])
        return
    head = scaffolds.head(name).version
    table = Table(title=f"{name} ({scaffolds.root})", title_justify="left")
    for column in ("version", "hash", "parent", "ops", "scores", "created", "rationale"):
        table.add_column(column, overflow="fold")
    for info in scaffolds.log(name):
        latest = info.scores[-1]["scores"] if info.scores else {}
        scores = ", ".join(f"{k}={v:.3g}" if isinstance(v, float) else f"{k}={v}" for k, v in latest.items())
        marker = " (head)" if info.version == head else ""
        table.add_row(
            f"v{info.version}{marker}",
            info.hash[:12],
            info.parent or "-",
            str(len(info.ops)),
            scores or "-",
            info.created_at,
            (info.rationale or info.message).split("\n")[0][:80],
        )
    _console().print(table)


@app.command()
def export(
    ref: str = typer.Argument(..., help="The stored version to export (mini-swe-agent: or a directory)."),
    dest: Path = typer.Argument(..., help="A new directory (mini-swe-agent: a new CONFIG.yaml)."),
    fmt: str = typer.Option("scaffold", "--format", help="scaffold (a directory) or mini-swe-agent."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
) -> None:
    """Write a stored version as a plain scaffold directory (lineage in .lineage.json), or a scaffold
    as a mini-swe-agent config (its tools' scripts beside it)."""
    if fmt == "mini-swe-agent":
        exported = export_config(_load(ref, store), dest)
        for note in exported.notes:
            _console().print(f"  {note}", markup=False, highlight=False)
        tools = f" (tools in {exported.tools_dir})" if exported.tools_dir else ""
        _console().print(f"exported {ref} to {exported.path}{tools}", markup=False)
        return
    if fmt != "scaffold":
        raise typer.BadParameter(
            f"unknown format {fmt!r}; choose scaffold or mini-swe-agent", param_hint="--format"
        )
    out = _store(store).export(ref, dest)
    _console().print(f"exported {ref} to {out}")


@app.command("import")
def import_command(
    configs: list[Path] = typer.Argument(
        ..., help="mini-swe-agent config(s); several merge as its -c options do (an overlay goes last)."
    ),
    dest: Path = typer.Argument(..., help="A new scaffold directory."),
    fmt: str = typer.Option("auto", "--format", help="auto or mini-swe-agent (the only format so far)."),
    name: str | None = typer.Option(None, "--name", help="Scaffold name (default: the first file's name)."),
    domain: str = typer.Option("swe", "--domain", help="The scaffold's domain."),
) -> None:
    """Turn another agent's config into a scaffold directory, saying how each part maps."""
    if fmt not in ("auto", "mini-swe-agent"):
        raise typer.BadParameter(
            f"unknown format {fmt!r}; choose auto or mini-swe-agent", param_hint="--format"
        )
    scaffold, notes = import_config(configs, name=name, domain=domain)
    write_dir(scaffold, dest)
    for note in notes:
        _console().print(f"  {note}", markup=False, highlight=False)
    _console().print(f"imported {scaffold.name} into {dest}", markup=False)


@app.command()
def rollback(
    name: str = typer.Argument(..., help="A scaffold name."),
    to: str | None = typer.Option(None, "--to", help="Version to make head (default: the head's parent)."),
    store: Path | None = StoreOption,
    home: Path | None = HomeOption,
) -> None:
    """Move a scaffold's head back (versions are never deleted)."""
    info = _store(store).rollback(name, to)
    _console().print(f"{name} head is now {info.ref}")
