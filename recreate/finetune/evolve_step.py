"""Fine-tuning inside the evolve loop (`recreate evolve --finetune-every K`): every K rounds the model
under the agent is trained on the run's own experience, and the new policy version faces a gate.

One step, after the scaffold gate of every K-th round:
1. sample: `group_size` runs of the current scaffold (HEAD) on each training task of the last K rounds'
   batches, with the current policy version (fresh seeds; stored as the run's experience like any rollout,
   counted against the run's rollout budget). Training tasks only: held-out tasks never reach the trainer;
2. train: `tapo_backend` (LoRA) on those runs, grouped by task, at the temperature they were sampled at;
   a step whose groups all have equal rewards has nothing to learn and keeps the model;
3. publish the adapter as a candidate policy version (served at once);
4. gate: HEAD on the validation split with the current and the candidate model, same fresh seeds; the
   same paired bootstrap rule as the scaffold gate. Accepted: later rounds sample from the new version.
   Rejected: the candidate is discarded and the previous version served again.

A step re-run after a kill reuses the adapter it trained (the training output is per round) and the
rollouts it cached; the served policy is first rolled back to the version the checkpoint accepted.
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from recreate import progress
from recreate.domains.base import Task
from recreate.evaluation.stats import paired_gate
from recreate.experience.schema import Trajectory
from recreate.finetune.online import mean_metrics
from recreate.finetune.policy import LORA_LR, ServedPolicy
from recreate.local import LOCAL_TEMPERATURE
from recreate.scaffold import Scaffold, ScaffoldStore

EvolveState = Mapping[str, Any]  # the loop's state: round, current (HEAD's ref), model, results


class GatedConfig(Protocol):
    min_improvement: float
    gate_alpha: float


class EvolveLoop(Protocol):
    """What the step uses of the evolve loop (`recreate.optimizer.loop.EvolveLoop`, one floor up)."""

    scaffolds: ScaffoldStore
    valset: list[Task]
    held_out: frozenset[str]
    tasks: dict[str, Task]
    run_dir: Path
    config: GatedConfig

    def seed_of(self, *parts: object) -> int: ...

    def run_all(self, jobs: list[tuple[Scaffold, Task, int]]) -> list[Trajectory]: ...

    def evaluate(
        self, scaffold: Scaffold, gate_round: tuple[str, int], *, runs: int | None = None
    ) -> tuple[dict[str, float], list[str]]: ...


@dataclass
class FinetuneSettings:
    every: int  # rounds of scaffold evolution between two fine-tuning steps
    algo: str = "tapo"
    steps: int = 8  # optimizer steps per fine-tuning step
    lr: float = LORA_LR
    lora_r: int = 16
    group_size: int = 4  # runs per training task, the groups of the group-relative advantage
    max_length: int = 1024
    # validation runs per task at the model gate: a candidate model changes every sampled token, so one
    # run per task left the decision to one lucky or unlucky re-score of the parent (22 tasks: 0.68 one
    # time, 0.86 another); 3 runs per task third the variance of each task's mean
    val_seeds: int = 3
    train: dict[str, Any] = field(default_factory=dict)  # TrainConfig settings over these (--finetune-config)


class FinetuneStep:
    """The loop's `finetune` node; owns the served policy the agents sample from."""

    def __init__(self, policy: ServedPolicy, settings: FinetuneSettings):
        self.policy, self.settings = policy, settings

    @property
    def model_name(self) -> str:
        return self.policy.current.name

    def due(self, state: EvolveState) -> bool:
        return state["round"] % self.settings.every == 0

    def __call__(self, loop: EvolveLoop, state: EvolveState) -> dict[str, Any]:
        rnd, head = state["round"], state["current"]
        self.policy.rollback(state.get("model") or self.policy.versions[0].name)
        parent = self.policy.current.name
        entry: dict[str, Any] = {"round": rnd, "scaffold": head, "parent": parent, "accepted": False}
        scaffold = loop.scaffolds.load(head)
        recent = range(rnd - self.settings.every, rnd)
        held_out = {t.id for t in loop.valset} | loop.held_out  # also with --allow-train-as-val
        ran = {r["task_id"] for r in state.get("results", []) if r["round"] in recent}
        task_ids = sorted(ran - held_out)
        jobs = [(loop.tasks[t], g) for t in task_ids for g in range(self.settings.group_size)]
        progress.finetune_sampling(rnd, len(task_ids), self.settings.group_size)
        runs = loop.run_all([(scaffold, task, loop.seed_of("finetune", rnd, task.id, g)) for task, g in jobs])
        work = loop.run_dir / "finetune" / f"round-{rnd:03d}"
        data = work / "data"
        data.mkdir(parents=True, exist_ok=True)
        scored = [t for t in runs if t.evaluation is not None and not t.metadata.get("rollout_error")]
        for traj in scored:
            traj.save(data / f"{traj.trajectory_id}.json")
        entry["trajectories"] = len(scored)
        if scored:
            entry["reward_mean"] = round(sum(t.evaluation.score for t in scored) / len(scored), 4)
        adapter, metrics, reason = self._train(data, work, rnd)
        entry["train"] = metrics
        if adapter is None:
            entry["reason"] = reason
            return {"models": [entry], "model": parent}
        runs = self.settings.val_seeds
        before, errors_before = loop.evaluate(scaffold, ("finetune", rnd), runs=runs)
        candidate = self.policy.publish(adapter, candidate=True)
        try:
            after, errors_after = loop.evaluate(scaffold, ("finetune", rnd), runs=runs)
        except BaseException:  # a budget stop or a failure: never leave an ungated version served
            self.policy.rollback(parent)
            raise
        verdict = paired_gate(
            before, after, min_improvement=loop.config.min_improvement,
            seed=loop.seed_of("finetune-gate", rnd), asked=len(loop.valset) * runs,
            alpha=loop.config.gate_alpha,
        )  # fmt: skip
        entry |= {
            "model": candidate.name, "val": after, "parent_val": before, "accepted": verdict.accepted,
            "reason": verdict.reason, "gate": verdict.to_dict(),
            "errors": [f"validation run of {parent} {e}" for e in errors_before]
            + [f"validation run of {candidate.name} {e}" for e in errors_after],
        }  # fmt: skip
        if not verdict.accepted:
            self.policy.rollback(parent)
            return {"models": [entry], "model": parent}
        self.policy.accept()
        return {"models": [entry], "model": candidate.name}

    def _train(self, data: Path, work: Path, rnd: int) -> tuple[Path | None, dict[str, float], str]:
        """(adapter dir or None, mean training metrics, why nothing was trained)."""
        from transformers.utils import logging as hf_logging

        from tapo_backend.data import dataset_for
        from tapo_backend.trainer import load_tokenizer, train

        hf_logging.disable_progress_bar()  # weight-loading bars at every step: the loop says what it does
        s, out = self.settings, work / "train"
        if (out / "final" / "adapter_config.json").is_file():  # trained before a kill
            return out / "final", mean_metrics(out / "metrics.jsonl"), ""
        shutil.rmtree(out, ignore_errors=True)  # a half-written attempt
        base = str(self.policy.current.hf_dir)
        config = train_config(s, out, work.name)
        dataset = dataset_for(config, data, load_tokenizer(base))
        if not dataset.examples:
            return None, {}, "no task had runs with different rewards: nothing to learn, model kept"
        progress.finetune_training(rnd, s.algo, s.steps, len(dataset.examples))
        started = time.time()
        result = train(config, data, base, dataset=dataset)
        # the checkpoints (optimizer state, ~0.5 GB for the 135M model) only resume a killed training;
        # with the adapter written, a kill returns it above
        shutil.rmtree(result.output_dir / "checkpoints", ignore_errors=True)
        metrics = mean_metrics(result.metrics_path) | {"train_s": round(time.time() - started, 1)}
        return result.final_dir, metrics, ""


def finetune_settings(every: int, config: Path | None, options: dict[str, Any]) -> FinetuneSettings:
    """The step's settings: a --finetune-config file's (trainer) settings under the `options` given
    (None: not given), checked by the trainer now (its ConfigError, a ValueError), before any run."""
    from tapo_backend.config import settings_file

    train = settings_file(config)
    options = options | {
        "algo": options.get("algo") or train.pop("algo", None),
        "steps": options.get("steps") or train.pop("max_steps", None),
    }
    given = {k: v for k, v in options.items() if v is not None}
    settings = FinetuneSettings(every=every, train=train, **given)
    train_config(settings, Path("check"), "check")  # a config only: nothing is written
    return settings


def train_config(settings: FinetuneSettings, output_dir: Path, run_name: str) -> Any:
    """The trainer's config for one step (raises ConfigError for a bad algorithm or setting)."""
    from tapo_backend.config import command_config

    s = settings
    defaults = {"algo": s.algo, "lr": s.lr, "max_steps": s.steps, "lora": {"r": s.lora_r},
                "max_length": s.max_length}  # fmt: skip
    return command_config(  # `steps` steps, also when the runs fill fewer batches (epochs follow them)
        defaults, s.train, "evolve's fine-tuning step", temperature=LOCAL_TEMPERATURE,
        output_dir=str(output_dir), run_name=run_name,
    )  # fmt: skip
