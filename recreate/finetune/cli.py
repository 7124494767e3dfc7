"""`recreate finetune`: fine-tune the local model under an evolved agent from the run's logs."""

from __future__ import annotations

from pathlib import Path

import typer
from rich.table import Table

from recreate.config import load_settings
from recreate.console import make_console

console = make_console()


def finetune_command(
    run: str = typer.Option(..., "--run", help="The evolve run whose logs to train on (its run id)."),
    domain: str = typer.Option(..., "--domain", help="The run's domain (for the before/after evaluation)."),
    data: Path = typer.Option(..., "--data", help="The run's tasks file."),
    evaluator: str = typer.Option(None, "--evaluator", help="jsonl domain: evaluator command."),
    scaffold: Path = typer.Option(None, "--scaffold", help="Scaffold to evaluate with (default: the run's)."),
    versions: str = typer.Option(None, "--versions", help="Only logs of these scaffold versions (v1,v2)."),
    algo: str = typer.Option("tapo", "--algo", help="tapo, grpo, dapo, dr_grpo, gspo, gspo_token, cumprod."),
    steps: int = typer.Option(20, "--steps", min=1, help="Optimizer steps."),
    lr: float = typer.Option(None, "--lr", help="Adam learning rate of the LoRA [default: 1e-4]."),
    lora_r: int = typer.Option(16, "--lora-r", min=1),
    min_group_size: int = typer.Option(2, "--min-group-size", min=1),
    val_seeds: int = typer.Option(2, "--val-seeds", min=1, help="Evaluation runs per validation task."),
    val_limit: int = typer.Option(None, "--val-limit", min=1),
    home: Path = typer.Option(None, "--home"),
    strict: bool = typer.Option(
        False, "--strict", help="Refuse the run's logs if any file is garbage, instead of skipping it."
    ),
) -> None:
    """Train (LoRA) from an evolve run's logs, serve the new policy, and compare it with the version it
    started from (the base model; after an earlier `finetune` of the run, the version that one made)."""
    from recreate.domains import get_domain
    from recreate.finetune.offline import FinetuneError, finetune
    from recreate.scaffold import load_scaffold

    settings = load_settings(home=home)
    run_dir = settings.home / "runs" / run
    if not run_dir.is_dir():
        raise FinetuneError(f"--run {run}: no such run under {settings.home / 'runs'}")
    scaffold_dir = scaffold or run_dir / "scaffold"
    if not scaffold_dir.is_dir():
        raise FinetuneError(f"{scaffold_dir}: no scaffold to evaluate with; pass --scaffold DIR")
    dom = get_domain(domain, data=data, **({"evaluator": evaluator} if evaluator else {}))
    report = finetune(
        run_dir=run_dir, home=settings.home, scaffold=load_scaffold(scaffold_dir), domain=dom,
        val_tasks=dom.tasks("val")[:val_limit], algo=algo, steps=steps, lora_r=lora_r,
        min_group_size=min_group_size, val_seeds=val_seeds, **({"lr": lr} if lr is not None else {}),
        versions=set(versions.split(",")) if versions else None, sandbox=settings.sandbox, log=console.print,
        strict=strict,
    )  # fmt: skip
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
