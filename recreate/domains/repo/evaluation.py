"""Judging a patch to a repository: a fresh sandbox without network gets the base tree (or, for SWE-bench,
copies it out of its image), applies the patch, puts the test files back, applies the test patch and runs
the tests (checks/repo_check.py); the verdict is computed here from the outcomes it reports.

Resolved = every FAIL_TO_PASS and every PASS_TO_PASS test passes, as in SWE-bench. The tests run the
patched code in their own process, as in SWE-bench; what a patch cannot do is change the tests or how
pytest runs them: test folders, test_*.py, conftest.py and pytest's configuration files are restored
(and added ones removed) before anything runs. The outcomes come from pytest's report objects over a
nonce-signed pipe (checks/recreate_repo_results.py), never from the output the tested code can print
to; a run that changed pytest while it ran, or wrote on that pipe, is refused; patches that reach for
the judge are refused before anything runs (guard.py, which also states the residual risk).
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from recreate.domains.base import Evaluation
from recreate.domains.common import run_check, tail, zero
from recreate.domains.repo.instance import RepoInstance
from recreate.envbuild import env_python
from recreate.sandbox.base import Sandbox, SandboxSpec

CHECKS_DIR = Path(__file__).parent / "checks"  # the scripts that run inside the sandbox
WORKDIR = "/workspace"
PLUGIN = "recreate_repo_results.py"
REPORT_LIMIT = 8 * 1024 * 1024  # the outcomes of a large suite travel on stdout
SHOWN_FAILURES = 8
_FENCED = re.compile(r"^```[a-zA-Z]*\n(.*?)\n?```\s*$", re.DOTALL)


def clean_patch(text: str) -> str:
    """A diff as the agent submitted it, without a surrounding ``` fence, ending in a newline."""
    text = text.strip("\n")
    fenced = _FENCED.match(text.strip())
    if fenced:
        text = fenced.group(1)
    return text + "\n" if text.strip() else ""


def eval_spec(instance: RepoInstance, env: Path | None, timeout: float, memory_mb: int) -> SandboxSpec:
    binds = ((str(env), str(env)),) if env is not None else ()
    return SandboxSpec(
        image=instance.environment.image,
        workdir=WORKDIR,
        env={"PYTHONHASHSEED": "0", "OMP_NUM_THREADS": "1"},
        ro_binds=binds,
        memory_mb=memory_mb,
        cpu_seconds=int(timeout) + 60,
        disk_mb=2048 if instance.environment.image else 1024,
        output_limit=REPORT_LIMIT,
    )


@dataclass
class TestRun:
    """What the check reported (None when it reported nothing), the error if the sandbox failed, and
    the wall time of the whole evaluation on the host."""

    report: dict[str, Any] | None
    error: str | None
    wall_s: float
    stderr: str = ""


def run_tests(
    sandbox: Sandbox,
    instance: RepoInstance,
    env: Path | None,
    tree: bytes | None,
    patch: str,
    *,
    timeout: float,
    memory_mb: int = 2048,
    test_files: list[str] | None = None,
    trace: bool = False,
) -> TestRun:
    """Apply `patch` to the instance's base state in a fresh sandbox and run its tests (`test_files`, by
    default those of FAIL_TO_PASS and PASS_TO_PASS; [] runs the whole suite)."""
    environment = instance.environment
    job: dict[str, Any] = {
        "source": "base.tar" if tree is not None else environment.source,
        "python": str(env_python(env)) if env is not None else environment.interpreter,
        "pythonpath": list(environment.pythonpath),
        "pytest_args": list(environment.pytest_args),
        "test_files": instance.test_files() if test_files is None else test_files,
        "timeout": timeout,
        "trace": trace,
    }
    files: dict[str, str | bytes] = {f"plugin/{PLUGIN}": (CHECKS_DIR / PLUGIN).read_bytes()}
    if tree is not None:
        files["base.tar"] = tree
    if patch:
        files["submission.diff"], job["submission"] = patch, "submission.diff"
    if instance.test_patch.strip():
        files["test_patch.diff"], job["test_patch"] = clean_patch(instance.test_patch), "test_patch.diff"
    files["job.json"] = json.dumps(job)
    started = time.perf_counter()
    spec = eval_spec(instance, env, timeout, memory_mb)
    command = f"{job['python']} -I check.py"
    ran = run_check(sandbox, spec, CHECKS_DIR / "repo_check.py", files, command, timeout + 60)
    wall = round(time.perf_counter() - started, 3)
    stderr = ran.result.stderr if ran.result is not None else ""
    return TestRun(ran.report, ran.error, wall, stderr)


def _failure_lines(names: list[str], outcomes: dict[str, str], messages: dict[str, str]) -> list[str]:
    lines = []
    for name in names[:SHOWN_FAILURES]:
        outcome = outcomes.get(name, "not run")
        message = messages.get(name, "")
        lines.append(f"  {name}: {outcome}" + (f" ({message.splitlines()[0][:200]})" if message else ""))
    if len(names) > SHOWN_FAILURES:
        lines.append(f"  ... and {len(names) - SHOWN_FAILURES} more")
    return lines


def verdict(instance: RepoInstance, run: TestRun, timeout: float) -> Evaluation:
    """Resolved or not, with per-test feedback and the wall times (setup, tests, whole evaluation)."""
    details: dict[str, Any] = {"repo": instance.repo, "eval_wall_s": run.wall_s}
    if not instance.fail_to_pass:
        return zero(f"{instance.instance_id} has no FAIL_TO_PASS tests: nothing decides it", **details)
    if run.error:
        return zero(run.error, **details)
    report = run.report or {}
    if "applied" not in report:
        return zero("the evaluation reported nothing; stderr tail:\n" + tail(run.stderr), **details)
    if not report["applied"]:
        reason = "the patch does not apply to the repository's base state:\n" + report.get("apply_error", "")
        return zero(reason + "\nSubmit the output of `git diff` run in the repository.", **details)
    if report.get("stage") == "test_patch":
        return zero("the instance's test patch does not apply: " + report["test_patch_error"], **details)
    details |= {k: report[k] for k in ("setup_s", "tests_s", "restored") if k in report}
    if report.get("timed_out"):
        return zero(f"the tests did not finish within {timeout:.0f} s (timeout)", **details)
    if report.get("tampered"):
        changed = ", ".join(report["tampered"][:5])
        return zero(
            f"refused: the test framework was changed while the tests ran ({changed}); a fix must not "
            "patch pytest, unittest, the tests' own helpers or the runner's record",
            **details,
        )
    if report.get("channel_error"):
        output = tail(report.get("output_tail", ""))
        return zero(f"{report['channel_error']}; output tail:\n{output}", **details)
    outcomes, messages = report.get("tests", {}), report.get("messages", {})
    f2p_failing = [t for t in instance.fail_to_pass if outcomes.get(t) != "passed"]
    p2p_failing = [t for t in instance.pass_to_pass if outcomes.get(t) != "passed"]
    f2p, p2p = len(instance.fail_to_pass), len(instance.pass_to_pass)
    details |= {
        "fail_to_pass": f"{f2p - len(f2p_failing)}/{f2p}",
        "pass_to_pass": f"{p2p - len(p2p_failing)}/{p2p}",
        "failing": (f2p_failing + p2p_failing)[:50],
    }
    lines = [f"FAIL_TO_PASS: {details['fail_to_pass']} pass; PASS_TO_PASS: {details['pass_to_pass']} pass"]
    if report.get("restored"):
        lines.append(
            "the patch changed test files or test configuration, which were put back before the tests ran: "
            + ", ".join(report["restored"][:10])
        )
    if f2p_failing:
        lines += [
            "tests that should pass after the fix but do not:",
            *_failure_lines(f2p_failing, outcomes, messages),
        ]
    if p2p_failing:
        lines += ["tests that passed before and now fail:", *_failure_lines(p2p_failing, outcomes, messages)]
    if report.get("collect_errors"):
        lines.append("collection errors: " + "; ".join(report["collect_errors"][:3])[:800])
    resolved = not f2p_failing and not p2p_failing
    if resolved:
        lines.insert(0, "resolved: every FAIL_TO_PASS and PASS_TO_PASS test passes")
    return Evaluation(score=float(resolved), passed=resolved, feedback="\n".join(lines), details=details)
