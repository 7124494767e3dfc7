"""Evolve and eval runs as the UI shows them, read from `<home>/runs` and `<home>/evals` (never written).

A run's status is not a file of its own: it is read from what the run leaves behind. `result.json` is
written when `optimize` returns (with `stopped` set when the budget ran out); a run still writing its
ledger or checkpoints within the last `LIVE_WINDOW_S` seconds is running; one that stopped writing
without a result was killed or crashed."""

from __future__ import annotations

import json
import sqlite3
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recreate.jsonl import read_jsonl
from recreate.ui.pairs import best_pair

LIVE_WINDOW_S = 120.0
_USAGE_KEYS = ("calls", "prompt_tokens", "completion_tokens", "cost_usd")
# not the SQLite -wal/-shm files: a reader (this UI) touches those too
_ACTIVITY_FILES = ("ledger.jsonl", "spent.json", "checkpoints.sqlite")


@dataclass
class RunSummary:
    id: str
    kind: str  # "evolve" | "eval" | "train"
    status: str  # "running" | "stopped at budget" | "finished" | "failed"
    started: float | None  # epoch seconds
    spend: dict[str, float] = field(default_factory=dict)  # USD per role
    best: float | None = None  # best kept validation mean (evolve), mean score (eval), last reward (train)
    detail: str = ""  # the reason a run stopped, the seed, the domain
    best_of: str = ""  # what `best` measured: the pair (scaffold × model) and the gate that kept it

    def __post_init__(self) -> None:
        """The fields as the runs table shows them: a file whose values are not of their kind (a hand
        edit, an import) raises here, and the table shows that run as unreadable instead of failing."""
        self.spend = {str(role): float(usd or 0.0) for role, usd in self.spend.items()}
        self.best = None if self.best is None else float(self.best)
        self.started = None if self.started is None else float(self.started)
        self.detail, self.best_of = str(self.detail), str(self.best_of)

    @property
    def total_usd(self) -> float:
        return sum(self.spend.values())


def unreadable_summary(folder: Path, kind: str, run_id: str, exc: Exception) -> RunSummary:
    """The row of a run whose files do not read as a run (the table lists the others as usual)."""
    reason = f"{type(exc).__name__}: {exc}"
    return RunSummary(run_id, kind, "unreadable", _mtime(folder), detail=f"cannot be shown: {reason[:300]}")


def read_json(path: Path) -> dict[str, Any] | None:
    """The JSON object in the file, or None when it is absent, torn (a writer killed mid-way) or holds
    anything but an object (every file the UI reads is one)."""
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return doc if isinstance(doc, dict) else None


def mean(scores: dict[str, float] | None) -> float | None:
    return sum(scores.values()) / len(scores) if scores else None


def _mtime(path: Path) -> float | None:
    try:
        return path.stat().st_mtime
    except OSError:
        return None


def run_signature(run_dir: Path) -> tuple[tuple[int, int] | None, ...]:
    """(mtime, size) of each file a run's status and summary are read from: while it is the same, so
    are they (for a run that has its result; a live one's status also depends on the clock)."""
    out = []
    for name in ("config.json", "result.json", *_ACTIVITY_FILES):
        try:
            stat = (run_dir / name).stat()
            out.append((stat.st_mtime_ns, stat.st_size))
        except OSError:
            out.append(None)
    return tuple(out)


def status_of(done: bool, stopped: bool, last_write: float | None, now: float | None = None) -> str:
    if done:
        return "stopped at budget" if stopped else "finished"
    if last_write is not None and (now or time.time()) - last_write < LIVE_WINDOW_S:
        return "running"
    return "failed"


def checkpoint_state(run_dir: Path, live: bool) -> dict[str, Any]:
    """The loop's latest state from its SQLite checkpoints, opened read-only: what a running run has
    done so far (its history is written to result.json only at the end). A run that is not `live` has
    no writer: the file is opened immutable, so not even SQLite's -wal/-shm files appear beside it."""
    path = run_dir / "checkpoints.sqlite"
    if not path.is_file():
        return {}
    from langgraph.checkpoint.sqlite import SqliteSaver

    mode = "mode=ro" if live else "immutable=1"
    conn = sqlite3.connect(f"file:{path}?{mode}", uri=True, check_same_thread=False)
    try:
        found = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": run_dir.name}})
    except sqlite3.Error:
        return {}
    finally:
        conn.close()
    return dict(found.checkpoint.get("channel_values", {})) if found else {}


def ledger_usage(path: Path) -> dict[str, dict[str, float]]:
    """Calls, tokens and USD per role, summed from a run's ledger (what a running run has spent)."""
    usage: dict[str, dict[str, float]] = {}
    for row in read_jsonl(path) if path.is_file() else []:
        role = usage.setdefault(str(row.get("role", "?")), dict.fromkeys(_USAGE_KEYS, 0.0))
        role["calls"] += 1
        for key in _USAGE_KEYS[1:]:
            value = row.get(key)
            role[key] += value if isinstance(value, int | float) and not isinstance(value, bool) else 0
    return usage


@dataclass
class EvolveRun:
    """One evolve run: its config, its versions (history), per-task results and spend."""

    dir: Path
    config: dict[str, Any]
    result: dict[str, Any] | None
    status: str

    @classmethod
    def open(cls, run_dir: Path) -> EvolveRun:
        config = read_json(run_dir / "config.json") or {}
        result_file = run_dir / "result.json"
        result = read_json(result_file)
        activity = [t for t in (_mtime(run_dir / f) for f in _ACTIVITY_FILES) if t is not None]
        last = max(activity, default=None)
        done = result is not None and (last is None or (_mtime(result_file) or 0) >= last - 1.0)
        status = status_of(done, bool(result and result.get("stopped")), last)
        return cls(run_dir, config, result if done else None, status)

    @classmethod
    def of_result(cls, run_dir: Path, result: dict[str, Any]) -> EvolveRun:
        """The run as its result says, e.g. for the report written as `optimize` returns."""
        status = "stopped at budget" if result.get("stopped") else "finished"
        return cls(run_dir, read_json(run_dir / "config.json") or {}, result, status)

    @property
    def id(self) -> str:
        return self.dir.name

    def _state(self) -> dict[str, Any]:
        if self.result is not None:
            return self.result
        if not hasattr(self, "_live"):
            self._live = checkpoint_state(self.dir, self.status == "running")
        return self._live

    def _rows(self, key: str) -> list[dict[str, Any]]:
        """The state's list under `key`, its objects only (what a page can show of a damaged file)."""
        rows = self._state().get(key)
        return [row for row in rows if isinstance(row, dict)] if isinstance(rows, list) else []

    @property
    def history(self) -> list[dict[str, Any]]:
        return self._rows("history")

    @property
    def results(self) -> list[dict[str, Any]]:
        return self._rows("results")

    @property
    def models(self) -> list[dict[str, Any]]:
        """One entry per fine-tuning step (its model gate), none when the run does not fine-tune."""
        return self._rows("models")

    @property
    def final_scaffold(self) -> str | None:
        state = self._state()
        return state.get("final") or state.get("current")  # result.json / a running run's checkpoint

    @property
    def final_model(self) -> str | None:
        state = self._state()
        return state.get("final_model") or state.get("model")

    def usage(self) -> dict[str, dict[str, float]]:
        usage = (self.result or {}).get("usage")
        if isinstance(usage, dict) and usage:
            return {str(role): u for role, u in usage.items() if isinstance(u, dict)}
        return ledger_usage(self.dir / "ledger.jsonl")

    def spend(self) -> dict[str, float]:
        return {role: u.get("cost_usd") or 0.0 for role, u in self.usage().items()}

    def entry_of(self, ref: str) -> dict[str, Any] | None:
        return next((h for h in self.history if h.get("ref") == ref), None)

    def summary(self) -> RunSummary:
        started = _mtime(self.dir / "config.json")
        stopped = (self.result or {}).get("stopped") or ""
        detail = f"{self.config.get('seed_ref', '?')} on {self.config.get('domain', '?')}"
        best = best_pair(self.history, self.models) if self.result is not None else None
        best_of = (
            f"{best.scaffold} × {best.model or self.config.get('agent_model', '?')}, {best.source}"
            if best
            else ""
        )
        score = best.mean if best else None
        return RunSummary(
            self.id, "evolve", self.status, started, self.spend(), score, stopped or detail, best_of
        )


def eval_summary(out: Path) -> RunSummary:
    doc = read_json(out / "results.json") or {}
    summary = doc.get("summary") or {}
    status = status_of(bool(doc.get("complete")), False, _mtime(out / "results.json"))
    info = doc.get("run") or {}
    return RunSummary(
        out.name,
        "eval",
        status,
        _mtime(out),
        {"agent": summary.get("total_cost_usd") or 0.0},
        summary.get("mean_score"),
        doc.get("title") or f"{info.get('scaffold', '?')} on {info.get('domain', '?')}",
    )


def evolve_runs(home: Path) -> list[Path]:
    root = home / "runs"
    if not root.is_dir():
        return []
    return sorted(p for p in root.iterdir() if "seed_ref" in (read_json(p / "config.json") or {}))


def eval_runs(home: Path) -> list[Path]:
    root = home / "evals"
    return sorted(p for p in root.iterdir() if (p / "results.json").is_file()) if root.is_dir() else []
