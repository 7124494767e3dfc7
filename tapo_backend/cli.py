"""`tapo` command line: train a model from logged trajectories, merge a LoRA adapter, serve with vLLM."""

from __future__ import annotations

import shlex
import sys
from pathlib import Path
from typing import Any

import typer
import yaml
from rich.table import Table

from recreate.cli_options import (
    apply_conventions,
    common_flags,
    dotenv_warnings_once,
    exit_on_usage_error,
    key_file_option,
)
from recreate.console import make_console

app = typer.Typer(help="Fine-tune a model from logged agent trajectories (TAPO).", no_args_is_help=True)
console = make_console()
_state = {"debug": False}
SHOWN_SKIPS = 10


@app.callback()
def _root(debug: bool = typer.Option(False, "--debug", help="Show tracebacks for errors.")) -> None:
    _state["debug"] = debug


def _print_dataset(dataset, source: Path) -> None:
    summary = dataset.summary()
    table = Table(title=f"dataset: {source}", show_header=False)
    table.add_row("groups (tasks)", str(summary["groups"]))
    table.add_row("trajectories", str(summary["trajectories"]))
    table.add_row("tokens", str(summary["tokens"]))
    table.add_row("model tokens", str(summary["model_tokens"]))
    table.add_row("mask ratio", f"{summary['mask_ratio']:.3f}")
    spread = f"{summary['reward_min']:.3g} .. {summary['reward_max']:.3g}"
    table.add_row("reward min .. max", spread)
    table.add_row("reward mean ± std", f"{summary['reward_mean']:.3g} ± {summary['reward_std']:.3g}")
    table.add_row("token-in/token-out", str(summary["token_in_token_out"]))
    table.add_row("logged logprobs", str(summary["logged_logprobs"]))
    table.add_row("  of them partly logged", str(summary["partly_logged_logprobs"]))
    table.add_row("ids ≠ text (turns)", str(summary["token_text_mismatches"]))
    table.add_row("raw logprobs under sampling", str(summary["raw_logprobs_under_sampling"]))
    for reason, count in summary["dropped_groups"].items():
        table.add_row("groups dropped", f"{count} ({reason})")
    table.add_row("cut at max_length", str(summary["cut_at_max_length"]))
    table.add_row("skipped", str(summary["skipped"]))
    for kind, count in summary["skipped_by_kind"].items():
        table.add_row(f"  {kind}", str(count))
    console.print(table)
    for skip in dataset.skipped[:SHOWN_SKIPS]:
        typer.echo(f"  skipped {skip.source}: {skip.reason}")
    if len(dataset.skipped) > SHOWN_SKIPS:
        typer.echo(f"  ... and {len(dataset.skipped) - SHOWN_SKIPS} more skipped")


@app.command()
def train(
    logs: Path = typer.Option(None, "--logs", help="Trajectory JSON file, directory or experience store."),
    model: str = typer.Option(None, "--model", help="HF model name or local directory."),
    algo: str = typer.Option(None, "--algo", help="grpo, dapo, dr_grpo, gspo, gspo_token, cumprod or tapo."),
    config_file: Path = typer.Option(
        None, "--config", help="TOML/YAML file of TrainConfig settings (TRL GRPOConfig names too)."
    ),
    dry_run: bool = typer.Option(
        False, "--dry-run", help="Print the resolved settings (and the data's summary); train nothing."
    ),
    run_name: str = typer.Option(None, "--run-name", help="Run directory name under $RECREATE_HOME/tapo/."),
    output_dir: str = typer.Option(None, "--output-dir", help="Where checkpoints, metrics and the model go."),
    resume: bool = typer.Option(False, "--resume", help="Continue from the run's latest checkpoint."),
    max_steps: int = typer.Option(None, "--max-steps", help="Stop after this many optimizer steps."),
    epochs: int = typer.Option(None, "--epochs", help="Passes over the logged data."),
    lr: float = typer.Option(None, "--lr", help="Learning rate."),
    dtype: str = typer.Option(None, "--dtype", help="Weights as loaded: fp32 (default), bf16, fp16 or auto."),
    on_mismatch: str = typer.Option(
        None,
        "--on-mismatch",
        help="Logged ids that do not decode to their text: trust (default), drop, retokenize.",
    ),
    strict: bool = typer.Option(
        False, "--strict", help="Refuse bad log files (non-finite values, bad ids, ...) instead of skipping."
    ),
    max_length: int = typer.Option(
        None, "--max-length", help="Tokens per trajectory; longer ones are cut (default 8192)."
    ),
    online: bool = typer.Option(False, "--online", help="Sample with the agent as it trains (see below)."),
    domain: str = typer.Option(None, "--domain", help="--online: the domain (math, jsonl, ...)."),
    data: Path = typer.Option(None, "--data", help="--online: the domain's tasks file."),
    evaluator: str = typer.Option(None, "--evaluator", help="--online, jsonl: the evaluator command."),
    scaffold: Path = typer.Option(None, "--scaffold", help="--online: the agent's scaffold directory."),
    iterations: int = typer.Option(8, "--iterations", min=1, help="--online: sample-train-serve rounds."),
    group_size: int = typer.Option(4, "--group-size", min=2, help="--online: rollouts per task."),
    tasks_per_iteration: int = typer.Option(
        8, "--tasks-per-iteration", min=1, help="--online: training tasks sampled per iteration."
    ),
    max_staleness: int = typer.Option(
        0, "--max-staleness", min=0, help="--online: replay this many versions back."
    ),
    lag: int = typer.Option(
        0,
        "--lag",
        min=0,
        help="--online: train on rollouts sampled this many iterations earlier (stale, off-policy).",
    ),  # fmt: skip
) -> None:
    """Train MODEL on the trajectories under LOGS; or, with --online, run the domain agent (SCAFFOLD) on
    DOMAIN's training tasks against the served embedded model, train on what it did, serve the new
    policy and repeat, measuring held-out pass@1 after every iteration."""
    if online:
        from recreate.finetune.cli import given_settings
        from tapo_backend.config import settings_file

        given = given_settings(
            settings_file(config_file), algo=algo, lr=lr, max_steps=max_steps, epochs=epochs, dtype=dtype,
            on_mismatch=on_mismatch, strict=strict or None, max_length=max_length,
        )  # fmt: skip
        _train_online(
            domain, data, evaluator, scaffold, train=given, dry_run=dry_run, run_name=run_name,
            output_dir=output_dir, iterations=iterations, group_size=group_size,
            tasks_per_iteration=tasks_per_iteration, max_staleness=max_staleness, lag=lag,
        )  # fmt: skip
        return
    if logs is None or model is None:
        raise typer.BadParameter(
            "--logs and --model are needed (or --online with --domain/--data/--scaffold)"
        )
    from tapo_backend.config import load_config
    from tapo_backend.data import DataError, dataset_for

    config = load_config(
        config_file,
        algo=algo,
        run_name=run_name,
        output_dir=output_dir,
        max_steps=max_steps,
        epochs=epochs,
        lr=lr,
        dtype=dtype,
        on_mismatch=on_mismatch,
        strict=strict or None,
        max_length=max_length,
    )
    if dry_run:
        typer.echo(yaml.safe_dump(config.to_dict(), sort_keys=False).rstrip())
    from tapo_backend.hub import check_model_available

    check_model_available(model)  # before the training stack loads: offline, say so at once
    from tapo_backend.trainer import load_tokenizer
    from tapo_backend.trainer import train as run_training

    if not logs.exists():  # before the model is looked up, which may mean a slow hub request
        raise DataError(f"no such file or directory: {logs}")
    tokenizer = load_tokenizer(model)
    dataset = dataset_for(config, logs, tokenizer)
    _print_dataset(dataset, logs)
    if not dataset.examples:
        raise ValueError(f"no trainable trajectories under {logs} (see the summary above)")
    if dry_run:
        return
    result = run_training(config, logs, model, resume=resume, dataset=dataset)
    console.print(f"trained {result.steps} steps; model: {result.final_dir}; metrics: {result.metrics_path}")


def _train_online(
    domain: str | None,
    data: Path | None,
    evaluator: str | None,
    scaffold: Path | None,
    *,
    train: dict[str, Any],
    dry_run: bool,
    run_name: str | None,
    output_dir: str | None,
    **loop: Any,
) -> None:
    """--online: `train` holds the TrainConfig settings (the --config file's, the options given on top);
    its `seed` seeds the whole run (task order, rollouts, trainer)."""
    missing = [
        name
        for name, value in (("--domain", domain), ("--data", data), ("--scaffold", scaffold))
        if not value
    ]
    if missing:
        raise typer.BadParameter(f"--online needs {', '.join(missing)}")
    from recreate.config import load_settings
    from recreate.domains import get_domain
    from recreate.finetune.cli import print_settings
    from recreate.finetune.online import OnlineConfig, online_train, resolved_settings
    from recreate.scaffold import load_scaffold

    settings = load_settings()
    train = dict(train)
    config = OnlineConfig(**loop, seed=train.pop("seed", OnlineConfig.seed), train=train)
    dom = get_domain(domain, data=data, **({"evaluator": evaluator} if evaluator else {}))
    algo = train.get("algo", config.algo)
    run_dir = (
        Path(output_dir) if output_dir else settings.home / "tapo" / (run_name or f"online-{dom.name}-{algo}")
    )
    resolved = resolved_settings(config, run_dir)  # a bad setting fails here, before any server starts
    agent = load_scaffold(scaffold)
    train_tasks, val_tasks = dom.tasks("train"), dom.tasks("val")
    if dry_run:
        note = f"run {run_dir}: {len(train_tasks)} training, {len(val_tasks)} held-out tasks"
        print_settings(resolved, note, as_json=False)
        return
    rows = online_train(
        scaffold=agent, domain=dom, train_tasks=train_tasks, val_tasks=val_tasks, run_dir=run_dir,
        home=settings.home, config=config, sandbox=settings.sandbox, log=console.print,
    )  # fmt: skip
    console.print(
        f"{len(rows) - 1} iterations; metrics: {run_dir / 'metrics.jsonl'}; policy: {rows[-1].policy}"
    )


@app.command()
def merge(
    adapter: Path = typer.Argument(..., help="LoRA adapter directory (a run's `final/`)."),
    out: Path = typer.Argument(..., help="Directory for the merged model."),
    base: str = typer.Option(None, "--base", help="Base model (default: the one named in the adapter)."),
) -> None:
    """Merge a LoRA adapter into its base model and save a plain model directory."""
    from tapo_backend.serve import merge_lora

    console.print(f"merged model in {merge_lora(adapter, out, base_model=base)}")


@app.command()
def serve(
    model: str = typer.Argument(..., help="Model directory or name to serve."),
    adapter: Path = typer.Option(None, "--adapter", help="Serve this LoRA adapter on top of MODEL."),
    host: str = typer.Option("127.0.0.1", "--host", help="Address to bind."),
    port: int = typer.Option(8000, "--port", min=1, max=65535, help="Port to listen on."),
    python: str = typer.Option("python", "--python", help="Python of an environment with vLLM installed."),
    print_only: bool = typer.Option(False, "--print-command", help="Print the vLLM command, start nothing."),
    key_file: Path = key_file_option(),
) -> None:
    """Serve a trained model with vLLM's OpenAI-compatible server (a separate process). Without
    --key-file it answers anyone who can reach it (on its host: any local process)."""
    from recreate.local.keys import KEY_ENV, read_key_file
    from recreate.local.vllm import guard_env, vllm_command
    from tapo_backend.serve import VLLMServer

    command = vllm_command(model, adapter=adapter, host=host, port=port, python=python)
    env = {KEY_ENV: read_key_file(key_file)} if key_file is not None else {}
    if print_only:  # the key stays in its file: the line reads it when run
        given = [f"{k}={shlex.quote(v)}" for k, v in guard_env().items()]
        if key_file is not None:
            given.append(f'{KEY_ENV}="$(cat {shlex.quote(str(key_file))})"')
        typer.echo(" ".join(["env", *given, shlex.join(command)]))
        return
    with VLLMServer(command, host=host, port=port, env=env) as server:
        needs = f"; clients give the key in {key_file}" if key_file is not None else ""
        ready = f"vLLM ready at {server.base_url} (log {server.log_path}; Ctrl-C stops it{needs})"
        console.print(ready, soft_wrap=True)
        server.wait()


def main() -> None:
    dotenv_warnings_once()
    try:
        apply_conventions(typer.main.get_command(app), common_flags(_state))(
            standalone_mode=False, prog_name="tapo"
        )
    except (typer.Exit, SystemExit) as exc:
        code = exc.exit_code if isinstance(exc, typer.Exit) else exc.code
        sys.exit(code or 0)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as exc:  # user-facing errors: one line, exit 2
        from click.exceptions import Abort

        exit_on_usage_error(exc)
        if isinstance(exc, Abort):
            sys.exit(1)
        if _state["debug"]:
            raise
        from recreate.errors import one_line

        typer.echo(f"error: {one_line(exc)}", err=True)
        sys.exit(2)


if __name__ == "__main__":  # `accelerate launch -m tapo_backend.cli train ...` for several processes
    main()
