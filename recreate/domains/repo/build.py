"""`recreate domain build repo --from PACKAGE==VERSION`: SWE-style instances from a PyPI sdist that ships
its tests (the SWE-smith method: inject a bug, keep it only if the project's own tests catch it).

1. the sdist (downloaded with pip, or a local .tar.gz) becomes a git repository (one commit);
2. its suite runs twice in a sandbox: the tests that pass both times are the baseline, and the traced
   run says which functions they call;
3. mutations of those functions (mutate.py), in a seeded order, one per function, are each committed
   and run; one is kept when at least one baseline test fails (FAIL_TO_PASS), the rest still pass
   (PASS_TO_PASS), nothing fails to import, and it does not break more than `max_failing_share`;
4. the gold patch is the diff back to the clean commit; each instance is validated by evaluating it
   the way the domain does (the gold patch must resolve it);
5. out: <out>/<name>-<version>.jsonl and the snapshot <out>/snapshots/<name>-<version>.bundle.
Same inputs and --seed, same instances and commit ids.
"""

from __future__ import annotations

import json
import random
import re
import subprocess
import sys
import tarfile
import tempfile
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, replace
from pathlib import Path

from recreate.config import load_settings
from recreate.domains.repo.env import ensure_env
from recreate.domains.repo.evaluation import TestRun, run_tests, verdict
from recreate.domains.repo.instance import DEFAULT_PYTEST, RepoEnvironment, RepoInstance, instance_row
from recreate.domains.repo.mutate import Mutation, mutations
from recreate.domains.repo.snapshot import GitRepo
from recreate.domains.repo.statement import llm_statement, template_statement
from recreate.domains.splits import SplitPlan
from recreate.sandbox.base import Sandbox

PYTEST_ARGS = ("-o", "addopts=")  # a project's addopts often name plugins (coverage) the env lacks
_SDIST = re.compile(r"^(?P<name>.+?)-(?P<version>\d[^-]*)\.(tar\.gz|tgz|zip)$")


class BuildError(RuntimeError):
    """The package cannot be turned into instances; the message says why."""


@dataclass
class Suite:
    passing: list[str]
    covered: dict[str, set[int]]  # file -> first lines of the functions the tests call
    seconds: float


def fetch_sdist(spec: str, into: Path) -> Path:
    """A local .tar.gz as it is; otherwise `pip download` the sdist of PACKAGE==VERSION (no wheels)."""
    if Path(spec).is_file():
        return Path(spec)
    if "==" not in spec:
        raise BuildError(f"--from {spec!r}: pin a version (PACKAGE==VERSION) or pass a local sdist .tar.gz")
    command = ["pip", "download", "--no-deps", "--no-binary", ":all:", "--dest", str(into), spec]
    done = subprocess.run([sys.executable, "-m", *command], capture_output=True, text=True)
    found = sorted(into.glob("*.tar.gz")) + sorted(into.glob("*.zip"))
    if done.returncode != 0 or not found:
        raise BuildError(f"pip could not download the sdist of {spec}: {done.stderr.strip()[-600:]}")
    return found[0]


def unpack(sdist: Path, into: Path) -> tuple[str, str, Path]:
    """(name, version, source folder) of an sdist."""
    match = _SDIST.match(sdist.name)
    if not match or not sdist.name.endswith((".tar.gz", ".tgz")):
        raise BuildError(f"{sdist.name}: expected NAME-VERSION.tar.gz (an sdist)")
    with tarfile.open(sdist) as tar:
        if hasattr(tarfile, "data_filter"):
            tar.extractall(into, filter="data")
        else:
            tar.extractall(into)
    folders = [p for p in into.iterdir() if p.is_dir()]
    if len(folders) != 1:
        raise BuildError(f"{sdist.name}: expected one top folder, found {len(folders)}")
    name = match.group("name").replace("_", "-").lower()
    return name, match.group("version"), folders[0]


def import_folder(source: Path) -> str:
    """`src` for a src-layout project, else the root."""
    src = source / "src"
    return (
        "src"
        if src.is_dir() and any(p.is_dir() and (p / "__init__.py").exists() for p in src.iterdir())
        else "."
    )


def stub(instance_id: str, name: str, environment: RepoEnvironment, **fields: object) -> RepoInstance:
    base = dict(
        instance_id=instance_id, repo=f"pypi/{name}", base_commit=None, problem_statement="", patch="",
        test_patch="", fail_to_pass=(), pass_to_pass=(), environment=environment,
    )  # fmt: skip
    return RepoInstance(**{**base, **fields})  # type: ignore[arg-type]


class Builder:
    def __init__(
        self,
        sandbox: Sandbox,
        *,
        seed: int = 0,
        install: tuple[str, ...] = (),
        timeout: float = 120.0,
        max_failing_share: float = 0.3,
        max_tries: int = 400,
        chat: Callable[[list[dict[str, str]]], str] | None = None,
        echo: Callable[[str], None] = print,
    ):
        self.sandbox, self.seed, self.install, self.timeout = sandbox, seed, install, timeout
        self.max_failing_share, self.max_tries, self.chat, self.echo = (
            max_failing_share,
            max_tries,
            chat,
            echo,
        )

    def run(self, instance: RepoInstance, env: Path, tree: bytes, trace: bool = False) -> TestRun:
        run = run_tests(
            self.sandbox, instance, env, tree, "", timeout=self.timeout, test_files=[], trace=trace
        )
        if run.error:
            raise BuildError(f"the test sandbox failed: {run.error}")
        return run

    def baseline(self, instance: RepoInstance, env: Path, tree: bytes) -> Suite:
        traced, plain = self.run(instance, env, tree, trace=True), self.run(instance, env, tree)
        outcomes = [(r.report or {}).get("tests", {}) for r in (traced, plain)]
        passing = sorted(
            t for t, o in outcomes[0].items() if o == "passed" and outcomes[1].get(t) == "passed"
        )
        if not passing:
            tail = (plain.report or {}).get("output_tail", "") or plain.stderr
            if not outcomes[1] and not (plain.report or {}).get("collect_errors"):
                raise BuildError(
                    "pytest finds no tests in this sdist (many packages leave their tests out of it): "
                    f"pick a package or version whose sdist ships them; pytest said:\n{tail[-500:]}"
                )
            raise BuildError(f"no test of the suite passes in the sandbox; pytest said:\n{tail[-1500:]}")
        covered: dict[str, set[int]] = defaultdict(set)
        for path, line in (traced.report or {}).get("covered", []):
            covered[path].add(line)
        return Suite(passing, dict(covered), float((plain.report or {}).get("tests_s", 0.0)))

    def candidates(self, source: Path, suite: Suite) -> list[Mutation]:
        """Mutations of covered non-test code, interleaving kinds in a seeded order."""
        by_kind: dict[str, list[Mutation]] = defaultdict(list)
        for path in sorted(suite.covered):
            file = source / path
            if (
                path.endswith(".py")
                and file.is_file()
                and not re.search(r"(^|/)(tests?|testing)/|(^|/)test_|conftest", path)
            ):
                for mutation in mutations(path, file.read_text(), suite.covered[path]):
                    by_kind[mutation.kind].append(mutation)
        rng = random.Random(self.seed)
        kinds = sorted(by_kind)
        for kind in kinds:
            rng.shuffle(by_kind[kind])
        ordered = []
        while any(by_kind.values()):
            rng.shuffle(kinds)
            ordered += [by_kind[k].pop() for k in kinds if by_kind[k]]
        return ordered

    def build(self, spec: str, out: Path, n: int = 10) -> list[RepoInstance]:
        with tempfile.TemporaryDirectory(prefix="recreate-repo-build-") as tmp:
            sdist = fetch_sdist(spec, Path(tmp) / "download")
            name, version, source = unpack(sdist, Path(tmp) / "src")
            environment = RepoEnvironment(
                install=(DEFAULT_PYTEST, *self.install),
                pythonpath=(import_folder(source),),
                pytest_args=PYTEST_ARGS,
            )
            env = ensure_env(environment, load_settings().home, echo=self.echo)
            repo = GitRepo(source)
            clean = repo.commit_all(f"{name} {version}")
            probe = stub(f"{name}-{version}", name, environment)
            suite = self.baseline(probe, env, repo.archive(clean))
            self.echo(f"{name} {version}: {len(suite.passing)} tests pass ({suite.seconds:.1f} s)")
            kept = self.mutate(name, version, environment, env, repo, clean, suite, source, n)
            snapshot = Path("snapshots") / f"{name}-{version}.bundle"
            repo.bundle(out / snapshot)
            rows = [instance_row(i, str(snapshot)) for i in kept]
            out.mkdir(parents=True, exist_ok=True)
            target = out / f"{name}-{version}.jsonl"
            target.write_text("".join(json.dumps(row, sort_keys=True) + "\n" for row in rows))
            self.echo(f"{len(kept)} instances -> {target}")
            return [replace(i, snapshot=(out / snapshot).resolve()) for i in kept]

    def mutate(
        self, name: str, version: str, environment: RepoEnvironment, env: Path, repo: GitRepo, clean: str,
        suite: Suite, source: Path, n: int,
    ) -> list[RepoInstance]:  # fmt: skip
        passing, kept, used = set(suite.passing), [], set()
        plan = SplitPlan(seed=self.seed)
        for tries, mutation in enumerate(self.candidates(source, suite)):
            if len(kept) >= n or tries >= self.max_tries:
                break
            if mutation.group() in used:
                continue
            repo.checkout(clean)
            (source / mutation.path).write_text(mutation.source)
            commit = repo.commit_all(f"{name} {version}: {mutation.group()}")
            probe = stub(f"{name}-{version}", name, environment)
            report = self.run(probe, env, repo.archive(commit)).report or {}
            outcomes = report.get("tests", {})
            f2p = sorted(t for t in passing if outcomes.get(t) != "passed")
            if report.get("timed_out") or report.get("collect_errors") or not f2p:
                continue
            if len(f2p) > self.max_failing_share * len(passing):
                continue
            instance_id = f"{name}-{version}__{len(kept) + 1:03d}"
            patch = repo.diff(commit, clean)
            messages = report.get("messages", {})
            statement, how = template_statement(name, version, f2p, messages), {"statement": "template"}
            if self.chat is not None:
                statement, how = llm_statement(self.chat, name, version, f2p, messages, patch)
            origin = {
                "builder": "recreate",
                "seed": self.seed,
                "group": mutation.group(),
                "kind": mutation.kind,
                **how,
            }
            instance = stub(
                instance_id, name, environment, base_commit=commit, problem_statement=statement, patch=patch,
                fail_to_pass=tuple(f2p), pass_to_pass=tuple(sorted(passing - set(f2p))),
                split=plan.split_of(mutation.group()), group=mutation.group(), origin=origin,
            )  # fmt: skip
            checked = verdict(
                instance,
                run_tests(self.sandbox, instance, env, repo.archive(commit), patch, timeout=self.timeout),
                self.timeout,
            )
            if not checked.passed:
                self.echo(
                    f"  dropped a mutation whose gold patch does not resolve it: {checked.feedback[:200]}"
                )
                continue
            repo.tag(instance_id, commit)
            used.add(mutation.group())
            kept.append(instance)
            self.echo(f"  {instance_id}: {mutation.kind} in {mutation.function}, {len(f2p)} failing")
        if not kept:
            raise BuildError(f"{name} {version}: no mutation made a passing test fail; try another package")
        return kept
