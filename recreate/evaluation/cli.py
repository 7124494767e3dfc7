"""`recreate eval`: run a scaffold on a split, resumably, and write results JSON + HTML report + chart."""

from __future__ import annotations

import contextlib
import hashlib
import json
import threading
from pathlib import Path
from typing import TYPE_CHECKING, Any

import typer

from recreate.cli_options import (
    deprecated,
    emit_json,
    executor_option,
    home_option,
    json_option,
    prefer,
    sandbox_option,
)
from recreate.config import load_settings
from recreate.console import make_console
from recreate.redact import redact

if TYPE_CHECKING:
    from recreate.experience.schema import Trajectory

console = make_console(stderr=True)


def default_run_id(scaffold_hash: str, domain: str, data: Path, split: str, model: str, seeds: int) -> str:
    """Same command, same id: running it again resumes (and rewrites) the same report."""
    key = json.dumps([scaffold_hash, domain, str(data.resolve()), split, model, seeds])
    return f"{domain}-{split}-{hashlib.sha256(key.encode()).hexdigest()[:10]}"


def eval_command(
    scaffold: str = typer.Option(..., "--scaffold", help="scaffold directory or ref (DIR@v7, name@v7)"),
    domain: str = typer.Option(..., "--domain", help="domain name (see `recreate domain list`)"),
    data: Path = typer.Option(..., "--data", help="tasks file (.jsonl) or folder of them"),
    split: str = typer.Option("val", "--split", help="train, val, test or all"),
    model: str | None = typer.Option(
        None, "--model", help="model spec, or `local` (default: RECREATE_MODEL, else as evolve chooses)"
    ),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="rollouts at a time"),
    limit: int | None = typer.Option(None, "--limit", min=1, help="only the first N tasks of the split"),
    seeds: int = typer.Option(
        1, "--seeds", min=1, help="runs per task, a count (pass@1 averages them; see --random-seed elsewhere)"
    ),
    run: str | None = typer.Option(None, "--run", help="name of this run (default: from the inputs)"),
    run_id: str | None = deprecated("--run-id", "--run"),
    sandbox: str | None = sandbox_option(),
    executor: str = executor_option(),
    evaluator: str | None = typer.Option(None, "--evaluator", help="jsonl: command or module:function"),
    option: list[str] = typer.Option([], "--option", "-o", help="domain option KEY=VALUE (repeatable)"),
    progress: bool = typer.Option(True, "--progress/--no-progress", help="show a progress bar"),
    home: Path | None = home_option(),
    as_json: bool = json_option("the summary, run and report paths"),
) -> None:
    """Evaluate a scaffold on a split. Finished tasks are never re-run (the rollout cache survives kill -9);
    results go to <home>/evals/<run-id>/ as results.json, report.html and chart.png. Rollouts whose
    endpoint, sandbox or evaluator failed are not scored: then the command exits 3 (run it again to
    retry them), and with no rollout scored at all it measures nothing and says so."""
    from recreate.domains import check_no_leakage, get_domain
    from recreate.domains.cli import _parse_options
    from recreate.evaluation.leakage import evolved_task_ids
    from recreate.evaluation.metrics import summarize
    from recreate.evaluation.preflight import preflight
    from recreate.evaluation.ray_executor import make_executor
    from recreate.evaluation.report import print_summary, write_chart, write_html, write_json
    from recreate.evaluation.rollout import Rollouts
    from recreate.local import LOCAL_SPEC
    from recreate.models import check_endpoint
    from recreate.optimizer.run import agent_model_spec, serve_models
    from recreate.runs import check_run_id
    from recreate.scaffold import load_scaffold, validate_scaffold

    settings = load_settings(home=home)
    runs_on = make_executor(executor, concurrency=concurrency)
    spec = agent_model_spec(model or settings.model, settings.base_url)  # the fallback evolve uses
    run_id = prefer(run, run_id, "--run")
    if run_id is not None:
        check_run_id(run_id)
    options: dict[str, Any] = _parse_options(option)
    if evaluator is not None:
        options["evaluator"] = evaluator
    loaded_domain = get_domain(domain, data=data, **options)
    loaded = load_scaffold(scaffold)
    validate_scaffold(loaded)  # a template that cannot render fails every task: refuse it, as evolve does
    tasks = loaded_domain.tasks(split)  # type: ignore[arg-type]
    tasks = tasks[:limit] if limit else tasks
    if not tasks:
        raise typer.BadParameter(f"the {split} split of {data} has no tasks", param_hint="--split")
    if split == "test":
        check_no_leakage([t.id for t in tasks], evolved_task_ids(scaffold, loaded, settings.home))
    run_id = run_id or default_run_id(loaded.content_hash(), domain, data, split, spec, seeds)
    out = settings.home / "evals" / run_id
    info = {
        "run_id": run_id, "scaffold": scaffold, "scaffold_hash": loaded.content_hash(), "domain": domain,
        "data": str(data), "split": split, "model": redact(spec), "seeds": seeds,
        "sandbox": sandbox or settings.sandbox, "tasks_total": len(tasks) * seeds,
    }  # fmt: skip
    title = f"{loaded.name} on {domain}/{split}"
    finished: list[Trajectory] = []
    lock = threading.Lock()

    def record(traj: Trajectory) -> None:  # keep results.json current: a killed run leaves what it did
        with lock:
            finished.append(traj)
            write_json(out / "results.json", _results(info, title, finished, complete=False))

    with contextlib.ExitStack() as stack:
        models: dict[str, Any] = {"agent_model": spec}
        if spec == LOCAL_SPEC:  # the embedded model, served for this command's duration (as evolve does)
            why = "model 'local'" if LOCAL_SPEC in (model, settings.model) else "no model configured"
            models = serve_models(
                stack, settings.home, out, spec, None, concurrency, None, why, console.print
            )
        rollouts = Rollouts(
            loaded, loaded_domain, model=models["agent_model"], sandbox=sandbox or settings.sandbox,
            run_id=run_id, trajectory_dir=out / "trajectories", executor=runs_on,
            **models.get("agent_options", {}),
        )  # fmt: skip
        cached = sum(rollouts.cached(t, s) is not None for t in tasks for s in range(seeds))
        if cached < len(tasks) * seeds:
            preflight(sandbox or settings.sandbox, loaded_domain, settings.home)
            check_endpoint(models["agent_model"], settings.base_url)
        console.print(f"run [bold]{run_id}[/]: {len(tasks)} task(s) x {seeds} seed(s) -> {out}")
        if cached:
            console.print(f"resuming: {cached} rollout(s) already finished, not re-run")
        results = rollouts.run_many(
            tasks, seeds=range(seeds), concurrency=concurrency, progress=progress, on_result=record
        )
        summary = summarize(results)
        unscored = summary.endpoint_errors + summary.machine_errors
        doc = _results(info, title, results, complete=not unscored)
        write_json(out / "results.json", doc)
        chart = write_chart(out / "chart.png", doc["tasks"], summary, title)
        report = write_html(out / "report.html", doc, chart.name)
        print_summary(summary, title, make_console())
        console.print(f"report: {report}")
        if as_json:
            emit_json({"run": info, "summary": doc["summary"], "results": str(out / "results.json"),
                       "report": str(report), "chart": str(chart)})  # fmt: skip
    if unscored:
        measured = f"pass@1 is over {summary.rollouts} scored" if summary.rollouts else "nothing was measured"
        console.print(
            f"[yellow]{unscored} of {len(results)} rollouts were not scored (their endpoint, sandbox or "
            f"evaluator failed; the table says which): {measured}; rerun the same command to retry them[/]"
        )
        raise typer.Exit(3)


def _results(
    info: dict[str, Any], title: str, trajectories: list[Trajectory], complete: bool
) -> dict[str, Any]:
    from recreate.evaluation.metrics import summarize
    from recreate.evaluation.report import task_row

    ordered = sorted(trajectories, key=lambda t: (t.task_id, t.seed or 0))
    return {
        "title": title,
        "complete": complete,
        "run": info,
        "summary": summarize(ordered).to_dict(),
        "tasks": [task_row(t) for t in ordered],
    }
