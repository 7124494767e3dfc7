"""Finished held-out runs of the closed-loop benchmark, kept beside its results and committed with them.

One stale run takes 25-60 min on 2 cores and a full table many hours: more than one sitting, and run
folders do not outlive a machine. Each finished run is written to
`<results>/runs/k{lag}/{variant}-lr{lr}/seed-{seed}.json` with the settings that determine it, its metric
rows and its per-task held-out scores. A later invocation with the same `--results` takes a run from there
instead of running it again, so a table fills over several sittings (or machines), and every summary is
computed from the recorded per-task scores alone. A record made with other settings is refused, never
mixed in.
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path
from typing import Any

from benchmarks.closed_loop_tasks import ALL_VARIANTS, TRAIN_ALGO

# the options that decide what one run does (the rest choose which runs to do or where files go)
RUN_OPTIONS = (
    "wording", "train_tasks", "val_tasks", "tasks_per_iteration", "group_size", "steps", "eval_seeds",
    "reply_tokens",
)  # fmt: skip


def run_settings(
    args: argparse.Namespace, variant: str, lr: float, seed: int, iterations: int, lag: int
) -> dict[str, Any]:
    """Everything that determines one held-out run's result, as it reads back from JSON."""
    settings = {key: getattr(args, key) for key in RUN_OPTIONS}
    settings.update(
        variant=variant, loss=ALL_VARIANTS[variant], train_algo=TRAIN_ALGO, lr=lr, seed=seed,
        iterations=iterations, lag=lag,
    )  # fmt: skip
    return json.loads(json.dumps(settings))


def record_path(results: Path, lag: int, variant: str, lr: float, seed: int) -> Path:
    return results / "runs" / f"k{lag}" / f"{variant}-lr{lr:g}" / f"seed-{seed}.json"


def load(file: Path, settings: dict[str, Any], val_ids: list[str]) -> dict[str, Any] | None:
    """The recorded run of these settings, or None when there is none yet."""
    if not file.is_file():
        return None
    try:
        record = json.loads(file.read_text(encoding="utf-8"))
        recorded, scores = record["settings"], record["scores"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise SystemExit(f"{file}: not a run record ({exc!r}); delete it to run that run again") from None
    if recorded != settings:
        keys = sorted(k for k in settings.keys() | recorded.keys() if settings.get(k) != recorded.get(k))
        raise SystemExit(
            f"{file}: recorded with other settings ({', '.join(keys)}); "
            "use another --results folder, or delete the record to run it again with these"
        )
    if record.get("val_ids") != val_ids or any(len(row) != len(val_ids) for row in scores):
        raise SystemExit(f"{file}: its held-out tasks are not this benchmark's; delete it to run it again")
    if len(scores) != settings["iterations"] + 1:
        raise SystemExit(f"{file}: {len(scores)} score rows for {settings['iterations']} iterations")
    return record


def save(file: Path, record: dict[str, Any]) -> None:
    """Written whole or not at all (a kill mid-write leaves the previous state)."""
    file.parent.mkdir(parents=True, exist_ok=True)
    part = file.with_name(file.name + ".part")
    part.write_text(json.dumps(record, indent=1), encoding="utf-8")
    os.replace(part, file)


def without_scores(record: dict[str, Any]) -> dict[str, Any]:
    """A record as the results file lists it (the per-task grid stays in the record)."""
    return {k: v for k, v in record.items() if k not in ("settings", "scores", "val_ids")}
