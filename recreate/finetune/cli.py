"""`recreate finetune`: fine-tune the local model under an evolved agent from the run's logs."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.table import Table

from recreate.cli_options import emit_json, home_option, json_option, sandbox_option
from recreate.config import load_settings
from recreate.console import echo, make_console

console = make_console()


def finetune_command(
    run: str = typer.Option(..., "--run", help="The evolve run whose logs to train on (its run id)."),
    domain: str = typer.Option(..., "--domain", help="The run's domain (for the before/after evaluation)."),
    data: Path = typer.Option(..., "--data", help="The run's tasks file."),
    evaluator: str = typer.Option(None, "--evaluator", help="jsonl domain: evaluator command."),
    scaffold: Path = typer.Option(None, "--scaffold", help="Scaffold to evaluate with (default: the run's)."),
    versions: str = typer.Option(None, "--versions", help="Only logs of these scaffold versions (v1,v2)."),
    algo: str = typer.Option(
        None, "--algo", help="tapo, grpo, dapo, dr_grpo, gspo, gspo_token, cumprod [default: tapo]."
    ),
    steps: int = typer.Option(None, "--steps", min=1, help="Optimizer steps [default: 20]."),
    lr: float = typer.Option(None, "--lr", help="Adam learning rate of the LoRA [default: 1e-4]."),
    lora_r: int = typer.Option(None, "--lora-r", min=1, help="LoRA rank (alpha is 2r) [default: 16]."),
    min_group_size: int = typer.Option(
        None, "--min-group-size", min=1, help="Smallest group of runs per task kept [default: 2]."
    ),
    config: Path = typer.Option(
        None, "--config", help="TOML/YAML of training settings (TRL GRPOConfig names too); options win."
    ),
    val_seeds: int = typer.Option(
        2, "--val-seeds", min=1, help="Evaluation runs per validation task (a count, not a random seed)."
    ),
    val_limit: int = typer.Option(None, "--val-limit", min=1, help="Use at most N validation tasks."),
    sandbox: str = sandbox_option(),
    home: Path = home_option(),
    strict: bool = typer.Option(
        False, "--strict", help="Refuse the run's logs if any file is garbage, instead of skipping it."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the resolved training settings and the logs selected; train nothing."
    ),
    as_json: bool = json_option("the report (or, with --dry-run, the settings)"),
) -> None:
    """Train (LoRA) from an evolve run's logs, serve the new policy, and compare it with the version it
    started from (the base model; after an earlier `finetune` of the run, the version that one made)."""
    from recreate.domains import get_domain
    from recreate.finetune.offline import FinetuneError, finetune, select_trajectories, train_config
    from recreate.runs import check_run_id
    from recreate.scaffold import load_scaffold
    from tapo_backend.config import settings_file

    settings = load_settings(home=home)
    run_dir = settings.home / "runs" / check_run_id(run)
    if not run_dir.is_dir():
        raise FinetuneError(f"--run {run}: no such run under {settings.home / 'runs'}")
    train = given_settings(settings_file(config), algo=algo, max_steps=steps, lr=lr, lora_r=lora_r,
                           min_group_size=min_group_size)  # fmt: skip
    wanted = set(versions.split(",")) if versions else None
    if dry_run:
        selection = select_trajectories(run_dir, versions=wanted, strict=strict)
        resolved = train_config(run_dir, selection.temperature, train).to_dict()
        print_settings(resolved, f"{len(selection.files)} trajectories selected", as_json)
        return
    scaffold_dir = scaffold or run_dir / "scaffold"
    if not scaffold_dir.is_dir():
        raise FinetuneError(f"{scaffold_dir}: no scaffold to evaluate with; pass --scaffold DIR")
    dom = get_domain(domain, data=data, **({"evaluator": evaluator} if evaluator else {}))
    report = finetune(
        run_dir=run_dir, home=settings.home, scaffold=load_scaffold(scaffold_dir), domain=dom,
        val_tasks=dom.tasks("val")[:val_limit], val_seeds=val_seeds, versions=wanted,
        sandbox=sandbox or settings.sandbox, log=console.print, strict=strict, train_settings=train,
    )  # fmt: skip
    _print_report(report, run, run_dir)
    if as_json:
        emit_json(dataclasses.asdict(report))


def given_settings(file: dict[str, Any], lora_r: int | None = None, **given: Any) -> dict[str, Any]:
    """Training settings: a --config file's (TrainConfig names), with the options given on top."""
    merged = {**file, **{k: v for k, v in given.items() if v is not None}}
    if lora_r is not None:
        merged["lora"] = {**(file.get("lora") or {}), "r": lora_r}
    return merged


def print_settings(resolved: dict[str, Any], note: str, as_json: bool) -> None:
    """--dry-run: the settings a training would use, as a config file would hold them."""
    if as_json:
        emit_json({"settings": resolved, "note": note})
        return
    echo(yaml.safe_dump(resolved, sort_keys=False).rstrip())
    echo(f"# {note}", err=True)


def _print_report(report: Any, run: str, run_dir: Path) -> None:
    table = Table(title=f"fine-tuned {report.policy} from {report.selected} trajectories of {run}")
    for col in ("model", "val pass@1", "95% CI", "tokens", "time"):
        table.add_column(col)
    for name, row in ((report.parent, report.base), (report.policy, report.tuned)):
        low, high = row["ci"]
        table.add_row(name, f"{row['pass_at_1']:.3f}", f"[{low:.3f}, {high:.3f}]", str(row["tokens"]),
                      f"{row['wall_s']:.0f} s")  # fmt: skip
    console.print(table)
    low, high = report.difference_ci
    console.print(
        f"difference (paired over {report.tasks} tasks): {report.difference:+.3f} [{low:+.3f}, {high:+.3f}]; "
        f"training {report.train_s:.0f} s; report {run_dir / 'finetune' / 'report.json'}"
    )
