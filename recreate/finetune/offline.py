"""`recreate finetune`: train the model under an evolved agent from that run's own logs.

1. select: the run's trajectories of *training* tasks (held-out tasks stay held out, also from the
   trainer), optionally only some scaffold versions, that carry token ids and log-probs; groups of at
   least `min_group_size` runs per task (the evolve loop's rollouts of a task, across versions/seeds);
2. train: `tapo_backend` (LoRA over the local model's HF copy) at the temperature the logs were sampled
   at, so the logged log-probs are the behaviour policy's;
3. publish: the adapter folded into a new policy version, served by llama.cpp;
4. evaluate: the run's final scaffold on the validation split with the model it started from and the
   fine-tuned one, same tasks and seeds; the paired difference with a bootstrap interval, tokens, time.

A second `recreate finetune` of the same run trains on top of the version the first one published (and
names it as the version it started from); each attempt trains from scratch in `finetune/train`.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from recreate.domains.base import Domain, Task
from recreate.evaluation.stats import bootstrap_ci
from recreate.experience.schema import Trajectory, load_trajectory
from recreate.finetune.online import OnlineConfig, pass_at_1
from recreate.finetune.online_batches import run_rollouts
from recreate.finetune.policy import LORA_LR, ServedPolicy
from recreate.sandbox import resolve_sandbox
from recreate.scaffold import Scaffold
from tapo_backend.load import OUTSIDE, link_outside, trajectory_fault


class FinetuneError(ValueError):
    """Nothing to train on, or inputs that do not fit together; the message names the fix."""


@dataclass
class Selection:
    files: list[Path]
    temperature: float
    skipped: dict[str, int] = field(default_factory=dict)  # reason -> count


@dataclass
class FinetuneReport:
    run_id: str
    selected: int
    temperature: float
    policy: str
    parent: str  # the version training started from (the base, or an earlier attempt's version)
    base: dict[str, Any]
    tuned: dict[str, Any]
    difference: float
    difference_ci: tuple[float, float]
    tasks: int
    train_s: float
    train_metrics: dict[str, float]
    skipped: dict[str, int]


def select_trajectories(
    run_dir: Path, *, versions: set[str] | None = None, strict: bool = False
) -> Selection:
    """The run's trajectories that the trainer can use as logged (see the module doc); garbage (a link
    out of the run's folder, an unreadable file, non-finite values, bad token ids) is skipped as
    `tapo_backend.load` says, or with `strict` refused, naming the file."""
    config_file = run_dir / "config.json"
    if not config_file.is_file():
        raise FinetuneError(f"{run_dir} is not an evolve run (no config.json); pass --run RUN_ID")
    config = json.loads(config_file.read_text(encoding="utf-8"))
    # an allow-list: only the run's training tasks (its validation and test tasks stay held out, also
    # runs of tasks the config does not name)
    train = set(config.get("train", []))
    files, temperatures, skipped = [], set(), {}

    def skip(reason: str) -> None:
        skipped[reason] = skipped.get(reason, 0) + 1

    def garbage(file: Path, reason: str) -> None:
        if strict:
            raise FinetuneError(
                f"{file}: {reason} (--strict refuses the run's logs; drop it to skip such files)"
            )
        skip(reason)

    folder = run_dir / "trajectories"
    for file in sorted(folder.glob("*.json")):
        if link_outside(file, folder):
            garbage(file, OUTSIDE)
            continue
        try:
            traj = load_trajectory(json.loads(file.read_text(encoding="utf-8")))
        except (ValueError, OSError, RecursionError):
            garbage(file, "unreadable")
            continue
        if traj.task_id not in train:
            skip("held-out task (validation or test)")
        elif versions and traj.scaffold.version not in versions:
            skip("other scaffold version")
        elif traj.evaluation is None or traj.metadata.get("rollout_error"):
            skip("not evaluated")
        elif fault := trajectory_fault(traj):  # NaN rewards, bad log-probs or ids, oversized
            garbage(file, fault[0])
        elif not traj.steps or not all(s.token_ids and s.logprobs for s in traj.steps):
            skip("no token ids / log-probs logged")
        elif traj.model is None:
            skip("no model / sampling settings recorded")
        elif (
            not traj.model.sampling.get("post_sampling_probs")
            and traj.model.sampling.get("temperature", 1) != 1
        ):
            skip("log-probs are not the sampling distribution's")
        else:
            files.append(file)
            temperatures.add(float(traj.model.sampling.get("temperature", 1.0)))
    if not files:
        raise FinetuneError(f"no trainable trajectories in {run_dir / 'trajectories'}: skipped {skipped}")
    if len(temperatures) > 1:
        raise FinetuneError(
            f"the selected runs were sampled at different temperatures {sorted(temperatures)}"
        )
    return Selection(files, temperatures.pop(), skipped)


def _evaluate(
    policy: ServedPolicy, scaffold: Scaffold, domain: Domain, tasks: list[Task], seeds: list[int], out: Path,
    config: OnlineConfig, sandbox: Any,
) -> tuple[list[Trajectory], dict[str, Any]]:  # fmt: skip
    started = time.time()
    trajectories = run_rollouts(
        scaffold, domain, policy.server.info, tasks, seeds, out_dir=out, policy_index=policy.current.index,
        config=config, sandbox=sandbox,
    )  # fmt: skip
    score, ci = pass_at_1(trajectories)
    tokens = sum(t.totals.completion_tokens for t in trajectories)
    return trajectories, {
        "pass_at_1": score,
        "ci": ci,
        "tokens": tokens,
        "wall_s": round(time.time() - started, 1),
    }


def _per_task(trajectories: list[Trajectory]) -> dict[str, float]:
    scores: dict[str, list[float]] = {}
    for traj in trajectories:
        scores.setdefault(traj.task_id, []).append(float(bool(traj.evaluation and traj.evaluation.passed)))
    return {task: sum(v) / len(v) for task, v in scores.items()}


def train_config(
    run_dir: Path, temperature: float, settings: dict[str, Any], *, algo: str = "tapo", steps: int = 20,
    lr: float = LORA_LR, lora_r: int = 16, min_group_size: int = 2,
) -> Any:  # fmt: skip
    """The trainer's config of `finetune`: these arguments, under `settings` (TrainConfig names: a
    --config file's, with the options given on top), under the paths and the logs' temperature."""
    from tapo_backend.config import command_config

    defaults = {"algo": algo, "lr": lr, "max_steps": steps, "min_group_size": min_group_size,
                "lora": {"r": lora_r}}  # fmt: skip
    return command_config(
        defaults, settings, "recreate finetune", temperature=temperature,
        output_dir=str(run_dir / "finetune" / "train"), run_name="finetune",
    )  # fmt: skip


def finetune(
    *,
    run_dir: Path,
    home: Path,
    scaffold: Scaffold,
    domain: Domain,
    val_tasks: list[Task],
    algo: str = "tapo",
    steps: int = 20,
    lr: float = LORA_LR,
    lora_r: int = 16,
    min_group_size: int = 2,
    val_seeds: int = 2,
    versions: set[str] | None = None,
    sandbox: Any = "bwrap",
    log=print,
    strict: bool = False,
    train_settings: dict[str, Any] | None = None,
) -> FinetuneReport:
    """`train_settings`: TrainConfig settings over the arguments (a --config file's, see `train_config`)."""
    from tapo_backend.trainer import train

    sandbox = resolve_sandbox(sandbox)
    selection = select_trajectories(run_dir, versions=versions, strict=strict)
    count, temperature = len(selection.files), selection.temperature
    log(f"selected {count} trajectories (T={temperature}); skipped {selection.skipped}")
    work = run_dir / "finetune"
    batch = work / "data"
    batch.mkdir(parents=True, exist_ok=True)
    for file in selection.files:
        if not (batch / file.name).exists():
            os.link(file, batch / file.name)
    config = OnlineConfig(concurrency=4)
    seeds = list(range(20_000, 20_000 + val_seeds))
    with ServedPolicy(home, work / "policy", parallel=config.concurrency) as policy:
        parent = policy.current.name
        base_runs, base = _evaluate(
            policy, scaffold, domain, val_tasks, seeds, work / "eval-base", config, sandbox
        )
        log(f"{parent} (before training): val pass@1 {base['pass_at_1']:.3f}")
        config_ = train_config(
            run_dir, selection.temperature, train_settings or {}, algo=algo, steps=steps, lr=lr,
            lora_r=lora_r, min_group_size=min_group_size,
        )  # fmt: skip
        shutil.rmtree(work / "train", ignore_errors=True)  # an earlier attempt's: its metrics are not these
        started = time.time()
        result = train(config_, batch, str(policy.current.hf_dir))
        train_s = time.time() - started
        version = policy.publish(result.final_dir)
        tuned_runs, tuned = _evaluate(
            policy, scaffold, domain, val_tasks, seeds, work / "eval-tuned", config, sandbox
        )
    before, after = _per_task(base_runs), _per_task(tuned_runs)
    diffs = [after[t] - before[t] for t in sorted(set(before) & set(after))]
    metrics_rows = [json.loads(x) for x in result.metrics_path.read_text(encoding="utf-8").splitlines() if x]
    report = FinetuneReport(
        run_id=run_dir.name, selected=len(selection.files), temperature=selection.temperature,
        policy=version.name, parent=parent, base=base, tuned=tuned,
        difference=sum(diffs) / len(diffs) if diffs else 0.0, difference_ci=bootstrap_ci(diffs),
        tasks=len(diffs), train_s=round(train_s, 1),
        train_metrics=_floats(metrics_rows[-1] if metrics_rows else {}),
        skipped=selection.skipped,
    )  # fmt: skip
    (work / "report.json").write_text(json.dumps(asdict(report), indent=1), encoding="utf-8")
    return report


def _floats(row: dict[str, Any]) -> dict[str, float]:
    return {k: v for k, v in row.items() if isinstance(v, float)}
