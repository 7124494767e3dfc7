"""An evolve run as a Python object: what `optimize()` returns and what `load_run()` reads back.

    run = load_run("first")                  # a run id under RECREATE_HOME, or a run directory
    run.scaffold, run.model, run.test        # the final Scaffold, its model spec, the final test
    agent = create_domain_agent(run.scaffold, model=run.model)

A run directory holds `config.json` (what was asked), `checkpoints.sqlite` (the loop's LangGraph state:
the truth, also for a run killed half-way), `ledger.jsonl` (usage), `result.json`, `report/` and
`scaffold/` (the final version, exported) once `optimize()` returned.
"""

from __future__ import annotations

import contextlib
import json
import re
import sqlite3
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from recreate.errors import Arg, ArgumentError
from recreate.scaffold import Scaffold

UNFINISHED = "unfinished: the run stopped before its end (run it again with the same run_id to resume)"


class RunNotFound(ArgumentError):
    """No run by that id or at that path."""


class BadRunId(ArgumentError):
    """A run id that is not a plain name: it would put the run's files outside <home>/runs or evals."""


class BrokenRun(ArgumentError):
    """A run directory holding a file that cannot be read back (truncated, corrupted, edited by hand)."""

    def __init__(self, path: Path, what: str) -> None:
        super().__init__(f"{path} {' '.join(what.split())}: restore it from a backup, or start a new run")


RUN_ID = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,127}")
RUN_ARG = Arg("run_id", "'NAME'", "NAME", flag="--run")


def check_run_id(run_id: str, arg: Arg = RUN_ARG) -> str:
    """`run_id` when it is a plain name (a letter or digit, then up to 127 of letters, digits, '.', '_',
    '-'; so no '/' and no '..'): the one check every command and function that names a run directory makes."""
    if not isinstance(run_id, str) or not RUN_ID.fullmatch(run_id):
        raise BadRunId(
            f"run id {run_id!r} is not a plain name; pass {{run}} with letters, digits, '.', '_' or '-' "
            "(1 to 128 of them, the first a letter or digit; no '/' or '..')",
            run=arg,
        )
    return run_id


@dataclass
class EvolveResult:
    run_id: str
    run_dir: Path
    final: str | None  # "name@vN" of the last accepted version
    history: list[dict[str, Any]] = field(default_factory=list)  # one entry per version (v0, candidates)
    results: list[dict[str, Any]] = field(default_factory=list)  # one per (round, training task)
    stopped: str | None = None  # why the run stopped early (budget, a failed endpoint), None when finished
    models: list[dict[str, Any]] = field(default_factory=list)  # one per fine-tuning step (--finetune-every)
    final_model: str | None = None  # the accepted policy version, when the loop fine-tunes
    test: dict[str, Any] | None = None  # the final test: seed pair vs final pair (see optimizer.final_test)
    proposals: list[dict[str, Any]] = field(default_factory=list)  # every reflection, transcript included
    usage: dict[str, Any] = field(default_factory=dict)
    config: dict[str, Any] = field(default_factory=dict)  # the run's config.json
    report: Path | None = None  # report/report.html
    scaffold_dir: Path | None = None  # the final version, exported: a scaffold directory
    model: str | None = None  # the final agent model, as `create_domain_agent(model=...)` takes it
    weights: Path | None = None  # the final model's HF directory, when the run fine-tuned one
    scaffold: Scaffold | None = field(default=None, repr=False, compare=False)  # the final version

    @property
    def finished(self) -> bool:
        return self.stopped is None

    @property
    def rounds(self) -> list[dict[str, Any]]:
        """Per round: its number (from 1), its training runs with their proposals, and its gate (the
        candidate's history entry: accepted or not, why, the scores)."""
        gates = {h["round"]: h for h in self.history if h.get("round")}
        numbers = sorted(gates.keys() | {r["round"] + 1 for r in self.results})
        return [
            {
                "round": n,
                "tasks": [r for r in self.results if r["round"] + 1 == n],
                "gate": gates.get(n),
            }
            for n in numbers
        ]

    def to_json(self) -> dict[str, Any]:
        """What result.json holds: everything but the Scaffold object (the scaffold directory has it)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "scaffold"}
        return json.loads(json.dumps(data, default=str))


def result_from_state(
    state: dict[str, Any],
    *,
    run_id: str,
    run_dir: Path,
    stopped: str | None,
    usage: dict[str, Any],
    config: dict[str, Any],
) -> EvolveResult:
    """The result of a run from the loop's state (its last checkpoint)."""
    results = state.get("results", [])
    return EvolveResult(
        run_id=run_id,
        run_dir=run_dir,
        final=state.get("current"),
        history=state.get("history", []),
        results=[{k: v for k, v in r.items() if k != "proposal"} | _proposal_brief(r) for r in results],
        stopped=stopped,
        usage=usage,
        models=state.get("models", []),
        final_model=state.get("model"),
        test=state.get("test"),
        proposals=[
            {"round": r["round"] + 1, "task_id": r["task_id"]} | r["proposal"]
            for r in results
            if r.get("proposal")
        ],
        config=config,
    )


def final_model(run_dir: Path, config: dict[str, Any], version: str | None) -> tuple[str | None, Path | None]:
    """(model spec, HF weights) of a run's final agent model: `local:GGUF` and its HF directory when the
    run fine-tuned the local model and accepted a version, else the model the run was started with."""
    if "finetune" not in config:
        return config.get("agent_spec") or config.get("agent_model"), None
    versions = run_dir / "policy" / "versions.json"
    rows = read_json(versions, list) if versions.is_file() else []
    if not all(isinstance(r, dict) and {"name", "index"} <= r.keys() for r in rows):
        raise BrokenRun(versions, "is not a list of policy versions (objects with name and index)")
    row = next((r for r in rows if r["name"] == version), None)
    if row is None or not row["index"] or not row.get("gguf"):
        return "local", None  # the base model: the embedded one
    if not isinstance(row["gguf"], str) or not isinstance(row.get("hf_dir"), str):
        raise BrokenRun(versions, f"has version {version!r} without a gguf and hf_dir path")
    return f"local:{row['gguf']}", Path(row["hf_dir"])


def read_json(path: Path, kind: type[dict] | type[list]) -> Any:
    """A run file's JSON, which must be a `kind` (a BrokenRun naming the file otherwise)."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError, RecursionError) as exc:  # unreadable, not UTF-8 or not JSON, too deep
        raise BrokenRun(path, f"cannot be read as JSON ({exc})") from None
    if not isinstance(data, kind):
        raise BrokenRun(path, f"is not a JSON {'object' if kind is dict else 'list'}")
    return data


def checkpoint_state(run_dir: Path, run_id: str) -> dict[str, Any]:
    """The loop's state at its last checkpoint ({} when the run has none)."""
    from langgraph.checkpoint.sqlite import SqliteSaver

    path = run_dir / "checkpoints.sqlite"
    if not path.is_file():
        return {}
    try:
        with contextlib.closing(sqlite3.connect(path, check_same_thread=False)) as conn:
            found = SqliteSaver(conn).get_tuple({"configurable": {"thread_id": run_id}})
        return dict(found.checkpoint["channel_values"]) if found else {}
    except Exception as exc:  # not a database, or a checkpoint its decoder cannot read: whatever it raises
        raise BrokenRun(
            path, f"cannot be read as the run's checkpoints ({type(exc).__name__}: {exc})"
        ) from None


def find_run(run: str | Path, home: str | Path | None = None) -> Path:
    """A run directory: `run` as a path holding a config.json, else a run id under `home`/runs."""
    from recreate.config import load_settings

    path = Path(run).expanduser()
    if (path / "config.json").is_file():
        return path.absolute()
    runs = load_settings(home=home).home / "runs"
    if RUN_ID.fullmatch(str(run)) and (runs / str(run) / "config.json").is_file():
        return runs / str(run)
    known = sorted(p.parent.name for p in runs.glob("*/config.json"))
    hint = f" (runs there: {', '.join(known[:5])}{', ...' if len(known) > 5 else ''})" if known else ""
    raise RunNotFound(
        f"no run {str(run)!r}: neither a run directory nor a run under {runs}{hint}; pass {{run}} as a "
        "run id or a run directory, and {home} if the run is in another home",
        run=Arg("run_id_or_path", cli="RUN"),
        home=Arg("home", "'DIR'", "DIR"),
    )


def load_run(run_id_or_path: str | Path, *, home: str | Path | None = None) -> EvolveResult:
    """A finished or partial evolve run, read back: its config, rounds, final scaffold (object and
    directory), final model spec and weights, final test, usage and report. Nothing is written."""
    from recreate.models import UsageLedger

    run_dir = find_run(run_id_or_path, home)
    config = read_json(run_dir / "config.json", dict)
    run_id = config.get("run_id", run_dir.name)
    if not isinstance(run_id, str):
        raise BrokenRun(run_dir / "config.json", f"has run_id {run_id!r}, not a string")
    saved_file = run_dir / "result.json"
    saved = _saved_result(saved_file) if saved_file.is_file() else {}
    state = checkpoint_state(run_dir, run_id)
    stopped = None if state.get("final") else (saved.get("stopped") or UNFINISHED)
    usage = UsageLedger(run_dir / "ledger.jsonl").by_role()
    if state:
        result = result_from_state(
            state, run_id=run_id, run_dir=run_dir, stopped=stopped, usage=usage, config=config
        )
    elif saved:  # a run without checkpoints (checkpointer=None): its result.json
        result = EvolveResult(run_dir=run_dir, config=config, usage=usage, **saved)
    else:
        result = EvolveResult(run_id=run_id, run_dir=run_dir, final=None, stopped=UNFINISHED, config=config)
    report = run_dir / "report" / "report.html"
    result.report = report if report.is_file() else None
    exported = run_dir / "scaffold"
    result.scaffold_dir = exported if (exported / "scaffold.yaml").is_file() else None
    result.scaffold = _final_scaffold(result, home if home is not None else _home_of(run_dir))
    result.model, result.weights = final_model(run_dir, config, result.final_model)
    return result


def _saved_result(path: Path) -> dict[str, Any]:
    """result.json's fields of an EvolveResult (BrokenRun when one is missing or of the wrong kind)."""
    data = read_json(path, dict)
    known = {f.name for f in fields(EvolveResult)} - {"scaffold", "run_dir", "config", "usage"}
    saved = {"final": None} | {k: v for k, v in data.items() if k in known}
    if not isinstance(saved.get("run_id"), str):
        raise BrokenRun(path, "has no run_id string")
    for name in ("final", "stopped", "final_model"):
        if saved.get(name) is not None and not isinstance(saved[name], str):
            raise BrokenRun(path, f"has {name} {saved[name]!r}, not a string")
    for f in fields(EvolveResult):
        kind = f.default_factory
        if f.name in saved and kind in (list, dict) and not isinstance(saved[f.name], kind):
            raise BrokenRun(path, f"has {f.name} that is not a JSON {'list' if kind is list else 'object'}")
    return saved


def _home_of(run_dir: Path) -> Path | None:
    """The home a run directory lives in (HOME/runs/ID), else None (the configured home)."""
    return run_dir.parent.parent if run_dir.parent.name == "runs" else None


def _final_scaffold(result: EvolveResult, home: str | Path | None) -> Scaffold | None:
    """The final version from the home's scaffold store (with its ref), else from the exported copy."""
    from recreate.config import load_settings
    from recreate.scaffold import ScaffoldStore, load_scaffold

    if not result.final:
        return None
    with contextlib.suppress(Exception):  # a store without it (a run directory copied elsewhere)
        return ScaffoldStore(load_settings(home=home).home / "scaffolds").load(result.final)
    return load_scaffold(result.scaffold_dir) if result.scaffold_dir else None


def _proposal_brief(result: dict[str, Any]) -> dict[str, Any]:
    p = result.get("proposal") or {}
    errors = p.get("errors") or []
    return {
        "proposal_status": p.get("status"),
        "cause": p.get("cause"),
        "n_ops": len(p.get("ops", [])),
        "diagnosis": p.get("diagnosis", ""),
        "proposal_error": errors[-1] if errors else None,
    }
