"""What each page shows: request -> template context. Reads only; 404 for what is not in the home."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any
from urllib.parse import quote

from starlette.exceptions import HTTPException
from starlette.requests import Request

from recreate.experience.catalog import FILTER_KEYS
from recreate.experience.index import SCOPES
from recreate.scaffold import ScaffoldStore
from recreate.scaffold.errors import ScaffoldError
from recreate.ui import training as train
from recreate.ui.charts import Series, line_chart
from recreate.ui.evolution import run_view
from recreate.ui.lineage import reflection, version_view
from recreate.ui.runs import (
    EvolveRun,
    RunSummary,
    eval_runs,
    eval_summary,
    evolve_runs,
    read_json,
    run_signature,
    unreadable_summary,
)
from recreate.ui.tokens import Tokenizers
from recreate.ui.trajectories import PAGE_SIZE, Page, TrajectoryReader

MAX_K = 50
DONE = ("finished", "stopped at budget")  # statuses that no longer change while the files do not


def _offset(request: Request) -> int:
    try:
        return max(0, int(request.query_params.get("offset", 0)))
    except ValueError:
        raise HTTPException(400, "offset must be a whole number") from None


def _task_ids(value: Any) -> frozenset[str]:
    """A split's task ids as a run's config lists them (anything else in that place: none)."""
    if not isinstance(value, list):
        return frozenset()
    return frozenset(str(v) for v in value if isinstance(v, str | int))


def _summaries(
    kind: str,
    folders: list[Path],
    summarize: Callable[[Path], RunSummary],
    run_id: Callable[[Path], str] = lambda folder: folder.name,
) -> list[RunSummary]:
    """One row per run folder; a run whose files do not read as a run is a row that says so (the
    others are listed as usual)."""
    out = []
    for folder in folders:
        try:
            out.append(summarize(folder))
        except Exception as exc:  # a hand-edited or imported file of any shape: that row, never the page
            out.append(unreadable_summary(folder, kind, run_id(folder), exc))
    return out


class Pages:
    def __init__(self, home: Path, *, embedding: str, chroma_url: str | None) -> None:
        self.home = home
        self.scaffolds = ScaffoldStore(home / "scaffolds")
        self.trajectories = TrajectoryReader(home, embedding=embedding, chroma_url=chroma_url)
        self.tokenizers = Tokenizers(home)  # the heat map's token text, one tokenizer per run and model
        self._splits: dict[str, dict[str, frozenset[str]] | str] = {}  # run id -> its splits' task ids
        self._done: dict[Path, tuple[Any, RunSummary]] = {}  # run folder -> (its files' stats, its row)
        self._refs: dict[Path, tuple[Any, frozenset[str]]] = {}  # run folder -> (stats, its versions)

    def _run(self, run_id: str) -> EvolveRun:
        run_dir = self.home / "runs" / run_id
        if "/" in run_id or run_id.startswith(".") or not (run_dir / "config.json").is_file():
            raise HTTPException(404, f"no evolve run {run_id!r} under {self.home / 'runs'}")
        return EvolveRun.open(run_dir)

    def _evolve_summary(self, run_dir: Path) -> RunSummary:
        """A finished run's row, read once while its files stay as they are: the runs table is polled
        every few seconds while a run is live, and a result.json holds every reflection's messages."""
        key = run_signature(run_dir)
        cached = self._done.get(run_dir)
        if cached is not None and cached[0] == key:
            return cached[1]
        summary = EvolveRun.open(run_dir).summary()
        if summary.status in DONE:
            self._done[run_dir] = (key, summary)
        return summary

    def _training_summaries(self) -> list[RunSummary]:
        return _summaries(
            "train",
            train.training_dirs(self.home),
            lambda folder: train.training_summary(self.home, folder),
            lambda folder: train.run_id(self.home, folder),
        )

    def runs(self, request: Request) -> dict[str, Any]:
        summaries = _summaries("evolve", evolve_runs(self.home), self._evolve_summary)
        summaries += _summaries("eval", eval_runs(self.home), eval_summary)
        summaries += self._training_summaries()
        summaries.sort(key=lambda s: s.started or 0, reverse=True)
        return {"runs": summaries, "live": any(s.status == "running" for s in summaries)}

    def run(self, request: Request) -> dict[str, Any]:
        view = run_view(self._run(request.path_params["run_id"]))
        page = self.trajectories.page({"run_id": view.run.id}, _offset(request))
        shown = request.query_params.get("round", str(view.rounds[-1].round if view.rounds else 0))
        return {"view": view, "run": view.run, "shown_round": shown, "page": page}

    def run_href(self, run_id: str | None) -> str:
        """The page of the evolve or eval run `run_id`, "" when this home has neither."""
        if not run_id or "/" in run_id or run_id.startswith("."):
            return ""
        if "seed_ref" in (read_json(self.home / "runs" / run_id / "config.json") or {}):
            return f"/runs/{quote(run_id)}"
        return f"/evals/{quote(run_id)}" if (self.home / "evals" / run_id / "results.json").is_file() else ""

    def split_of(self, run_id: str | None, task_id: str) -> str:
        """The split(s) a run used `task_id` from: train, val, test ("" when the run is not known)."""
        if not run_id or "/" in run_id or run_id.startswith("."):
            return ""
        if run_id not in self._splits:
            config = read_json(self.home / "runs" / run_id / "config.json")
            evaluated = read_json(self.home / "evals" / run_id / "results.json")
            if config is not None:
                self._splits[run_id] = {k: _task_ids(config.get(k)) for k in ("train", "val", "test")}
            elif evaluated is not None:  # an eval runs every task of one split
                run = evaluated.get("run")
                self._splits[run_id] = str(run.get("split") or "") if isinstance(run, dict) else ""
            else:
                return ""
        splits = self._splits[run_id]
        return (
            splits if isinstance(splits, str) else "/".join(k for k, ids in splits.items() if task_id in ids)
        )

    def _run_of(self, ref: str) -> EvolveRun | None:
        """The evolve run that made (or judged) version `ref`: its gate decision and evidence."""
        for run_dir in evolve_runs(self.home):
            try:
                if ref in self._versions_of(run_dir):
                    return EvolveRun.open(run_dir)
            except Exception:  # noqa: S112 - an unreadable run judged nothing this page can show
                continue
        return None

    def _versions_of(self, run_dir: Path) -> frozenset[str]:
        """The versions a run made or judged; a finished run's read once while its files stay as they
        are (a version page without ?run= looks through every run)."""
        key = run_signature(run_dir)
        cached = self._refs.get(run_dir)
        if cached is not None and cached[0] == key:
            return cached[1]
        run = EvolveRun.open(run_dir)
        refs = frozenset(str(h["ref"]) for h in run.history if h.get("ref"))
        if run.status in DONE:
            self._refs[run_dir] = (key, refs)
        return refs

    def version(self, request: Request) -> dict[str, Any]:
        ref = request.path_params["ref"]
        run_id = request.query_params.get("run")
        run = self._run(run_id) if run_id else self._run_of(ref)
        try:
            view = version_view(self.scaffolds, ref, run)
        except (ScaffoldError, KeyError, ValueError) as exc:
            raise HTTPException(404, f"no scaffold version {ref!r}: {exc}") from None
        cited = {tid: self.trajectories.entry(tid) for tid in view.evidence}
        return {"view": view, "run": run, "cited": cited}

    def eval_run(self, request: Request) -> dict[str, Any]:
        run_id = request.path_params["run_id"]
        out = self.home / "evals" / run_id
        doc = read_json(out / "results.json") if "/" not in run_id and not run_id.startswith(".") else None
        if doc is None:
            raise HTTPException(404, f"no eval run {run_id!r} under {self.home / 'evals'}")
        offset, tasks = _offset(request), doc.get("tasks") or []
        page = Page(tasks[offset : offset + PAGE_SIZE], len(tasks), offset)  # type: ignore[arg-type]
        return {"summary": eval_summary(out), "doc": doc, "page": page}

    def _trajectory(self, trajectory_id: str) -> Any:
        traj, problem = self.trajectories.read(trajectory_id)
        if problem:
            raise HTTPException(500, f"trajectory {trajectory_id!r} does not load: {problem}")
        if traj is None:
            raise HTTPException(404, f"no trajectory {trajectory_id!r} in this home")
        return traj

    def trajectory(self, request: Request) -> dict[str, Any]:
        traj = self._trajectory(request.path_params["trajectory_id"])
        run_dir = self.home / "runs" / (traj.run_id or "")
        proposal = None
        if traj.run_id and run_dir.is_dir():
            proposal = reflection(run_dir, traj.trajectory_id, traj.scaffold.hash if traj.scaffold else None)
        return {
            "traj": traj,
            "siblings": self.trajectories.siblings(traj),
            "proposal": proposal,
        }

    def compare(self, request: Request) -> dict[str, Any]:
        a, b = request.query_params.get("a"), request.query_params.get("b")
        if not a or not b:
            raise HTTPException(400, "compare needs two trajectory ids: /compare?a=ID&b=ID")
        left, right = self._trajectory(a), self._trajectory(b)
        return {"left": left, "right": right, "same_task": left.task_id == right.task_id}

    def experience(self, request: Request) -> dict[str, Any]:
        params = request.query_params
        query = params.get("q", "").strip()
        scope = params.get("scope", "steps")
        if scope not in SCOPES:
            raise HTTPException(400, f"scope must be one of {', '.join(SCOPES)}")
        try:
            k = min(MAX_K, max(1, int(params.get("k", 10))))
        except ValueError:
            raise HTTPException(400, "k must be a whole number") from None
        filters = {key: params.get(key, "") for key in (*FILTER_KEYS, "error_type")}
        hits, page = [], None
        if query:
            try:
                hits = self.trajectories.search(query, scope, filters, k)
            except ValueError as exc:
                raise HTTPException(400, str(exc)) from None
        else:
            page = self.trajectories.page(filters, _offset(request))
        return {
            "query": query,
            "scope": scope,
            "scopes": SCOPES,
            "k": k,
            "filters": filters,
            "hits": hits,
            "page": page,
        }

    def training(self, request: Request) -> dict[str, Any]:
        return {"runs": self._training_summaries()}

    def training_run(self, request: Request) -> dict[str, Any]:
        path = request.path_params["path"]
        run_dir = self.home / path
        if ".." in Path(path).parts or run_dir not in train.training_dirs(self.home):
            raise HTTPException(404, f"no training run {path!r} in this home")
        rows = train.flat_rows(run_dir / "metrics.jsonl")
        charts = [
            (title, line_chart([Series(s.name, s.xs, s.ys) for s in series], title, x_label="step"))
            for title, series in train.panels(rows)
        ]
        return {"run_id": path, "rows": len(rows), "charts": charts, "last": rows[-1] if rows else {}}
