"""Online TAPO: sample with the real agent, evaluate with the domain, train, serve the new policy, repeat.

One iteration:
1. `group_size` rollouts of each of `tasks_per_iteration` training tasks through the domain agent
   (multi-turn, tools in the sandbox) against the served policy, sampled at T=0.7 with no truncation,
   so the log-probs the engine returns are the behaviour policy's (`recreate.local.BEHAVIOUR_SAMPLING`);
2. every trajectory evaluated by the domain (its score is the reward) and saved with the policy
   version that produced it;
3. a training batch: this iteration's rollouts plus earlier ones at most `max_staleness` versions
   behind; or with `lag` k > 0 a pipeline k deep: the rollouts trained at iteration i are sampled at
   iteration i − k, by the policy k versions back (the first iteration samples those of iterations
   1..k + 1, by the base policy, so every iteration trains and the staleness rises 0, 1, .., k; a run
   given more iterations later samples the batches it lacks with the policy then: less stale, as its
   rows say); the trainer's log-probs of the batch's rollouts sampled by the current policy are
   compared with the engine's (mean |Δ|; in a lag run only the first iteration has such rollouts);
4. `steps_per_iteration` optimizer steps of `algo` on a LoRA over the current version;
5. the adapter is folded into a new version and served; held-out tasks measure pass@1 (no held-out
   tasks: no measurement, the row's pass@1 is NaN). An iteration that published no version keeps the
   last row's measurement of that same policy (`val_from` names the iteration whose runs it is).
Metrics go to `metrics.jsonl` in the run folder, one row per iteration (row 0: the base model).
"""

from __future__ import annotations

import json
import math
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recreate.domains.base import Domain, Task
from recreate.errors import Arg, ArgumentError
from recreate.evaluation.stats import bootstrap_ci
from recreate.experience.schema import Trajectory
from recreate.finetune.online_batches import (
    replay_batch,
    run_rollouts,
    sample_for,
    to_sample,
    versions_behind,
)
from recreate.finetune.policy import LORA_LR, ServedPolicy
from recreate.local import LOCAL_TEMPERATURE
from recreate.sandbox import resolve_sandbox
from recreate.scaffold import Scaffold


@dataclass
class OnlineConfig:
    iterations: int = 8
    tasks_per_iteration: int = 8
    group_size: int = 4
    max_staleness: int = 0  # policy versions behind the current one that may be replayed
    lag: int = 0  # > 0: train on rollouts sampled `lag` iterations earlier (a pipeline: stale, off-policy)
    algo: str = "tapo"
    lr: float = LORA_LR
    lora_r: int = 16
    steps_per_iteration: int = 4
    micro_batch_size: int = 4
    max_length: int = 1024
    eval_seeds: int = 2
    max_reply_tokens: int = 96
    concurrency: int = 4
    seed: int = 0
    loss: dict[str, Any] = field(default_factory=dict)
    # TrainConfig settings over the trainer's defaults above (`tapo train --online --config`, TRL names
    # mapped, with the options given on top); the loop sets the paths, temperature and seed itself
    train: dict[str, Any] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if self.lag and self.max_staleness:
            raise ArgumentError(
                "{lag} and {max_staleness} exclude each other: train on the rollouts of one stale"
                " iteration or replay every rollout up to some versions back, not both",
                lag=Arg("lag"), max_staleness=Arg("max_staleness"),
            )  # fmt: skip


# the OnlineConfig fields that are the trainer's defaults (`train` goes over them); the rest run the loop
TRAINER_FIELDS = ("algo", "lr", "lora_r", "steps_per_iteration", "micro_batch_size", "max_length", "loss")


@dataclass
class IterationRow:
    iteration: int
    policy: str
    val_pass_at_1: float
    val_ci: tuple[float, float]
    reward_mean: float | None = None  # of the rollouts sampled at this iteration, by its policy (None: none)
    train_trajectories: int = 0
    replayed: int = 0
    staleness: float | None = None  # mean policy versions between the trained rollouts and the trainer
    logprob_mismatch: float | None = None
    metrics: dict[str, float] = field(default_factory=dict)
    generated_tokens: int = 0
    wall_s: float = 0.0
    val_from: int | None = None  # the policy was unchanged: the held-out runs in eval/it-<val_from> stand


_NO_SCORE = (float("nan"), (float("nan"), float("nan")))


def pass_at_1(trajectories: list[Trajectory]) -> tuple[float, tuple[float, float]]:
    per_task: dict[str, list[float]] = {}
    for traj in trajectories:
        per_task.setdefault(traj.task_id, []).append(float(bool(traj.evaluation and traj.evaluation.passed)))
    means = [sum(v) / len(v) for v in per_task.values()]
    return (sum(means) / len(means) if means else 0.0), bootstrap_ci(means)


def logprob_mismatch(dataset: Any, model_dir: Path, fresh_ids: set[str], limit: int = 8) -> float | None:
    """Mean |logprob_engine - logprob_trainer| over the model tokens of up to `limit` fresh rollouts."""
    import torch
    from transformers import AutoModelForCausalLM

    from tapo_backend.trainer import token_logprobs

    fresh = [e for e in dataset.examples if e.trajectory_id in fresh_ids and e.behaviour_logprobs][:limit]
    if not fresh:
        return None
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    gaps: list[float] = []
    with torch.no_grad():
        for example in fresh:
            ids = torch.tensor([example.input_ids])
            mine = token_logprobs(model, ids, torch.ones_like(ids), temperature=LOCAL_TEMPERATURE)[0].tolist()
            for t in range(1, len(example.input_ids)):
                if example.mask[t]:
                    gaps.append(abs(mine[t - 1] - example.behaviour_logprobs[t]))
    return sum(gaps) / len(gaps) if gaps else None


def train_config(config: OnlineConfig, output_dir: Path, iteration: int) -> Any:
    """The trainer's config of one iteration: the loop's trainer defaults, under `config.train`, under
    what the loop sets itself (paths, the engine's temperature, the iteration's seed). One epoch over the
    batch unless `train` sets `epochs`. Raises tapo_backend's ConfigError for a bad setting."""
    from tapo_backend.config import command_config

    defaults = {
        "algo": config.algo, "loss": dict(config.loss), "lr": config.lr, "epochs": 1,
        "max_steps": config.steps_per_iteration, "micro_batch_size": config.micro_batch_size,
        "max_length": config.max_length, "lora": {"r": config.lora_r},
    }  # fmt: skip
    return command_config(
        defaults, config.train, "tapo train --online", temperature=LOCAL_TEMPERATURE,
        output_dir=str(output_dir), run_name=output_dir.name, seed=config.seed + iteration,
    )  # fmt: skip


def resolved_settings(config: OnlineConfig, run_dir: Path) -> dict[str, Any]:
    """What a run of `config` uses: the loop's settings and the trainer's config (its first iteration's)."""
    loop = {k: v for k, v in asdict(config).items() if k not in (*TRAINER_FIELDS, "train")}
    return {"online": loop, "train": train_config(config, run_dir / "train" / "it-001", 1).to_dict()}


def mean_metrics(path: Path) -> dict[str, float]:
    if not path.is_file():
        return {}
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    keys = {k for row in rows for k, v in row.items() if isinstance(v, int | float)}
    return {k: sum(r.get(k, 0.0) for r in rows) / len(rows) for k in sorted(keys)}


def _written(config: OnlineConfig) -> dict[str, Any]:
    """What config.json holds: the settings, and for a lag run how its batches are sampled (a lag run
    of before 2026-12-07 sampled none ahead and cannot go on under this one's rules)."""
    return asdict(config) | ({"lag_layout": "pipeline"} if config.lag else {})


def _check_resumable(run_dir: Path, config: OnlineConfig) -> None:
    """A run resumes with the settings it started with (more iterations are fine): its rows so far came
    from those, and the rest must come from the same."""
    try:
        before = json.loads((run_dir / "config.json").read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return  # nothing started here (or a config never completed: no row was written under it)
    now = json.loads(json.dumps(_written(config)))  # as it was written (tuples are lists there)
    changed = sorted(k for k in set(before) | set(now) if k != "iterations" and before.get(k) != now.get(k))
    if changed and _lines(run_dir / "metrics.jsonl"):
        shown = "; ".join(
            f"{k} {json.dumps(before.get(k))} there, {json.dumps(now.get(k))} now" for k in changed
        )
        raise ArgumentError(
            f"{{run_dir}} holds a run with other settings ({shown}): resume it with those (more iterations "
            "are fine) or start another run folder",
            run_dir=Arg("run_dir", repr(str(run_dir)), str(run_dir), flag="--output-dir"),
        )


def online_train(
    *,
    scaffold: Scaffold,
    domain: Domain,
    train_tasks: list[Task],
    val_tasks: list[Task],
    run_dir: Path,
    home: Path,
    config: OnlineConfig,
    sandbox: Any = "bwrap",
    deadline: float | None = None,
    log=print,
) -> list[IterationRow]:
    """Run (or resume) an online training run in `run_dir`; returns one row per iteration. No new
    iteration starts after `deadline` (a `time.time()` value)."""
    from transformers.utils import logging as hf_logging

    from tapo_backend.data import dataset_for
    from tapo_backend.trainer import load_tokenizer, train

    hf_logging.disable_progress_bar()  # every iteration reloads weights: the loop shows its own progress
    train_config(config, run_dir / "train", 0)  # a bad setting fails now, not after the first rollouts
    sandbox = resolve_sandbox(sandbox)
    run_dir.mkdir(parents=True, exist_ok=True)
    _check_resumable(run_dir, config)
    (run_dir / "config.json").write_text(json.dumps(_written(config), indent=1), encoding="utf-8")
    metrics_file = run_dir / "metrics.jsonl"
    rows = [IterationRow(**json.loads(line)) for line in _lines(metrics_file)]
    if len(rows) > config.iterations:  # a finished run: nothing to serve or sample
        return rows
    val_seeds = list(range(10_000, 10_000 + config.eval_seeds))
    with ServedPolicy(home, run_dir / "policy", parallel=config.concurrency) as policy:
        if rows and policy.current.name != rows[-1].policy:
            _resume_from_last_row(policy, rows[-1].policy, run_dir, log)
        tokenizer = load_tokenizer(str(policy.base_dir))
        for iteration in range(len(rows), config.iterations + 1):
            started = time.time()
            if deadline is not None and started > deadline and iteration > 0:
                log(f"time budget reached after iteration {iteration - 1}")
                break
            version = policy.current
            # what an attempt at this iteration cut short left (its trajectory ids are new each attempt,
            # so kept files would be trained on and scored beside the new ones)
            sampling = to_sample(run_dir, iteration, config) if iteration else []
            for folder in [
                *(f"rollouts/it-{j:03d}" for j in sampling),
                *(f"{part}/it-{iteration:03d}" for part in ("batches", "train", "eval")),
            ]:
                shutil.rmtree(run_dir / folder, ignore_errors=True)
            if iteration == 0:  # the base model's held-out score, the line every later row is read against
                rollouts: list[Trajectory] = []
                row = IterationRow(0, version.name, 0.0, (0.0, 0.0))
            else:
                rollouts = []
                for j in sampling:
                    rollouts += sample_for(
                        j, run_dir, scaffold, domain, policy.server.info, train_tasks, version.index, config,
                        sandbox, iteration,
                    )  # fmt: skip
                batch = replay_batch(run_dir, iteration, version.index, config.max_staleness, config.lag)
                it_config = train_config(config, run_dir / "train" / f"it-{iteration:03d}", iteration)
                dataset = dataset_for(it_config, batch, tokenizer)
                fresh = {t.trajectory_id for t in rollouts}
                row = IterationRow(
                    iteration, version.name, 0.0, (0.0, 0.0),
                    reward_mean=_mean_reward(rollouts),
                    train_trajectories=len(dataset.examples),
                    replayed=sum(e.trajectory_id not in fresh for e in dataset.examples),
                    staleness=versions_behind(batch, version.index),
                    logprob_mismatch=logprob_mismatch(dataset, version.hf_dir, fresh),
                )  # fmt: skip
                if dataset.examples:
                    result = train(it_config, batch, str(version.hf_dir), dataset=dataset)
                    row.metrics = mean_metrics(result.metrics_path)
                    version = policy.publish(result.final_dir)
                    # the adapter is in the published version: its training state (~ a model) is spent
                    shutil.rmtree(result.output_dir / "checkpoints", ignore_errors=True)
                else:
                    why = ", ".join(sorted(set(dataset.dropped_groups.values()))) or "no rollouts"
                    log(f"iteration {iteration}: no group to learn from ({why}); policy kept")
            evals = []
            last = _measured_same_policy(rows, version.name) if val_tasks else None
            if last is not None:  # running its held-out runs again would measure nothing new
                row.val_from = last.iteration if last.val_from is None else last.val_from
                row.val_pass_at_1, row.val_ci = last.val_pass_at_1, last.val_ci
            elif val_tasks:
                evals = run_rollouts(
                    scaffold, domain, policy.server.info, val_tasks, val_seeds,
                    out_dir=run_dir / "eval" / f"it-{iteration:03d}", policy_index=version.index,
                    config=config, sandbox=sandbox,
                )  # fmt: skip
            if row.val_from is None:
                row.val_pass_at_1, row.val_ci = pass_at_1(evals) if evals else _NO_SCORE
            row.policy = version.name
            row.generated_tokens = sum(t.totals.completion_tokens for t in [*rollouts, *evals])
            row.wall_s = round(time.time() - started, 1)
            with metrics_file.open("a", encoding="utf-8") as f:
                f.write(json.dumps(asdict(row)) + "\n")
            rows.append(row)
            log(_describe(row))
    return rows


def _measured_same_policy(rows: list[IterationRow], policy: str) -> IterationRow | None:
    """The last row, if it measured `policy` on the held-out tasks (with the same seeds): as after a
    lag's filling iteration or a batch with nothing to learn, which publish no version."""
    last = rows[-1] if rows else None
    return last if last and last.policy == policy and math.isfinite(last.val_pass_at_1) else None


def _resume_from_last_row(policy: ServedPolicy, name: str, run_dir: Path, log: Any) -> None:
    """Killed after publishing an iteration's policy but before writing its row: that iteration runs
    again from the last row's policy, not on top of the one it published."""
    log(f"resuming from {name}: {policy.current.name} has no row in {run_dir / 'metrics.jsonl'}")
    try:
        policy.rollback(name)
    except ValueError:
        raise ArgumentError(
            f"{{run_dir}}: its last row was trained with policy {name}, which is no longer under its "
            "policy/ folder: this run cannot resume; start another run folder",
            run_dir=Arg("run_dir", repr(str(run_dir)), str(run_dir), flag="--output-dir"),
        ) from None


def _mean_reward(trajectories: list[Trajectory]) -> float | None:
    if not trajectories:  # a lag-k run's last k iterations sample nothing
        return None
    return sum(t.evaluation.score for t in trajectories if t.evaluation) / len(trajectories)


def _describe(row: IterationRow) -> str:
    parts = [f"it {row.iteration}", f"policy {row.policy}", f"val pass@1 {row.val_pass_at_1:.3f}"]
    parts.append(f"[{row.val_ci[0]:.3f}, {row.val_ci[1]:.3f}]")
    if row.reward_mean is not None:
        parts.append(f"reward {row.reward_mean:.3f}")
    if row.logprob_mismatch is not None:
        parts.append(f"|Δlogp| {row.logprob_mismatch:.4f}")
    for key in ("loss", "clip_frac"):
        if key in row.metrics:
            parts.append(f"{key} {row.metrics[key]:.4f}")
    parts.append(f"{row.wall_s:.0f} s")
    return "  ".join(parts)


def _lines(path: Path) -> list[str]:
    if not path.is_file():
        return []
    return [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
