"""The online loop's training batches: who samples which, and which rollouts an iteration trains on.

Iteration i trains on rollouts/it-<i> (the tasks and seeds `tasks_of_iteration` gives it): sampled by
itself on-policy, or with `lag` k by iteration i - k, the policy k versions back (the first iteration
samples 1..k + 1). With `max_staleness` an iteration also replays earlier rollouts that many versions
back. Each rollouts folder gets a SAMPLED mark (which iteration, which policy) once complete.
"""

from __future__ import annotations

import json
import os
import random
from pathlib import Path
from typing import TYPE_CHECKING, Any

from recreate.domains.base import Domain, Task
from recreate.experience.schema import Trajectory
from recreate.local import ServerInfo, local_agent_options
from recreate.scaffold import Scaffold

if TYPE_CHECKING:
    from recreate.finetune.online import OnlineConfig

SAMPLED = "SAMPLED"  # in a rollouts folder: every rollout of it was written (which iteration, which policy)


def run_rollouts(
    scaffold: Scaffold,
    domain: Domain,
    server: ServerInfo,
    tasks: list[Task],
    seeds: list[int],
    *,
    out_dir: Path,
    policy_index: int,
    config: OnlineConfig,
    sandbox: Any,
) -> list[Trajectory]:
    """Evaluated rollouts of every (task, seed), saved under `out_dir` with their policy version."""
    from recreate.evaluation import Rollouts

    options = {**local_agent_options(server), "max_tokens": config.max_reply_tokens}
    runner = Rollouts(
        scaffold, domain, model=server.spec, sandbox=sandbox, cache=False, trajectory_dir=out_dir / "raw",
        run_id=out_dir.name, **options,
    )  # fmt: skip
    trajectories = runner.run_many(tasks, seeds=seeds, concurrency=config.concurrency, progress=False)
    out_dir.mkdir(parents=True, exist_ok=True)
    for traj in trajectories:
        traj.metadata["policy_version"] = policy_index
        traj.save(out_dir / f"{traj.trajectory_id}.json")
    return trajectories


def sample_for(
    j: int,
    run_dir: Path,
    scaffold: Scaffold,
    domain: Domain,
    server: ServerInfo,
    train_tasks: list[Task],
    policy_index: int,
    config: OnlineConfig,
    sandbox: Any,
    iteration: int,
) -> list[Trajectory]:
    """The training rollouts of iteration `j` (its tasks and seeds), sampled now by `policy_index`, and
    the mark that they are complete."""
    tasks = tasks_of_iteration(train_tasks, config.seed, j, config.tasks_per_iteration)
    seeds = [config.seed * 100_000 + j * 1000 + g for g in range(config.group_size)]
    out = run_dir / "rollouts" / f"it-{j:03d}"
    done = run_rollouts(
        scaffold, domain, server, tasks, seeds, out_dir=out, policy_index=policy_index, config=config,
        sandbox=sandbox,
    )  # fmt: skip
    mark = {"sampled_at": iteration, "policy_version": policy_index}
    (out / SAMPLED).write_text(json.dumps(mark), encoding="utf-8")
    return done


def tasks_of_iteration(tasks: list[Task], seed: int, iteration: int, count: int) -> list[Task]:
    """The `count` training tasks of `iteration` (>= 1): the order after `iteration` shuffles of one
    seeded generator, so a resumed run samples what the uninterrupted one would have."""
    rng, order = random.Random(seed), list(tasks)
    for _ in range(iteration):
        rng.shuffle(order)
    return (order * count)[:count]


def to_sample(run_dir: Path, iteration: int, config: OnlineConfig) -> list[int]:
    """The iterations whose training rollouts (rollouts/it-<j>) `iteration` samples: its own; with a lag
    k, every one up to k ahead not sampled by an earlier iteration (the first samples 1..k + 1, each
    later one i + k, a run given more iterations what it lacks). A restarted iteration samples its
    part again: a folder it began is cut short or comes from an attempt whose files are not trained on."""
    last = min(iteration + config.lag, config.iterations)
    return [j for j in range(iteration, last + 1) if not _sampled_before(run_dir, j, iteration)]


def _sampled_before(run_dir: Path, j: int, iteration: int) -> bool:
    try:
        mark = json.loads((run_dir / "rollouts" / f"it-{j:03d}" / SAMPLED).read_text(encoding="utf-8"))
        return int(mark["sampled_at"]) < iteration
    except (OSError, ValueError, KeyError, TypeError):
        return False


def replay_batch(
    run_dir: Path, iteration: int, current_version: int, max_staleness: int, lag: int = 0
) -> Path:
    """Hard-links of the trajectories to train on, in one folder for the dataset loader. `lag` k > 0:
    only those sampled for this iteration (k iterations ago); else those at most `max_staleness`
    versions behind."""
    if lag and max_staleness:
        raise ValueError("online training takes either lag or max_staleness, not both")
    batch = run_dir / "batches" / f"it-{iteration:03d}"
    batch.mkdir(parents=True, exist_ok=True)
    pattern = f"it-{iteration:03d}/*.json" if lag else "it-*/*.json"
    for file in sorted((run_dir / "rollouts").glob(pattern)):
        if file.is_symlink() or not file.is_file():  # the loop writes plain files; a link is not one of them
            continue
        version = json.loads(file.read_text(encoding="utf-8"))["metadata"].get("policy_version", -1)
        if lag or current_version - version <= max_staleness:
            target = batch / file.name
            if not target.exists():
                os.link(file, target)
    return batch


def versions_behind(batch: Path, current_version: int) -> float | None:
    """Mean policy versions between the rollouts in `batch` and `current_version` (None: no rollouts)."""
    versions = [
        json.loads(f.read_text(encoding="utf-8"))["metadata"]["policy_version"] for f in batch.glob("*.json")
    ]
    return current_version - sum(versions) / len(versions) if versions else None
