"""`recreate sandbox ...`: try a backend by hand and see which ones work here."""

from __future__ import annotations

import shlex
import sys

import typer
from rich.table import Table

from recreate.cli_options import deprecated, emit_json, json_option, prefer, sandbox_option
from recreate.config import load_settings
from recreate.console import make_console
from recreate.sandbox import BACKENDS, SandboxSpec, backend_status, get_sandbox

app = typer.Typer(
    help="Run commands in a sandbox; check which sandbox backends work here.", no_args_is_help=True
)


@app.command("run", context_settings={"allow_extra_args": True, "ignore_unknown_options": True})
def run_command(
    command: list[str] = typer.Argument(..., help="The command, after `--` (run with /bin/sh -c)."),
    sandbox: str = sandbox_option(f"One of: {', '.join(BACKENDS)} (default: RECREATE_SANDBOX, else bwrap)."),
    backend: str = deprecated("--backend", "--sandbox", "-b"),
    image: str = typer.Option(None, "--image", help="Docker image, or a rootfs directory for bwrap."),
    timeout: float = typer.Option(60.0, "--timeout", help="Seconds before the command is killed."),
    network: bool = typer.Option(False, "--network", help="Allow network access (off by default)."),
    memory_mb: int = typer.Option(2048, "--memory-mb", help="Memory limit in MB."),
) -> None:
    """Run one command in a fresh sandbox and print its output; exits with the command's exit code."""
    spec = SandboxSpec(image=image, network=network, memory_mb=memory_mb)
    name = prefer(sandbox, backend, "--sandbox") or load_settings().sandbox
    with get_sandbox(name).open(spec) as session:
        # one argument is a shell line (`-- 'ls | wc -l'`); several are an argv, quoted as such
        result = session.run(command[0] if len(command) == 1 else shlex.join(command), timeout=timeout)
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    if result.timed_out:
        typer.echo(f"[timed out after {timeout:g} s]", err=True)
        raise SystemExit(124)
    raise SystemExit(result.exit_code or 0)


@app.command("status")
def status_command(as_json: bool = json_option("the backends (a list)")) -> None:
    """Which sandbox backends work on this machine."""
    table = Table("backend", "works", "detail")
    rows = backend_status()
    if as_json:
        emit_json([{"backend": n, "works": ok, "detail": d} for n, ok, d in rows])
    for name, ok, detail in rows:
        table.add_row(name, "[green]yes[/]" if ok else "[red]no[/]", detail)
    if not as_json:
        make_console().print(table)
    if not any(ok for name, ok, _ in rows if name != "local"):
        raise typer.Exit(1)
