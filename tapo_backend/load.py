"""Reading logged trajectories for training, and refusing the ones that are garbage.

Logs are input from outside (an endpoint, a user, an agent's own run folder): every file is checked
before any of it reaches a tensor. A bad file is skipped and named with its reason; the reasons fall in
a few kinds (`Skipped.kind`) that the dataset summary counts; `strict` turns any skip into an error.

A trajectory is refused when its reward is not a finite number of sane size, a logged log-prob is not
finite or is positive (beyond `LOGPROB_TOLERANCE`, which endpoints' rounding can produce), a token id
is negative or outside the tokenizer's vocabulary, it holds more logged tokens or text than any real
run produces, or its file is a link that leads out of the folder being read (or no regular file).
No torch here: `recreate finetune` selects a run's trajectories with the same checks.
"""

from __future__ import annotations

import codecs
import json
import math
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.experience.schema import SchemaError, Trajectory, load_trajectory
from tapo_backend.logged import DataError

LOGPROB_TOLERANCE = 1e-3  # a logged log-prob in (0, this] is rounding and read as 0; above it, garbage
MAX_LOGGED_TOKENS = 262_144  # logged token ids in one trajectory (no endpoint generates more per run)
MAX_TEXT_CHARS = 8 * 2**20  # characters of message text in one trajectory
MAX_FILE_BYTES = 2**30  # one log file (a JSONL shard holds many trajectories)
MAX_ABS_REWARD = 1e6  # larger rewards overflow the group statistics (and are no evaluation's score)

# Skipped.kind values, in the order the summary lists them
UNREADABLE = "unreadable"
NOT_A_TRAJECTORY = "not a trajectory"
INVALID = "invalid trajectory"
NO_REWARD = "no evaluation"
DUPLICATE = "duplicate id"
OUTSIDE = "link outside the logs"
BAD_REWARD = "bad reward"
BAD_LOGPROB = "bad logprob"
BAD_TOKEN = "token id outside the vocabulary"
OVERSIZED = "oversized"
UNTOKENIZABLE = "untokenizable"


@dataclass
class Skipped:
    source: str  # file path, or "path:line" for JSONL
    reason: str
    kind: str  # what class of fault (the summary counts skips by kind)


@dataclass
class Logged:
    source: str  # the file (and line) it came from, named when it is skipped later
    trajectory: Trajectory


def trajectory_fault(traj: Trajectory, vocab_size: int | None = None) -> tuple[str, str] | None:
    """(kind, reason) of the first thing that makes `traj` unfit to train on, or None."""
    if traj.evaluation is None:
        return NO_REWARD, "no evaluation (reward unknown)"
    score = traj.evaluation.score
    if not math.isfinite(score) or abs(score) > MAX_ABS_REWARD:
        return (
            BAD_REWARD,
            f"reward (evaluation.score) is {score}; it must be a finite number within ±{MAX_ABS_REWARD:g}",
        )
    text = sum(len(str(m.get("content") or "")) for m in traj.messages)
    if text > MAX_TEXT_CHARS:
        return OVERSIZED, f"{text} characters of message text, more than {MAX_TEXT_CHARS}"
    logged = sum(len(s.token_ids or ()) for s in traj.steps)
    if logged > MAX_LOGGED_TOKENS:
        return OVERSIZED, f"{logged} logged token ids, more than the {MAX_LOGGED_TOKENS} one run may hold"
    for step in traj.steps:
        for token in step.token_ids or ():
            if token < 0 or (vocab_size is not None and token >= vocab_size):
                limit = f"[0, {vocab_size})" if vocab_size is not None else "non-negative ids"
                return BAD_TOKEN, f"step {step.index}: token id {token} is outside the vocabulary ({limit})"
        for value in step.logprobs or ():
            if not math.isfinite(value) or value > LOGPROB_TOLERANCE:
                return BAD_LOGPROB, (
                    f"step {step.index}: logprob {value} is not a log-probability (finite and <= 0)"
                )
    return None


def link_outside(file: Path, root: Path) -> bool:
    """`file` (found under `root`) is, or lies under, a symbolic link that leads out of `root`."""
    return not file.resolve().is_relative_to(root.resolve())


def _files(path: Path) -> list[Path]:
    if path.is_file():
        return [path]
    return sorted([*path.rglob("*.json"), *path.rglob("*.jsonl")])


def _documents(file: Path) -> Iterator[tuple[str, Any]]:
    """(source, parsed JSON or an exception) for each document in a file; never raises. A JSONL file is
    decoded line by line (a bad byte costs its line only), split at newlines only (a string may hold
    U+2028, where splitlines() splits); a leading byte-order mark is dropped."""
    try:
        data = file.read_bytes().removeprefix(codecs.BOM_UTF8)
    except OSError as exc:
        yield str(file), exc
        return
    lines = enumerate(data.split(b"\n"), 1) if file.suffix == ".jsonl" else [(0, data)]
    for number, raw in lines:
        source = f"{file}:{number}" if number else str(file)
        if not raw.strip():
            continue
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            yield source, exc
            continue
        yield from _parse(source, text)


def _parse(source: str, text: str) -> Iterator[tuple[str, Any]]:
    try:
        doc = json.loads(text)
    except (json.JSONDecodeError, RecursionError) as exc:  # RecursionError: nested too deep
        yield source, exc
        return
    if isinstance(doc, list):
        for i, item in enumerate(doc):
            yield f"{source}[{i}]", item
    else:
        yield source, doc


def read_logs(path: str | Path, vocab_size: int | None = None) -> tuple[list[Logged], list[Skipped]]:
    """Every trajectory under `path` (a file, a directory tree, an experience store) fit to train on,
    with where it came from, and what was skipped and why."""
    path = Path(path)
    if not path.exists():
        raise DataError(f"no such file or directory: {path}")
    kept: list[Logged] = []
    skipped: list[Skipped] = []
    seen: set[str] = set()
    for file in _files(path):
        if path.is_dir() and link_outside(file, path):
            skipped.append(Skipped(str(file), f"a link to {file.resolve()}, outside {path}", OUTSIDE))
            continue
        if not file.is_file():  # a FIFO or device would block or never end
            skipped.append(Skipped(str(file), "not a regular file", UNREADABLE))
            continue
        if file.stat().st_size > MAX_FILE_BYTES:
            reason = f"{file.stat().st_size} bytes, more than the {MAX_FILE_BYTES} a log file may hold"
            skipped.append(Skipped(str(file), reason, OVERSIZED))
            continue
        for source, doc in _documents(file):
            if isinstance(doc, Exception):
                skipped.append(Skipped(source, f"unreadable: {type(doc).__name__}: {doc}", UNREADABLE))
                continue
            if not isinstance(doc, dict) or "task_id" not in doc or "messages" not in doc:
                skipped.append(Skipped(source, "not a trajectory", NOT_A_TRAJECTORY))
                continue
            try:
                traj = load_trajectory(doc)
            except SchemaError as exc:
                reason = f"invalid trajectory: {' '.join(str(exc).split())[:300]}"
                skipped.append(Skipped(source, reason, INVALID))
                continue
            fault = trajectory_fault(traj, vocab_size)
            if fault is not None:
                skipped.append(Skipped(source, fault[1], fault[0]))
            elif traj.trajectory_id in seen:
                skipped.append(Skipped(source, f"duplicate trajectory id {traj.trajectory_id}", DUPLICATE))
            else:
                seen.add(traj.trajectory_id)
                kept.append(Logged(source, traj))
    return kept, skipped


def load_trajectories(
    path: str | Path, vocab_size: int | None = None
) -> tuple[list[Trajectory], list[Skipped]]:
    """The trajectories `read_logs` keeps, without their sources."""
    kept, skipped = read_logs(path, vocab_size)
    return [logged.trajectory for logged in kept], skipped


def refuse(skipped: list[Skipped]) -> None:
    """`strict`: any skipped file is an error naming it and its reason."""
    if skipped:
        first = skipped[0]
        more = f" (and {len(skipped) - 1} more)" if len(skipped) > 1 else ""
        raise DataError(
            f"{first.source}: {first.reason}{more}; --strict refuses bad logs: fix or remove them, "
            "or drop --strict to skip them"
        )
