"""`recreate domain ...`: list the built-in domains, self-test an evaluation setup, set up a domain's
environment and build its tasks (the per-domain parts live in each domain's cli.py)."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from recreate.cli_options import deprecated, emit_json, home_option, json_option, prefer, sandbox_option
from recreate.config import load_settings
from recreate.console import echo, make_console
from recreate.domains.registry import domain_class, get_domain, list_domains
from recreate.domains.selftest import SelfTestReport, count_jobs, run_selftest

app = typer.Typer(
    help="Task domains: list them, check their evaluation, set up their environments.", no_args_is_help=True
)
console = make_console()


@app.command("list")
def list_command(as_json: bool = json_option("the domains (a list)")) -> None:
    """Show the built-in domains."""
    if as_json:
        emit_json([{"name": n, "summary": s} for n, s in list_domains()])
        return
    table = Table("domain", "what it is")
    for name, summary in list_domains():
        table.add_row(name, summary)
    console.print(table)


def _parse_options(pairs: list[str]) -> dict[str, object]:
    options: dict[str, object] = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or not key:
            raise typer.BadParameter(f"--option takes KEY=VALUE, got {pair!r}")
        for convert in (int, float):
            try:
                options[key] = convert(value)
                break
            except ValueError:
                continue
        else:
            options[key] = value
    return options


@app.command("selftest")
def selftest_command(
    domain: str = typer.Argument(..., help="domain name (see `recreate domain list`)"),
    data: Path = typer.Option(..., "--data", help="tasks file (.jsonl) or folder of them"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="check only the first N tasks"),
    concurrency: int = typer.Option(2, "--concurrency", min=1, help="evaluations at a time"),
    sandbox: str | None = sandbox_option(),
    evaluator: str | None = typer.Option(None, "--evaluator", help="jsonl: command or module:function"),
    option: list[str] = typer.Option([], "--option", "-o", help="domain option KEY=VALUE (repeatable)"),
    min_reference_pass: float = typer.Option(
        1.0,
        "--min-reference-pass",
        min=0.0,
        max=1.0,
        help="the share of reference solutions that must pass (e.g. 0.98 for DS-1000 offline)",
    ),
    home: Path | None = home_option(),
) -> None:
    """Evaluate reference and wrong solutions, and forgery probes on a few tasks; print per-group counts
    and the line `reference_pass=X/Y wrong_pass=Z/Y forgery_pass=F/P`.
    Exits 1 when a wrong solution or a forgery passes (the evaluation cannot be trusted), or when fewer
    references pass than --min-reference-pass asks (the evaluation setup is broken)."""
    from recreate.sandbox import get_sandbox

    options = _parse_options(option)
    if evaluator is not None:
        options["evaluator"] = evaluator
    domain_class(domain)  # unknown names fail before any loading
    loaded = get_domain(domain, data=data, **options)
    tasks = loaded.tasks("all")[:limit] if limit else loaded.tasks("all")
    box = get_sandbox(sandbox or load_settings().sandbox)
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    with Progress(*columns, console=console, transient=True) as progress:
        bar = progress.add_task(f"selftest {domain}", total=count_jobs(loaded, tasks))
        report = run_selftest(
            loaded, box, tasks, concurrency=concurrency, on_done=lambda: progress.advance(bar)
        )
    print_report(report)
    rate = report.reference_pass_rate()
    if rate < min_reference_pass:
        echo(
            f"error: only {rate:.1%} of the reference solutions pass (--min-reference-pass "
            f"{min_reference_pass:g}); the evaluation setup is broken: see the failures above",
            err=True,
        )
    if report.false_passes or report.forgery_passes or rate < min_reference_pass:
        raise typer.Exit(1)


def print_report(report: SelfTestReport) -> None:
    table = Table("group", "tasks", "reference pass", "wrong pass", title=f"selftest: {report.domain}")
    for group, row in report.groups().items():
        table.add_row(
            group,
            str(row["tasks"]),
            f"{row['reference_pass']}/{row['with_reference']}",
            f"{row['wrong_pass']}/{row['tasks']}",
        )
    console.print(table)
    failures: dict[str, list[str]] = {}  # one line per reason: a missing setup fails every task alike
    for check in report.reference_failures:
        failures.setdefault(" ".join(check.reference.feedback.split())[:300], []).append(check.task_id)
    for feedback, task_ids in failures.items():
        shown = ", ".join(task_ids[:3]) + (f" and {len(task_ids) - 3} more" if len(task_ids) > 3 else "")
        console.print(f"[yellow]reference failed[/] {shown}: {feedback}", soft_wrap=True)
    for check in report.false_passes:
        console.print(
            f"[red]wrong solution passed[/] {check.task_id}: {check.false_passes!r}", soft_wrap=True
        )
    for check in report.forgery_passes:
        console.print(
            f"[red]forgery passed[/] {check.task_id}: {', '.join(check.forgery_passes)}: the evaluator runs "
            "the submission where its verdict is made, or lets it read the expected answer",
            soft_wrap=True,
        )
    echo(report.summary_line())


@app.command("setup")
def setup_command(
    domain: str = typer.Argument(..., help="domain whose environment to build (ds1000, repo)"),
    path: Path | None = typer.Option(None, "--path", help="where (default: <RECREATE_HOME>/envs/ds1000)"),
    python: str | None = typer.Option(None, "--python", help="a Python 3.11 to base it on"),
    data: Path | None = typer.Option(
        None, "--data", help="the tasks whose environments to build (repo), whose libraries to add (ds1000)"
    ),
    groups: str = typer.Option(
        "", "--with", help="ds1000: optional library groups to add, comma-separated: pytorch, tensorflow, all"
    ),
    home: Path | None = home_option(),
) -> None:
    """Build a domain's evaluation environment (idempotent): ds1000's, or a venv per repo requirement set."""
    domain_class(domain)
    if groups and domain != "ds1000":
        raise typer.BadParameter("only ds1000's environment has optional library groups", param_hint="--with")
    if domain == "repo":
        from recreate.domains.repo.cli import setup_repo

        setup_repo(data, console)
    elif domain == "ds1000":
        from recreate.domains.ds1000.cli import setup_ds1000

        setup_ds1000(path, python, groups, data, console)
    else:
        echo(f"domain {domain!r} needs no environment setup")


@app.command("build")
def build_command(
    domain: str = typer.Argument(..., help="domain to build tasks for (repo)"),
    source: str = typer.Option(..., "--from", help="PACKAGE==VERSION on PyPI, or a local sdist .tar.gz"),
    n: int = typer.Option(10, "--n", min=1, help="instances to make"),
    random_seed: int = typer.Option(
        None, "--random-seed", help="mutation order and splits (same seed, same instances) [default: 0]."
    ),
    seed: int | None = deprecated("--seed", "--random-seed"),
    out: Path = typer.Option(Path("examples/repo"), "--out", help="folder for the .jsonl and snapshots/"),
    model: str | None = typer.Option(None, "--model", help="an LLM writes issue-style problem statements"),
    sandbox: str | None = sandbox_option(),
    install: list[str] = typer.Option([], "--install", help="extra test requirement (repeatable)"),
    timeout: float = typer.Option(120.0, "--timeout", min=1, help="seconds per test-suite run"),
    home: Path | None = home_option(),
) -> None:
    """Make SWE-style instances from a package's sdist: inject bugs its own tests catch (repo only)."""
    domain_class(domain)
    if domain != "repo":
        raise typer.BadParameter(f"domain {domain!r} has no task builder; only repo has", param_hint="DOMAIN")
    from recreate.domains.repo.cli import build_repo

    options = {"model": model, "sandbox": sandbox, "install": tuple(install), "timeout": timeout}
    build_repo(source, out, n=n, seed=prefer(random_seed, seed, "--random-seed") or 0, **options)
