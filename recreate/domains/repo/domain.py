"""`repo`: fix a repository so its own tests pass (SWE-style; SWE-bench's instance schema).

The agent's workspace is the repository at its base state, a fresh git repository with one commit (no
history: the fix is never in it), so `git diff` shows its change; the submission is that diff. Judging
(evaluation.py) applies it to a fresh copy in a fresh sandbox without network, puts the test files back,
applies the instance's test patch and runs FAIL_TO_PASS and PASS_TO_PASS with pytest.
Instances with a snapshot run anywhere with the venv `recreate domain setup repo` builds; SWE-bench
instances run in their published images through the docker backend.
"""

from __future__ import annotations

import posixpath
import shlex
from dataclasses import replace
from pathlib import Path

from recreate.config import load_settings
from recreate.domains.base import Evaluation, Split, Task
from recreate.domains.common import TaskFileDomain, submission_problem, unreadable_hint, zero
from recreate.domains.repo.env import distinct_environments, env_path, is_ready
from recreate.domains.repo.evaluation import WORKDIR, clean_patch, run_tests, verdict
from recreate.domains.repo.forgeries import forgeries, new_file_patch
from recreate.domains.repo.guard import refusal
from recreate.domains.repo.instance import RepoInstance, load_instances
from recreate.domains.repo.snapshot import GIT_IDENTITY, SnapshotError, base_tree
from recreate.domains.splits import SplitPlan, select
from recreate.sandbox.base import Sandbox, SandboxSpec, Session
from recreate.sandbox.shell import DEFAULT_PATH
from recreate.scaffold.model import TOOL_ROOT

BASE_TAR = ".recreate-base.tar"
_GIT_ENV = {k: v for k, v in GIT_IDENTITY.items() if not k.startswith("GIT_CONFIG")}
# A conftest.py that reports every test as passed: what restoring the test files must defeat.
FORGED_CONFTEST = """import pytest


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    outcome.get_result().outcome = "passed"
"""


def reverse_patch(patch: str) -> str:
    """The same diff the other way round (what undoing the gold fix would look like)."""
    out = []
    for line in patch.splitlines():
        if line.startswith("--- "):
            line = "+++ " + line[4:]
        elif line.startswith("+++ "):
            line = "--- " + line[4:]
        elif line.startswith("@@"):
            head = line.split("@@")
            old, new = head[1].split()
            line = "@@ -" + new[1:] + " +" + old[1:] + " @@" + "@@".join(head[2:])
        elif line[:1] in "+-":
            line = ("-" if line[0] == "+" else "+") + line[1:]
        out.append(line)
    # each file's "--- a" must precede its "+++ b": swap the two header lines back into order
    for i in range(len(out) - 1):
        if out[i].startswith("+++ ") and out[i + 1].startswith("--- "):
            out[i], out[i + 1] = out[i + 1], out[i]
    return "\n".join(out) + "\n"


class RepoDomain(TaskFileDomain):
    name = "repo"

    def __init__(
        self,
        data: str | Path,
        *,
        seed: int = 0,
        train: float = 0.5,
        val: float = 0.25,
        timeout: float = 300.0,
        memory_mb: int = 2048,
        image: str | None = None,
    ) -> None:
        self.timeout = timeout
        self.memory_mb = memory_mb
        self.image = image  # one image for every instance (e.g. a SWE-smith repository image)
        self.home = str(load_settings().home)
        self._instances: dict[str, RepoInstance] = {}  # hidden: tests and test patch never reach a Task
        super().__init__(data, self._load, SplitPlan(seed=seed, train=train, val=val))

    def _load(self, path: Path) -> list[Task]:
        tasks = []
        for instance in load_instances(path):
            if self.image:
                instance = replace(instance, environment=replace(instance.environment, image=self.image))
            self._instances[instance.instance_id] = instance
            metadata = {"repo": instance.repo, "category": instance.repo, "split": instance.split}
            if not instance.fail_to_pass:  # nothing would decide: every patch, even none, would resolve
                metadata["invalid"] = f"{path}: {instance.instance_id} has no FAIL_TO_PASS tests"
            tasks.append(
                Task(
                    id=instance.instance_id,
                    prompt=instance.problem_statement,
                    group=instance.group or instance.instance_id,
                    reference=instance.patch,
                    metadata=metadata,
                )
            )
        return tasks

    def instance(self, task: Task) -> RepoInstance:
        return self._instances[task.id]

    def tasks(self, split: Split = "all") -> list[Task]:
        """A dataset whose every instance names its split keeps those splits; others use the seeded plan."""
        if split == "all" or not all(t.metadata.get("split") for t in self._tasks):
            return select(self._tasks, split, self.plan)
        return [t for t in self._tasks if t.metadata["split"] == split]

    def env_for(self, instance: RepoInstance) -> Path | None:
        return None if instance.environment.image else env_path(instance.environment, self.home)

    def agent_spec(self) -> SandboxSpec:
        """The agent's sandbox: the test environments bound read-only and first on PATH (`python -m
        pytest` runs the tests as the evaluation does), the repository's import folders on PYTHONPATH."""
        instances = list(self._instances.values())
        envs = [env_path(e, self.home) for e in distinct_environments(i.environment for i in instances)]
        envs = [e for e in envs if e.is_dir()]
        folders = dict.fromkeys(p for i in instances for p in i.environment.pythonpath)
        variables = {
            "PATH": ":".join([*(f"{e}/bin" for e in envs), DEFAULT_PATH]),
            "PYTHONPATH": ":".join(posixpath.normpath(f"{WORKDIR}/{p}") for p in folders),
            "PYTHONDONTWRITEBYTECODE": "1",
        }
        images = {i.environment.image for i in instances}
        image = images.pop() if len(images) == 1 else None
        return SandboxSpec(
            image=image,
            ro_binds=tuple((str(e), str(e)) for e in envs),
            env=variables,
            memory_mb=self.memory_mb,
            disk_mb=2048,
        )

    def prepare(self, task: Task, session: Session) -> None:
        """The repository at its base state, committed once, in the workspace root."""
        instance = self._instances[task.id]
        if instance.snapshot is not None:
            session.put(BASE_TAR, base_tree(instance.snapshot, instance.base_commit or "HEAD"))
            fetch = f"tar -xf {BASE_TAR} && rm {BASE_TAR}"
        else:
            fetch = f"cp -R {shlex.quote(instance.environment.source)}/. . && rm -rf .git"  # ours, not root's
        # the scaffold's tools live in the workspace but are not the repository's
        ignore = f"mkdir -p .git/info && echo {TOOL_ROOT}/ >> .git/info/exclude"
        script = f"{fetch} && git init -q && {ignore} && git add -A && git commit -q --no-verify -m base"
        done = session.run(script, timeout=300, env=_GIT_ENV)
        if not done.ok:
            raise SnapshotError(f"preparing {task.id} failed: {(done.stdout + done.stderr).strip()[-500:]}")

    def environment_problem(self) -> str | None:
        """What the preflight refuses a run for: an instance's test environment is not built."""
        for instance in self._instances.values():
            env = self.env_for(instance)
            if env is not None and not is_ready(env, instance.environment):
                return (
                    f"the test environment of {instance.repo} is missing at {env}; build it with "
                    "`recreate domain setup repo --data FILE`"
                )
        return None

    def evaluate(self, task: Task, submission: str | None, sandbox: Sandbox) -> Evaluation:
        problem = submission_problem(task, submission)
        if problem:
            return problem
        instance = self._instances.get(task.id)
        if instance is None:
            return zero(f"task {task.id} is not an instance of this dataset")
        env = self.env_for(instance)
        if env is not None and not is_ready(env, instance.environment):
            return zero(
                f"the test environment of {instance.repo} is missing at {env}; build it with "
                "`recreate domain setup repo --data FILE`"
            )
        try:
            tree = base_tree(instance.snapshot, instance.base_commit or "HEAD") if instance.snapshot else None
        except SnapshotError as exc:
            return zero(str(exc))
        patch = clean_patch(submission or "")
        if not patch.isascii() and any("\ud800" <= char <= "\udfff" for char in patch):
            reason = "the patch holds characters no UTF-8 file can (unpaired surrogates): submit plain text"
            return zero(reason, repo=instance.repo)
        refused = refusal(patch, tree, instance.environment.pythonpath)
        if refused:
            return zero("refused: " + refused, repo=instance.repo)
        run = run_tests(
            sandbox,
            instance,
            env,
            tree,
            patch,
            timeout=self.timeout,
            memory_mb=self.memory_mb,
        )
        if run.error and env is not None:
            run.error += unreadable_hint(
                env, "build it elsewhere: RECREATE_HOME=/opt/recreate recreate domain setup repo"
            )
        judged = verdict(instance, run, self.timeout)
        if not judged.passed and judged.feedback.startswith("the patch does not apply") and no_prefix(patch):
            judged.feedback += "\nIts paths lack git's a/ and b/ prefixes (`git diff --no-prefix`?)."
        return judged

    def wrong_submissions(self, task: Task) -> list[str]:
        """Patches that must never resolve: none at all, the gold fix undone, a conftest.py that reports
        every test as passed (defeated by restoring the test files), and the forgeries of forgeries.py
        (refused by guard.py before anything runs)."""
        instance = self._instances[task.id]
        try:
            tree = base_tree(instance.snapshot, instance.base_commit or "HEAD") if instance.snapshot else None
        except SnapshotError:
            tree = None
        forged = forgeries(instance.patch, tree).values()
        return ["", reverse_patch(instance.patch), new_file_patch("conftest.py", FORGED_CONFTEST), *forged]

    def describe(self) -> str:
        return (
            "Repository tasks (SWE-style): each task is an issue in a real Python project; the workspace "
            "is the repository at the issue's base state, a git repository with one commit. Fix the library "
            "code so the project's own tests pass. A submission is a unified diff against that state: the "
            "output of `git diff` (after `git add -A`, `git diff --cached` includes new files). Judging: in "
            "a fresh sandbox without network the diff is applied to a clean copy, test files and pytest "
            "configuration are put back as they were (changing tests never helps), and the failing tests "
            "(FAIL_TO_PASS) and the tests that passed before (PASS_TO_PASS) run with pytest; score 1 only if "
            "all of them pass. Feedback gives the pass counts, the failing tests with their assertion "
            "messages, and whether the diff applied. A patch is refused when it adds modules named like the "
            "standard library or pytest, packaging metadata or compiled modules, or code that reaches for "
            "pytest's internals, sys.modules, atexit, builtins, os._exit, exec/eval or the judge."
        )


def no_prefix(patch: str) -> bool:
    """The diff names its files without git's a/ and b/ prefixes (as `git diff --no-prefix` writes)."""
    targets = [line[4:] for line in patch.splitlines() if line.startswith("+++ ") and line[4:] != "/dev/null"]
    return bool(targets) and not any(target.lstrip('"').startswith("b/") for target in targets)
