"""One line per stage of the evolve loop, on the `recreate.progress` logger: `recreate evolve` prints
them (with the time), a library user attaches any logging handler. A resumed run says again what it
finds done, from its caches."""

from __future__ import annotations

import logging
from typing import Any

from recreate.experience.schema import Trajectory

log = logging.getLogger("recreate.progress")


def _mean(scores: dict[str, float]) -> str:
    return f"{sum(scores.values()) / len(scores):.3f}" if scores else "n/a"


def warn(message: str) -> None:
    log.warning("warning: %s", message)


def validating(ref: str, tasks: int, seeds: int) -> None:
    runs = f"{tasks} tasks" + (f" x {seeds} seeds" if seeds > 1 else "")
    log.info("validating %s on %s", ref, runs)


def validated(ref: str, scores: dict[str, float], errors: list[str], seconds: float) -> None:
    failed = f", {len(errors)} endpoint errors (no score)" if errors else ""
    log.info(
        "%s: validation mean %s over %d runs%s (%.0f s)", ref, _mean(scores), len(scores), failed, seconds
    )


def round_started(rnd: int, rounds: int, ref: str, batch: list[str]) -> None:
    log.info(
        "round %d/%d: %s runs %d training tasks, then reflects on each run", rnd + 1, rounds, ref, len(batch)
    )


def task_done(rnd: int, traj: Trajectory, proposal: dict[str, Any]) -> None:
    score = f"score {traj.evaluation.score:g}" if traj.evaluation else "no score"
    ops = len(proposal.get("ops", []))
    said = proposal["status"] + (f", {ops} ops" if ops else "")
    if proposal["status"] == "empty" and proposal.get("diagnosis"):  # a stated "no change"
        said = f"no change ({proposal['diagnosis'][:80]})"
    log.info(
        "round %d: task %s: %s (%s, %d steps); proposal %s",
        rnd + 1,
        traj.task_id,
        score,
        traj.outcome.exit_status,
        traj.totals.steps,
        said,
    )


def synthesized(rnd: int, proposals: int, patch: dict[str, Any]) -> None:
    ops = len(patch.get("ops", []))
    log.info(
        "round %d: %d proposals synthesized into a patch: %s, %d ops",
        rnd + 1,
        proposals,
        patch["status"],
        ops,
    )


def _verdict(entry: dict[str, Any]) -> str:
    """'accepted: <why>' or 'rejected: <why>' (the gate's reasons mostly start with the word already)."""
    verdict, reason = ("accepted" if entry["accepted"] else "rejected"), entry.get("reason", "")
    return reason if reason.startswith(verdict) else f"{verdict}: {reason}"


def decided(rnd: int, entry: dict[str, Any]) -> None:
    said = (
        f"{entry['ref']} {_verdict(entry)}"
        if entry.get("ref")
        else f"no candidate: {entry.get('reason', '')}"
    )
    errors = len(entry.get("errors") or [])
    noted = f" ({errors} errors this round: failed reflections or runs, see the report)" if errors else ""
    log.info("round %d: %s%s", rnd + 1, said, noted)


def finetuning(rnd: int, model: str, every: int) -> None:
    rounds = f"round {rnd}" if every == 1 else f"rounds {rnd - every + 1}-{rnd}"
    log.info("round %d: fine-tuning %s on the training tasks of %s", rnd, model, rounds)


def finetune_sampling(rnd: int, tasks: int, group: int) -> None:
    log.info("round %d: fine-tuning: %d runs to train on (%d tasks × %d)", rnd, tasks * group, tasks, group)


def finetune_training(rnd: int, algo: str, steps: int, runs: int) -> None:
    log.info("round %d: fine-tuning: training %s for %d steps on %d runs", rnd, algo, steps, runs)


def finetuned(rnd: int, entry: dict[str, Any]) -> None:
    reward = entry.get("reward_mean")
    runs = f"{entry.get('trajectories', 0)} runs" + (
        f", mean reward {reward:g}" if reward is not None else ""
    )
    if "model" not in entry:
        said = f"nothing trained, {entry['parent']} stays: {entry.get('reason', '')}"
    else:
        stays = "" if entry["accepted"] else f" ({entry['parent']} stays)"
        said = f"{entry['model']} {_verdict(entry)}{stays}"
    log.info("round %d: fine-tuning (%s): %s", rnd, runs, said)


def testing(tasks: int, seeds: int) -> None:
    log.info("final test: the seed pair and the final pair on %d test tasks x %d seeds", tasks, seeds)


def test_line(test: dict[str, Any]) -> str:
    """'seed 0.643 [0.50, 0.79] -> final 0.857 [0.75, 0.96]: +0.214 [+0.07, +0.36] (n=28)'."""
    s, f, d = test["seed"], test["final"], test["difference"]
    return (
        f"seed {s['mean']:.3f} [{s['low']:.2f}, {s['high']:.2f}] -> final {f['mean']:.3f} "
        f"[{f['low']:.2f}, {f['high']:.2f}]: {d['mean']:+.3f} [{d['low']:+.2f}, {d['high']:+.2f}] "
        f"(n={d['n']}, {d['better']} better, {d['worse']} worse)"
    )


def tested(test: dict[str, Any]) -> None:
    log.info(
        "final test pass@1 on %d test tasks x %d seeds: %s", test["tasks"], test["seeds"], test_line(test)
    )
