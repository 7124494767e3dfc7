"""DS-1000 judging in two kinds of sandbox: the checker's, where no solution ever runs, and the solution's.

One long-lived checker sandbox per domain and backend runs `checks/ds1000_check.py`, a server that has
imported the problems' libraries once and forks a child per evaluation. For each evaluation:
1. the checker child generates the test cases (the expected answers never leave it) and writes the
   code and inputs of each case (`cases.pkl`);
2. a FRESH sandbox gets those and nothing else, runs the solution (`checks/ds1000_run.py`), and only
   its data files come back (`results.json` + `results.npz`: ds1000_data, no code on load);
3. the checker child judges that data with the problem's own checks and writes `verdict.json`.
The verdict is a file of the checker's sandbox: no stream the solution writes to is ever read for it.
"""

from __future__ import annotations

import ast
import json
import secrets
import threading
import time
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.domains.common import tail
from recreate.domains.ds1000.env import library_module
from recreate.sandbox import fresh_session
from recreate.sandbox.base import Result, Sandbox, SandboxError, SandboxSpec, Session

CHECKS_DIR = Path(__file__).parent / "checks"  # the scripts that run inside the sandboxes
LIBRARY_FILES = ("ds1000_data.py", "ds1000_pandas.py", "ds1000_tensors.py", "ds1000_figure.py")
LIBRARY_FILES += ("ds1000_figure_artists.py", "ds1000_torch.py")
LIBRARY_FILES += ("ds1000_figure_extra.py", "ds1000_figure_3d.py", "ds1000_figure_axes.py")
SERVER_LIFETIME_S = 7 * 24 * 3600.0  # "forever": the session ends with the domain or the process
_POLL_S = 0.005
_RESULT_FILES = ("results.json", "results.npz")


@dataclass
class Judgement:
    """The checker's verdict (None when there is none), or why the evaluation could not finish."""

    verdict: dict[str, Any] | None = None
    error: str | None = None  # the sandbox machinery failed
    solution_run: Result | None = None  # the solution sandbox's process (diagnostics only)


def imported_modules(code_contexts: Iterable[str]) -> list[str]:
    """Top-level modules the test contexts import, for the checker server to load once."""
    names: set[str] = set()
    for code in code_contexts:
        names |= _imports(_parse(code))
    return sorted(names)


def needed_modules(code_context: str, library: str | None) -> set[str]:
    """The top-level modules a task's test needs: those its context imports, those its `exec_context`
    string imports (the solution's sandbox runs that), and its library's (metadata "Pytorch": torch)."""
    names = set().union(*(_imports(tree) for tree in test_trees(code_context)))
    needed = library_module(library)
    return {name.split(".")[0] for name in names} | ({needed} if needed else set())


def test_trees(code_context: str) -> list[ast.Module]:
    """The syntax trees of what a task's test runs: its context, and its `exec_context` string (run in
    the solution's sandbox) with the solution's place filled at the top level and in a function."""
    tree = _parse(code_context)
    trees = [tree]
    for node in tree.body:
        if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
            targets = [target.id for target in node.targets if isinstance(target, ast.Name)]
            if "exec_context" in targets:
                text = str(node.value.value)
                trees += [_parse(text.replace("[insert]", fill)) for fill in ("pass", "    pass")]
    return trees


def _parse(code: str) -> ast.Module:
    """`code`'s syntax tree; an empty module when it does not parse."""
    try:
        with warnings.catch_warnings():  # odd escapes in dataset strings: not ours to warn about
            warnings.simplefilter("ignore")
            return ast.parse(code)
    except SyntaxError:
        return ast.Module(body=[], type_ignores=[])


def _imports(tree: ast.Module) -> set[str]:
    """The modules `tree`'s top-level statements import (relative imports left out)."""
    names: set[str] = set()
    for node in tree.body:
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
    return names


def checker_files() -> dict[str, bytes]:
    files = {"check.py": (CHECKS_DIR / "ds1000_check.py").read_bytes()}
    files |= {f"lib/{name}": (CHECKS_DIR / name).read_bytes() for name in LIBRARY_FILES}
    return files


def _wait_for(
    session: Session, paths: tuple[str, ...], deadline: float, alive: threading.Thread
) -> tuple[str, bytes] | None:
    """The first of `paths` to appear in the checker's workspace (polled), or None if none does in time."""
    while time.monotonic() < deadline:
        for path in paths:
            try:
                return path, session.get(path)
            except SandboxError:
                continue
        if not alive.is_alive():
            return None
        time.sleep(_POLL_S)
    return None


class CheckerServer:
    """The checker sandbox and its server process, started on first use and restarted if it dies."""

    def __init__(self, sandbox: Sandbox, spec: SandboxSpec, command: str, config: dict[str, Any]) -> None:
        self.sandbox, self.spec, self.command, self.config = sandbox, spec, command, config
        self._lock = threading.Lock()
        self._session: Session | None = None
        self._thread: threading.Thread | None = None
        self._exit: Result | None = None

    def _ensure_started(
        self, home_files: dict[str, bytes], timeout: float
    ) -> tuple[Session, threading.Thread]:
        with self._lock:
            if self._session is not None and self._thread is not None and self._thread.is_alive():
                return self._session, self._thread
            self.close()
            session = self.sandbox.open(self.spec)
            for name, data in {**checker_files(), **home_files}.items():
                session.put(name, data)
            session.put("config.json", json.dumps(self.config))

            def serve() -> None:
                try:
                    self._exit = session.run(self.command, timeout=SERVER_LIFETIME_S)
                except Exception as exc:  # closed under it: the next evaluation starts a new one
                    self._exit = Result("", str(exc), None, 0.0)

            thread = threading.Thread(target=serve, name="ds1000-checker", daemon=True)
            thread.start()
            if _wait_for(session, ("server.ready",), time.monotonic() + timeout, thread) is None:
                why = tail(self._exit.stderr) if self._exit else "it did not start in time"
                session.close()
                raise SandboxError(f"the DS-1000 checker did not start: {why}")
            self._session, self._thread = session, thread
            return session, thread

    def judge(
        self,
        problem: dict[str, Any],
        solution_sandbox: Sandbox,
        solution_spec: SandboxSpec,
        home_files: dict[str, bytes],
        run_command: str,
        timeout: float,
    ) -> Judgement:
        """Judge one solution (`problem`: code_context, solution); `home_files` go into both sandboxes."""
        try:
            session, alive = self._ensure_started(home_files, timeout + 60)
        except Exception as exc:
            return Judgement(error=f"the evaluation sandbox failed: {exc}")
        job = "jobs/" + secrets.token_hex(8)
        deadline = time.monotonic() + timeout + 30
        try:
            session.put(f"{job}/problem.json", json.dumps(problem))
            session.put(f"{job}.job", "")
            verdict, solution_run = self._run_job(
                session,
                alive,
                job,
                deadline,
                solution_sandbox,
                solution_spec,
                home_files,
                run_command,
                timeout,
            )
            session.put(f"{job}.done", "")
        except SandboxError as exc:
            return Judgement(error=f"the evaluation sandbox failed: {exc}")
        if verdict is None:
            return Judgement(solution_run=solution_run)
        return Judgement(json.loads(verdict), solution_run=solution_run)

    def _run_job(
        self, session, alive, job, deadline, solution_sandbox, solution_spec, home_files, run_command, timeout
    ) -> tuple[bytes | None, Result | None]:
        first = _wait_for(session, (f"{job}/cases.ready", f"{job}/verdict.json"), deadline, alive)
        if first is None or first[0].endswith("verdict.json"):  # the test context failed: no solution ran
            return (first[1] if first else None), None
        cases = session.get(f"{job}/cases.pkl")
        with fresh_session(solution_sandbox, solution_spec) as solution:
            for name, data in home_files.items():
                solution.put(name, data)
            solution.put("run.py", (CHECKS_DIR / "ds1000_run.py").read_bytes())
            for name in LIBRARY_FILES:
                solution.put(f"lib/{name}", (CHECKS_DIR / name).read_bytes())
            solution.put("cases.pkl", cases)
            run = solution.run(run_command, timeout=timeout)
            try:
                sent = {name: solution.get(name) for name in _RESULT_FILES}
            except SandboxError:
                sent = None  # it died (or was killed) before sending anything
        if sent is None:
            session.put(f"{job}/results.done", "")  # the checker child stops waiting (its verdict: unread)
            return None, run
        for name, data in sent.items():
            session.put(f"{job}/{name}", data)
        session.put(f"{job}/results.done", "")
        verdict = _wait_for(session, (f"{job}/verdict.json",), deadline, alive)
        return (verdict[1] if verdict else None), run

    def close(self) -> None:
        if self._session is not None:
            self._session.close()
        self._session = self._thread = None
