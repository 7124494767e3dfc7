"""`recreate evolve`: evolve a seed scaffold on a domain's tasks."""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import math
import signal
import sys
import tempfile
import uuid
from collections.abc import Iterator
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
from recreate.console import PrintableFormatter, make_console
from recreate.local import LOCAL_SPEC
from recreate.optimizer.plan import print_plan
from recreate.optimizer.protocol import PROTOCOLS
from recreate.optimizer.run import agent_model_spec, not_local
from recreate.optimizer.summary import print_summary

if TYPE_CHECKING:
    from recreate.finetune.evolve_step import FinetuneSettings
    from recreate.runs import EvolveResult

ABLATIONS = ("no-trajectory", "no-environment", "no-eval-details", "no-guidance")
console = make_console()


def parse_budget_usd(value: str | None) -> float | None:
    """--budget-usd: a positive number of USD, or 'none' for no USD limit."""
    if value is None or value.strip().lower() == "none":
        return None
    try:
        usd = float(value)
    except ValueError:
        usd = float("nan")
    if not 0 < usd < math.inf:
        raise typer.BadParameter(
            f"{value!r}: give a positive number of USD, or 'none'", param_hint=["--budget-usd"]
        )
    return usd


def parse_prices(items: list[str]) -> dict[str, list[float]]:
    """--price MODEL=IN,OUT (USD per 1M input and output tokens) -> {MODEL: [IN, OUT]}."""
    prices: dict[str, list[float]] = {}
    for item in items:
        model, _, rates = item.rpartition("=")
        try:
            values = [float(v) for v in rates.split(",")]
        except ValueError:
            values = []
        if not model or len(values) != 2 or not all(0 <= v < math.inf for v in values):
            raise typer.BadParameter(
                f"{item!r}: give MODEL=IN,OUT in USD per 1M tokens, e.g. gpt-4.1-mini=0.4,1.6",
                param_hint=["--price"],
            )
        prices[model] = values
    return prices


def evolve_command(
    seed: Path = typer.Option(..., "--seed", help="Seed scaffold directory (e.g. scaffolds/minimal)."),
    domain: str = typer.Option(..., "--domain", help="Domain name: math, ds1000, jsonl."),
    data: Path = typer.Option(..., "--data", help="Tasks file or folder of the domain."),
    model: str = typer.Option(
        None, "--model", help="Agent model spec (e.g. openai:gpt-4.1-mini), or `local` (embedded SmolLM2)."
    ),
    optimizer_model: str = typer.Option(
        None, "--optimizer-model", help="Meta-agent model (default: --model)."
    ),
    evaluator: str = typer.Option(
        None, "--evaluator", help="jsonl domain: evaluator command or module:function."
    ),
    budget_usd: str = typer.Option(
        None, "--budget-usd", help="Stop (resumably) after this much spend in USD; 'none' for no USD limit."
    ),
    price: list[str] = typer.Option(
        [], "--price", help="MODEL=IN,OUT: the model's USD per 1M input/output tokens (repeatable)."
    ),
    max_tokens: int = typer.Option(
        None, "--max-tokens", min=1, help="Stop (resumably) after this many model tokens, all roles together."
    ),
    max_rollouts: int = typer.Option(
        None, "--max-rollouts", min=1, help="Stop (resumably) after this many agent runs."
    ),
    max_wall_s: float = typer.Option(
        None, "--max-wall-s", min=0.001, help="Stop (resumably) after this many seconds of wall time."
    ),
    concurrency: int = typer.Option(4, "--concurrency", min=1, help="Agent runs and model calls at a time."),
    rounds: int = typer.Option(3, "--rounds", min=1, help="Rounds of reflect, synthesize, gate."),
    batch_size: int = typer.Option(
        4, "--batch-size", min=1, help="Training tasks run and reflected on per round."
    ),
    val_limit: int = typer.Option(None, "--val-limit", min=1, help="Use at most N validation tasks."),
    train_limit: int = typer.Option(None, "--train-limit", min=1, help="Use at most N training tasks."),
    min_improvement: float = typer.Option(
        0.0,
        "--min-improvement",
        help="Gate: accept a candidate when the lower bound of its mean improvement is above this.",
    ),
    gate_alpha: float = typer.Option(
        None,
        "--gate-alpha",
        help="Gate: the one-sided level of its paired test [default: 0.025, a 95% interval's lower bound "
        "above --min-improvement and a sign-flip test; it needs 6+ validation tasks, at 2^-k k].",
    ),
    val_seeds: int = typer.Option(
        1, "--val-seeds", min=1, help="Validation runs per task and version (a count, not a random seed)."
    ),
    test_seeds: int = typer.Option(
        2,
        "--test-seeds",
        min=0,
        help="Runs per test task of the seed and final pairs at the end (a count; 0: none).",
    ),
    random_seed: int = typer.Option(
        0, "--random-seed", help="The run's random seed: batches, agent sampling seeds, gate resampling."
    ),
    optimizer_protocol: str = typer.Option(
        "auto",
        "--optimizer-protocol",
        help="agentic (tool calls), structured (one constrained call; for models without tool calls) "
        "or auto (structured for such local models).",
    ),
    sandbox: str = sandbox_option(),
    executor: str = executor_option(),
    resume: str = typer.Option(None, "--resume", help="Resume the run with this id."),
    force: bool = typer.Option(False, "--force", help="Resume even where the stored run config differs."),
    run: str = typer.Option(None, "--run", help="Name a new run (default: evolve-<8 hex>)."),
    run_id: str = deprecated("--run-id", "--run"),
    dry_run: bool = typer.Option(False, "--dry-run", help="Show the plan and projected cost, spend nothing."),
    ablate: list[str] = typer.Option([], "--ablate", help=f"Ablation: {', '.join(ABLATIONS)}."),
    no_synthesis: bool = typer.Option(False, "--no-synthesis", help="Apply instance proposals directly."),
    bootstrap: bool = typer.Option(False, "--bootstrap", help="Optimizer writes v0 from the seed first."),
    allow_train_as_val: bool = typer.Option(
        False, "--allow-train-as-val", help="Validate on the training tasks when the data has no val split."
    ),
    finetune_every: int = typer.Option(
        None,
        "--finetune-every",
        min=1,
        help="Every K rounds, fine-tune the local agent model on the run's experience (gated, like edits).",
    ),
    finetune_algo: str = typer.Option(
        None, "--finetune-algo", help="tapo, grpo, dapo, gspo, ... [default: tapo]."
    ),
    finetune_steps: int = typer.Option(
        None, "--finetune-steps", min=1, help="Optimizer steps per fine-tuning [default: 8]."
    ),
    finetune_config: Path = typer.Option(
        None,
        "--finetune-config",
        help="TOML/YAML of training settings (TRL GRPOConfig names too); --finetune-* options win.",
    ),
    finetune_group_size: int = typer.Option(
        4, "--finetune-group-size", min=2, help="Runs per training task sampled for each fine-tuning."
    ),
    finetune_val_seeds: int = typer.Option(
        3, "--finetune-val-seeds", min=1, help="Validation runs per task at the model gate (a count)."
    ),
    home: Path = home_option(),
    as_json: bool = json_option("the run's summary (with --dry-run, the plan)"),
) -> None:
    """Evolve a seed scaffold into a better, validated one (ReCreate)."""
    from recreate.domains import get_domain
    from recreate.errors import Arg
    from recreate.evaluation.preflight import preflight
    from recreate.evaluation.ray_executor import make_executor
    from recreate.models import Budget, check_endpoint, price_overrides, require_prices
    from recreate.optimizer import Ablations, EvolveConfig
    from recreate.optimizer.run import optimize
    from recreate.runs import RUN_ARG, check_run_id
    from recreate.scaffold import load_scaffold

    if optimizer_protocol not in PROTOCOLS:
        raise typer.BadParameter(
            f"{optimizer_protocol!r}: choose one of {', '.join(PROTOCOLS)}",
            param_hint=["--optimizer-protocol"],
        )
    unknown = sorted(set(ablate) - set(ABLATIONS))
    if unknown:
        raise typer.BadParameter(f"unknown ablation(s) {unknown}; choose from {', '.join(ABLATIONS)}")
    settings = load_settings(home=home)
    runs_on = make_executor(executor, concurrency=concurrency)
    run_id = prefer(run, run_id, "--run")
    for given, arg in ((run_id, RUN_ARG), (resume, Arg("resume", cli="NAME"))):
        if given is not None:
            check_run_id(given, arg)
    usd = parse_budget_usd(budget_usd)
    prices = {**settings.prices, **parse_prices(price)}
    if resume and not (settings.home / "runs" / resume / "config.json").is_file():
        raise typer.BadParameter(
            f"no run {resume!r} under {settings.home / 'runs'}; start one with --run {resume}",
            param_hint=["--resume"],
        )
    options = {"evaluator": evaluator} if evaluator else {}
    dom = get_domain(domain, data=data, **options)
    train, val = dom.tasks("train")[:train_limit], dom.tasks("val")[:val_limit]
    cfg = EvolveConfig(
        rounds=rounds,
        batch_size=batch_size,
        max_concurrency=concurrency,
        min_improvement=min_improvement,
        **({"gate_alpha": gate_alpha} if gate_alpha is not None else {}),
        val_seeds=val_seeds,
        test_seeds=test_seeds,
        seed=random_seed,
        optimizer_protocol=optimizer_protocol,
        max_rollouts=max_rollouts,
        max_wall_s=max_wall_s,
        bootstrap=bootstrap,
        ablations=Ablations(**{a.replace("-", "_"): True for a in ablate}, no_synthesis=no_synthesis),
    )
    seed_scaffold = load_scaffold(seed)
    finetune = _finetune_settings(
        finetune_every, rounds, model or settings.model, finetune_config, algo=finetune_algo,
        steps=finetune_steps, group_size=finetune_group_size, val_seeds=finetune_val_seeds,
    )  # fmt: skip
    if dry_run:  # priced as the run would be: the same model fallback (`local` costs $0)
        agent = agent_model_spec(model or settings.model, settings.base_url)
        rows = print_plan(
            console, cfg, seed_scaffold, n_train=len(train), n_val=len(val), agent=agent,
            optimizer=optimizer_model or settings.optimizer_model or agent, prices=prices,
            budget_usd=usd, finetune_every=finetune_every, finetune_group_size=finetune_group_size,
            base_url=settings.base_url,
        )  # fmt: skip
        if finetune:
            _print_finetune_settings(finetune)
        if as_json:
            plan = [{"role": r, "calls": c, "tokens": t, "usd": usd} for r, c, t, usd in rows]
            emit_json({"plan": plan, "finetune": dataclasses.asdict(finetune) if finetune else None})
        return
    _check_writable(settings.home)
    preflight(sandbox or settings.sandbox, dom, settings.home)  # the machine can do the run: said in seconds
    agent = agent_model_spec(model or settings.model, settings.base_url)
    optimizer = optimizer_model or settings.optimizer_model or agent
    if finetune and agent != LOCAL_SPEC:
        raise not_local(agent)
    budget = Budget(max_usd=usd, max_tokens=max_tokens)
    price_overrides(prices)  # a malformed price (recreate.toml, --price) is said before anything starts
    require_prices({"agent": agent, "optimizer": optimizer}, budget, prices, settings.base_url)
    endpoints = {agent: "--model"}
    endpoints.setdefault(optimizer, "--optimizer-model")
    for spec, option in endpoints.items():  # before a local server starts: a bad endpoint costs seconds
        if spec != LOCAL_SPEC:
            check_endpoint(spec, settings.base_url, option=option)
    run_id = resume or run_id or f"evolve-{uuid.uuid4().hex[:8]}"
    if resume:
        console.print(f"resuming run {run_id}: its finished work is kept")
    with _progress_lines(), _interrupts_said(settings.home / "runs" / run_id):
        result = optimize(
            seed_scaffold, dom, model=agent, optimizer_model=optimizer, trainset=train, valset=val,
            config=cfg, budget=budget, prices=prices, sandbox=sandbox, home=settings.home, run_id=run_id,
            allow_train_as_val=allow_train_as_val, force=force, finetune=finetune, log=console.print,
            executor=runs_on,
            why_local=_why_local(model, optimizer_model, settings.model, settings.optimizer_model),
        )  # fmt: skip
    weights = None
    if result.weights is not None and result.model:
        weights = (result.weights, Path(result.model.removeprefix(f"{LOCAL_SPEC}:")))
    print_summary(console, result, result.report, weights)
    if as_json:
        emit_json(summary_doc(result))
    if result.stopped:
        console.print(f"[yellow]stopped: {result.stopped}[/]; resume with --resume {result.run_id}")
        raise typer.Exit(3)


def summary_doc(result: EvolveResult) -> dict[str, Any]:
    """`evolve --json`: the run's outcome, where its files are, and each version's gate."""
    keys = ("run_id", "run_dir", "final", "stopped", "final_model", "test", "report", "scaffold_dir", "model")
    versions = [
        {k: h.get(k) for k in ("ref", "round", "accepted", "reason", "val", "errors") if k in h}
        for h in result.history
    ]
    return {**{k: getattr(result, k) for k in keys}, "weights": result.weights, "versions": versions}


def _print_finetune_settings(settings: FinetuneSettings) -> None:
    """--dry-run: the trainer's settings of each fine-tuning step, resolved (file, options, defaults)."""
    import yaml

    from recreate.finetune.evolve_step import train_config

    resolved = train_config(settings, Path("<run>/policy"), "<step>").to_dict()
    console.print("fine-tuning step settings:", markup=False)
    console.print(yaml.safe_dump(resolved, sort_keys=False).rstrip(), markup=False, highlight=False)


def _finetune_settings(
    every: int | None, rounds: int, asked_model: str | None, config: Path | None, **options: Any
) -> FinetuneSettings | None:
    """--finetune-* checked before anything starts: a bad algorithm, a K no round reaches, a model that
    is not the local one (as asked; the resolved model is checked again before the run). A
    --finetune-config file's settings sit under the options given."""
    if not every:
        return None
    if every > rounds:
        raise typer.BadParameter(
            f"{every} with --rounds {rounds}: no fine-tuning step would run; pass at most {rounds}",
            param_hint=["--finetune-every"],
        )
    if asked_model and asked_model != LOCAL_SPEC:
        raise not_local(asked_model)
    from recreate.finetune.evolve_step import finetune_settings

    try:
        return finetune_settings(every, config, options)
    except ValueError as exc:  # the trainer's ConfigError: a bad file, algorithm or setting
        raise typer.BadParameter(
            str(exc), param_hint=["--finetune-config" if config else "--finetune-algo"]
        ) from exc


@contextlib.contextmanager
def _interrupts_said(run_dir: Path) -> Iterator[None]:
    """Ctrl-C or SIGTERM: say at once what happens (the running model calls are waited for), and at
    the end how to resume; the local servers stop on the way out."""

    def interrupt(signum: int, frame: object) -> None:
        sys.stderr.write("interrupted: stopping once the running model calls return\n")
        logging.getLogger("concurrent.futures").addFilter(_after_shutdown)  # stays: the process is ending
        raise KeyboardInterrupt

    before = {sig: signal.signal(sig, interrupt) for sig in (signal.SIGINT, signal.SIGTERM)}
    try:
        yield
    except KeyboardInterrupt:
        if (run_dir / "config.json").is_file():
            console.print(f"[yellow]interrupted[/]; resume with --resume {run_dir.name}")
        raise typer.Exit(130) from None
    finally:
        for sig, handler in before.items():
            signal.signal(sig, handler)


def _after_shutdown(record: logging.LogRecord) -> bool:
    """False for the traceback of a graph step that finished after the interrupt stopped the graph's
    executor (its checkpoint write could not be scheduled: that step runs again on resume)."""
    error = record.exc_info[1] if record.exc_info else None
    return not (isinstance(error, RuntimeError) and "after shutdown" in str(error))


def _check_writable(home: Path) -> None:
    """The state directory can take the run's files: said now, not after the model is up."""
    try:
        home.mkdir(parents=True, exist_ok=True)
        with tempfile.TemporaryFile(dir=home):
            pass
    except OSError as exc:
        raise typer.BadParameter(
            f"{home}: cannot write there ({exc.strerror or exc}); pass a writable --home (or RECREATE_HOME)",
            param_hint=["--home"],
        ) from exc


@contextlib.contextmanager
def _progress_lines() -> Iterator[None]:
    """The loop's progress (`recreate.progress`), a timed line per stage, on this command's console;
    to a pipe or a log file, plain lines (no padding to the console's width, no folding)."""
    from rich.logging import RichHandler

    log = logging.getLogger("recreate.progress")
    handler: logging.Handler
    if console.is_terminal:
        handler = RichHandler(console=console, show_level=False, show_path=False, markup=False)
    else:
        handler = logging.StreamHandler(console.file)
        handler.setFormatter(PrintableFormatter("[%(asctime)s] %(message)s", "%H:%M:%S"))
    level, propagate = log.level, log.propagate  # given back: a caller's own handlers see them again
    log.addHandler(handler)
    log.setLevel(logging.INFO)
    log.propagate = False
    try:
        yield
    finally:
        log.removeHandler(handler)
        log.setLevel(level)
        log.propagate = propagate


def _why_local(*asked: str | None) -> str:
    """Why the embedded model runs: the user named it, or nothing else is configured."""
    return f"--model {LOCAL_SPEC}" if LOCAL_SPEC in asked else "no model endpoint configured"
