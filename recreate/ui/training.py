"""TAPO/GRPO training runs: the trainer's `metrics.jsonl` (one row per optimizer step) and online
fine-tuning's (one row per iteration), found where `tapo train`, `recreate finetune` and online training
put them under the home."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.jsonl import read_jsonl
from recreate.ui.runs import RunSummary, read_json, status_of

# `tapo train`, `recreate finetune`, the fine-tuning steps of `recreate evolve --finetune-every`, online
_PATTERNS = (
    "tapo/*/metrics.jsonl",
    "runs/*/finetune/train/metrics.jsonl",
    "runs/*/finetune/round-*/train/metrics.jsonl",
    "runs/*/metrics.jsonl",
)
# The panels of the training page, in order: (title, metric-name prefixes); the rest go under "other".
PANELS = (
    ("loss", ("loss",)),
    ("reward", ("reward", "val_pass_at_1")),
    ("KL", ("kl",)),
    ("clip fraction by position bin", ("clip_frac/pos_",)),
    ("clip fractions", ("clip_frac", "dual_clip_frac")),
    ("ratio quantiles", ("ratio_q",)),
    ("sigma (state-distribution correction, log)", ("sigma_mean",)),
    ("behaviour vs trainer log-prob mismatch", ("logprob_mismatch",)),
)
_X_KEYS = ("step", "iteration")


def training_dirs(home: Path) -> list[Path]:
    return sorted({p.parent for pattern in _PATTERNS for p in home.glob(pattern)})


def run_id(home: Path, run_dir: Path) -> str:
    return run_dir.relative_to(home).as_posix()


def flat_rows(path: Path) -> list[dict[str, float]]:
    """Numeric fields of each row; online rows nest the trainer's means under `metrics`."""
    out = []
    for row in read_jsonl(path):
        flat: dict[str, float] = {}
        for key, value in row.items():
            if isinstance(value, dict):
                flat.update({f"metrics.{k}": v for k, v in value.items() if _number(v)})
            elif _number(value):
                flat[key] = float(value)
        out.append(flat)
    return out


def _number(value: Any) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


@dataclass
class Series:
    name: str
    xs: list[float]
    ys: list[float]


def panels(rows: list[dict[str, float]]) -> list[tuple[str, list[Series]]]:
    """The metrics grouped into the page's panels; each series is one metric over steps."""
    if not rows:
        return []
    x_key = next((k for k in _X_KEYS if k in rows[0]), None)
    names = list(dict.fromkeys(k for row in rows for k in row if k not in _X_KEYS))
    placed: set[str] = set()
    out = []
    for title, prefixes in PANELS:
        chosen = [n for n in names if n not in placed and any(_matches(n, p) for p in prefixes)]
        placed.update(chosen)
        if chosen:
            out.append((title, [_series(rows, name, x_key) for name in chosen]))
    return out + [(name, [_series(rows, name, x_key)]) for name in names if name not in placed]


def _matches(name: str, prefix: str) -> bool:
    return name.removeprefix("metrics.").startswith(prefix)


def _series(rows: list[dict[str, float]], name: str, x_key: str | None) -> Series:
    points = [(row.get(x_key, i) if x_key else i, row[name]) for i, row in enumerate(rows) if name in row]
    return Series(name, [float(x) for x, _ in points], [y for _, y in points])


def training_summary(home: Path, run_dir: Path) -> RunSummary:
    metrics = run_dir / "metrics.jsonl"
    config = read_json(run_dir / "train_config.json") or read_json(run_dir / "config.json") or {}
    rows = flat_rows(metrics)
    done = (run_dir / "final").is_dir() or (run_dir / "report.json").is_file()
    status = status_of(done, False, metrics.stat().st_mtime)
    last = rows[-1] if rows else {}
    reward = last.get("reward_mean", last.get("val_pass_at_1"))
    detail = f"{config.get('algo', '?')}, {len(rows)} row(s)"
    if run_dir.parent.name.startswith("round-"):  # a fine-tuning step of an evolve run
        rnd = run_dir.parent.name.removeprefix("round-").lstrip("0") or "0"
        detail += f"; fine-tuning step after round {rnd} of run {run_dir.parents[2].name}"
    return RunSummary(run_id(home, run_dir), "train", status, run_dir.stat().st_mtime, {}, reward, detail)
