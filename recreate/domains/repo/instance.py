"""Repository task instances in SWE-bench's schema, so SWE-bench and SWE-smith JSONL files load as they are.

    {"instance_id", "repo", "base_commit", "problem_statement", "patch" (the gold fix), "test_patch",
     "FAIL_TO_PASS", "PASS_TO_PASS",          # lists of pytest node ids (or JSON strings of them)
     "snapshot": "snapshots/pkg-1.0.bundle",  # optional: a git bundle or repository holding base_commit
     "environment": {...}, "split": "train"}   # optional: how the tests run (RepoEnvironment); fixed split

An instance with a snapshot is evaluated from it (any sandbox backend, the environment a venv built by
`recreate domain setup repo`); one without (SWE-bench proper) is evaluated in its published image.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from recreate.domains.common import DomainDataError, read_jsonl

DEFAULT_PYTEST = "pytest==8.3.5"
SWEBENCH_PYTHON = "/opt/miniconda3/envs/testbed/bin/python"
SWEBENCH_SOURCE = "/testbed"
REQUIRED = ("instance_id", "repo", "problem_statement", "patch", "FAIL_TO_PASS")


@dataclass(frozen=True)
class RepoEnvironment:
    """How an instance's tests run. With `image` (docker): the image's `interpreter` runs pytest on a copy
    of `source`; otherwise a venv of `python_version` with `install` runs it on the snapshot."""

    install: tuple[str, ...] = (DEFAULT_PYTEST,)
    python_version: str = "3.11"
    pythonpath: tuple[str, ...] = (".",)  # folders of the repository put on PYTHONPATH
    pytest_args: tuple[str, ...] = ()
    image: str | None = None
    interpreter: str = SWEBENCH_PYTHON
    source: str = SWEBENCH_SOURCE

    def key(self) -> str:
        """Names the venv: instances with the same requirements share one."""
        text = json.dumps([self.python_version, sorted(self.install)])
        return "repo-" + hashlib.sha256(text.encode()).hexdigest()[:12]

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "install": list(self.install),
            "python_version": self.python_version,
            "pythonpath": list(self.pythonpath),
            "pytest_args": list(self.pytest_args),
        }
        if self.image:
            out |= {"image": self.image, "interpreter": self.interpreter, "source": self.source}
        return out


@dataclass(frozen=True)
class RepoInstance:
    instance_id: str
    repo: str
    base_commit: str | None
    problem_statement: str
    patch: str
    test_patch: str
    fail_to_pass: tuple[str, ...]
    pass_to_pass: tuple[str, ...]
    environment: RepoEnvironment
    snapshot: Path | None = None
    split: str | None = None
    group: str | None = None
    origin: dict[str, Any] = field(default_factory=dict)  # how it was made (builder, mutation)

    def test_files(self) -> list[str]:
        """The files holding the instance's tests, in first-seen order (pytest runs these)."""
        files = dict.fromkeys(t.split("::")[0] for t in (*self.fail_to_pass, *self.pass_to_pass))
        return [f for f in files if f]


def swebench_image(instance_id: str) -> str:
    """The published evaluation image of a SWE-bench instance, named as the SWE-bench harness names it."""
    return f"swebench/sweb.eval.x86_64.{instance_id.lower().replace('__', '_1776_')}:latest"


def test_list(value: Any, where: str, name: str) -> tuple[str, ...]:
    """A list of test ids; SWE-bench's Hugging Face export stores them as JSON strings."""
    if isinstance(value, str):
        try:
            value = json.loads(value) if value.strip() else []
        except json.JSONDecodeError:
            raise DomainDataError(f"{where}: {name} is a string but not a JSON list of test ids") from None
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise DomainDataError(f"{where}: {name} must be a list of test ids (strings)")
    return tuple(value)


def parse_environment(value: Any, has_snapshot: bool, instance_id: str, where: str) -> RepoEnvironment:
    if value is None:
        value = {}
    if not isinstance(value, dict):
        raise DomainDataError(f"{where}: environment must be an object (install, pythonpath, image, ...)")
    unknown = sorted(set(value) - set(RepoEnvironment.__dataclass_fields__))
    if unknown:
        known = ", ".join(RepoEnvironment.__dataclass_fields__)
        raise DomainDataError(f"{where}: environment has unknown key(s) {', '.join(unknown)}; known: {known}")
    fields = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    if not has_snapshot and not fields.get("image"):
        fields["image"] = swebench_image(instance_id)  # SWE-bench proper: the repository is in the image
    return RepoEnvironment(**fields)


def parse_row(row: dict[str, Any], path: Path, number: int) -> RepoInstance:
    where = f"{path}:{number}"
    missing = [name for name in REQUIRED if row.get(name) in (None, "")]
    if missing:
        raise DomainDataError(f"{where}: lacks {', '.join(missing)} (SWE-bench instance fields)")
    snapshot = row.get("snapshot")
    if snapshot is not None:
        snapshot = (path.parent / snapshot).resolve()
        if not snapshot.exists():
            raise DomainDataError(f"{where}: snapshot {snapshot} does not exist; rebuild or fix the path")
    if snapshot is not None and not row.get("base_commit"):
        raise DomainDataError(f"{where}: an instance with a snapshot needs the base_commit inside it")
    instance_id = str(row["instance_id"])
    split = row.get("split")
    if split not in (None, "train", "val", "test"):
        raise DomainDataError(f"{where}: split must be train, val or test, got {split!r}")
    origin = row.get("created_by") if isinstance(row.get("created_by"), dict) else {}
    return RepoInstance(
        instance_id=instance_id,
        repo=str(row["repo"]),
        base_commit=row.get("base_commit"),
        problem_statement=str(row["problem_statement"]),
        patch=str(row["patch"]),
        test_patch=str(row.get("test_patch") or ""),
        fail_to_pass=test_list(row["FAIL_TO_PASS"], where, "FAIL_TO_PASS"),
        pass_to_pass=test_list(row.get("PASS_TO_PASS") or [], where, "PASS_TO_PASS"),
        environment=parse_environment(row.get("environment"), snapshot is not None, instance_id, where),
        snapshot=snapshot,
        split=split,
        group=origin.get("group"),
        origin=origin,
    )


def load_instances(path: Path) -> list[RepoInstance]:
    instances = [parse_row(row, path, number) for number, row in read_jsonl(path)]
    if not instances:
        raise DomainDataError(f"{path}: no instances in the file")
    return instances


def instance_row(instance: RepoInstance, snapshot: str | None) -> dict[str, Any]:
    """The JSONL row of an instance (the builder writes these); `snapshot` relative to the file."""
    row: dict[str, Any] = {
        "instance_id": instance.instance_id,
        "repo": instance.repo,
        "base_commit": instance.base_commit,
        "snapshot": snapshot,
        "problem_statement": instance.problem_statement,
        "patch": instance.patch,
        "test_patch": instance.test_patch,
        "FAIL_TO_PASS": list(instance.fail_to_pass),
        "PASS_TO_PASS": list(instance.pass_to_pass),
        "environment": instance.environment.to_json(),
        "split": instance.split,
        "created_by": instance.origin,
    }
    return row
