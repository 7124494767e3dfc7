"""Versioned scaffold store: immutable, content-hashed versions with lineage.

```
<root>/<name>/HEAD                   "v7": the version `name` and `name@head` resolve to
<root>/<name>/v7/scaffold/...        the canonical scaffold files (never rewritten)
<root>/<name>/v7/meta.json           lineage: parent, ops, rationale, evidence, hash, validation
<root>/<name>/v7/scores.jsonl        validation scores, attached any time later (append-only)
<root>/<name>/events.jsonl           head moves (commits, rollbacks)
```
Every write happens under a per-name file lock (threads and processes) and lands by rename, so a
reader never sees half a version and two writers never get the same version number.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import tempfile
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from filelock import FileLock
from pydantic import BaseModel, Field

from recreate.jsonl import append_jsonl, read_jsonl
from recreate.scaffold.diff import ScaffoldDiff, diff_scaffolds
from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.files import read_dir, write_dir
from recreate.scaffold.model import NAME_PATTERN, Scaffold
from recreate.scaffold.ops import apply, ops_to_json, parse_ops
from recreate.scaffold.validate import Bounds, validate_scaffold

if TYPE_CHECKING:
    from recreate.sandbox.base import Sandbox, SandboxSpec

_VERSION_DIR = re.compile(r"^v(\d+)$")
_LOCK_TIMEOUT_S = 120.0


class VersionInfo(BaseModel):
    name: str
    version: int
    hash: str
    parent: str | None = None  # "name@v3"
    ops: list[dict[str, Any]] = Field(default_factory=list)
    rationale: str = ""
    evidence: list[str] = Field(default_factory=list)
    message: str = ""
    created_at: str
    validated: dict[str, Any] = Field(default_factory=dict)  # {"static": True, "sandbox": "bwrap" | None}
    scores: list[dict[str, Any]] = Field(default_factory=list)  # from scores.jsonl, oldest first

    @property
    def ref(self) -> str:
        return f"{self.name}@v{self.version}"


def default_root() -> Path:
    from recreate.config import load_settings

    return load_settings().home / "scaffolds"


class ScaffoldStore:
    def __init__(self, root: str | Path | None = None) -> None:
        self.root = Path(root) if root is not None else default_root()

    # -- reading ---------------------------------------------------------------------------------

    def names(self) -> list[str]:
        if not self.root.is_dir():
            return []
        return sorted(p.name for p in self.root.iterdir() if p.is_dir() and self.versions(p.name))

    def versions(self, name: str) -> list[int]:
        folder = self.root / name
        if not folder.is_dir():
            return []
        return sorted(int(m.group(1)) for p in folder.iterdir() if (m := _VERSION_DIR.match(p.name)))

    def resolve(self, ref: str) -> VersionInfo:
        """`name`, `name@head`, `name@latest`, `name@v7` or `name@<hash prefix of 7+ hex>`."""
        name, _, selector = ref.partition("@")
        selector = selector or "head"
        versions = self.versions(name) if re.fullmatch(NAME_PATTERN, name) else []
        if not versions:
            known = ", ".join(self.names()) or "none"
            raise ScaffoldError(f"no scaffold named {name!r} in store {self.root} (stored: {known})")
        if selector == "head":
            return self._info(name, self._head(name))
        if selector == "latest":
            return self._info(name, versions[-1])
        if (m := _VERSION_DIR.match(selector)) and int(m.group(1)) in versions:
            return self._info(name, int(m.group(1)))
        if re.fullmatch(r"[0-9a-f]{7,64}", selector):
            hits = [v for v in versions if self._info(name, v).hash.startswith(selector)]
            if len(hits) == 1:
                return self._info(name, hits[0])
        listed = ", ".join(f"v{v}" for v in versions)
        raise ScaffoldError(
            f"{ref!r}: no such version of {name!r} (versions: {listed}; or head, latest, a hash)"
        )

    def load(self, ref: str) -> Scaffold:
        """The scaffold at `ref`; its content hash is checked against the recorded one."""
        info = self.resolve(ref)
        scaffold = read_dir(self._version_dir(info.name, info.version) / "scaffold")
        if scaffold.content_hash() != info.hash:
            raise ScaffoldError(
                f"{info.ref}: stored files do not match their recorded hash (edited by hand?); "
                f"export an earlier version or commit the edited directory as a new version"
            )
        scaffold._ref = info.ref
        return scaffold

    def log(self, name: str) -> list[VersionInfo]:
        return [self._info(name, v) for v in self.versions(name)]

    def lineage(self, ref: str) -> list[VersionInfo]:
        """The chain of versions from the root ancestor to `ref`."""
        chain = [self.resolve(ref)]
        while chain[-1].parent:
            chain.append(self.resolve(chain[-1].parent))
        return chain[::-1]

    def head(self, name: str) -> VersionInfo:
        return self.resolve(f"{name}@head")

    def diff(self, a: str | Scaffold, b: str | Scaffold) -> ScaffoldDiff:
        left, right = (self.load(x) if isinstance(x, str) else x for x in (a, b))
        return diff_scaffolds(left, right)

    def export(self, ref: str, dest: str | Path) -> Path:
        """Write the version as a plain scaffold directory, with its lineage in `.lineage.json`."""
        out = write_dir(self.load(ref), dest)
        lineage = [info.model_dump(mode="json") for info in self.lineage(ref)]
        (out / ".lineage.json").write_text(
            json.dumps(lineage, indent=1, ensure_ascii=False), encoding="utf-8"
        )
        return out

    # -- writing ---------------------------------------------------------------------------------

    def commit(
        self,
        scaffold: Scaffold,
        *,
        parent: str | None = None,
        ops: Iterable[Any] = (),
        rationale: str = "",
        evidence: Iterable[str] = (),
        message: str = "",
        bounds: Bounds | None = None,
        sandbox_checked: str | None = None,
        set_head: bool = True,
    ) -> VersionInfo:
        """Store `scaffold` as the next version of its name. The static checks always run here;
        `sandbox_checked` records the backend its smoke tests passed in (see `apply`). A commit
        whose content equals its parent's (default parent: the head) returns the parent."""
        validate_scaffold(scaffold, bounds=bounds)
        ops_json = ops_to_json(list(ops))
        digest = scaffold.content_hash()
        name = scaffold.name
        with self._locked(name):
            versions = self.versions(name)
            parent_info = self.resolve(parent) if parent else (self.head(name) if versions else None)
            if parent_info and parent_info.name != name:
                raise ScaffoldError(f"parent {parent_info.ref} belongs to another scaffold than {name!r}")
            if parent_info and parent_info.hash == digest:
                return parent_info
            op_evidence = [e for op in ops_json for e in op.get("evidence", [])]
            op_rationale = [op["rationale"] for op in ops_json if op.get("rationale")]
            info = VersionInfo(
                name=name,
                version=(versions[-1] if versions else 0) + 1,
                hash=digest,
                parent=parent_info.ref if parent_info else None,
                ops=ops_json,
                rationale=rationale or "\n".join(op_rationale),
                evidence=list(dict.fromkeys([*evidence, *op_evidence])),
                message=message,
                created_at=datetime.now(UTC).isoformat(timespec="seconds"),
                validated={"static": True, "sandbox": sandbox_checked},
            )
            for stale in (self.root / name).glob(".tmp-*"):  # left by a killed writer; we hold the lock
                shutil.rmtree(stale, ignore_errors=True)
            tmp = Path(tempfile.mkdtemp(prefix=".tmp-", dir=self.root / name))
            try:
                write_dir(scaffold, tmp / "scaffold")
                (tmp / "meta.json").write_text(
                    info.model_dump_json(indent=1, exclude={"scores"}), encoding="utf-8"
                )
                os.rename(tmp, self._version_dir(name, info.version))
            except BaseException:
                shutil.rmtree(tmp, ignore_errors=True)
                raise
            if set_head:
                self._set_head(name, info.version, event="commit")
        return info

    def apply(
        self,
        ref: str,
        ops: Any,
        *,
        rationale: str = "",
        message: str = "",
        sandbox: Sandbox | None = None,
        spec: SandboxSpec | None = None,
        bounds: Bounds | None = None,
        set_head: bool = True,
    ) -> VersionInfo:
        """Apply edit ops to the version at `ref` and commit the result as its child. All or nothing:
        if an op does not apply or the result is invalid, the store is unchanged."""
        ops = parse_ops(ops)
        base = self.load(ref)
        new = apply(base, ops, sandbox=sandbox, bounds=bounds, spec=spec)
        checked = sandbox.name if sandbox is not None else None
        return self.commit(
            new,
            parent=base.ref,
            ops=ops,
            rationale=rationale,
            message=message,
            bounds=bounds,
            sandbox_checked=checked,
            set_head=set_head,
        )

    def rollback(self, name: str, to: str | None = None) -> VersionInfo:
        """Move the head to `to` (a ref or "v3"), by default to the head's parent."""
        with self._locked(name):
            head = self.head(name)
            if to is None:
                if not head.parent:
                    raise ScaffoldError(f"{head.ref} has no parent to roll back to")
                to = head.parent
            target = self.resolve(to if "@" in to else f"{name}@{to}")
            if target.name != name:
                raise ScaffoldError(f"cannot roll {name!r} back to {target.ref}: another scaffold")
            self._set_head(name, target.version, event="rollback", previous=head.ref)
        return target

    def set_head(self, ref: str, event: str = "set_head") -> VersionInfo:
        """Move the head to the version at `ref` (e.g. a candidate that passed the evolve gate)."""
        target = self.resolve(ref)
        with self._locked(target.name):
            previous = self.head(target.name).ref
            self._set_head(target.name, target.version, event=event, previous=previous)
        return target

    def attach_scores(
        self, ref: str, scores: dict[str, float], label: str = "", **details: Any
    ) -> VersionInfo:
        """Record validation scores for a version (it stays immutable: scores are appended beside it)."""
        info = self.resolve(ref)
        record = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "label": label,
            "scores": scores,
            **details,
        }
        with self._locked(info.name):
            append_jsonl(self._version_dir(info.name, info.version) / "scores.jsonl", [record], default=str)
        return self.resolve(info.ref)

    # -- internals -------------------------------------------------------------------------------

    @contextmanager
    def _locked(self, name: str) -> Iterator[None]:
        if not re.fullmatch(NAME_PATTERN, name):
            raise ScaffoldError(f"invalid scaffold name {name!r}")
        folder = self.root / name
        folder.mkdir(parents=True, exist_ok=True)
        with FileLock(folder / ".lock", timeout=_LOCK_TIMEOUT_S):
            yield

    def _version_dir(self, name: str, version: int) -> Path:
        return self.root / name / f"v{version}"

    def _head(self, name: str) -> int:
        head_file = self.root / name / "HEAD"
        if not head_file.exists():  # a first commit interrupted between its rename and its HEAD write
            return self.versions(name)[-1]
        text = head_file.read_text(encoding="utf-8").strip()
        match = _VERSION_DIR.match(text)
        if not match:
            raise ScaffoldError(f"{self.root / name / 'HEAD'}: corrupt (expected 'v<N>', found {text!r})")
        return int(match.group(1))

    def _set_head(self, name: str, version: int, event: str, **details: Any) -> None:
        folder = self.root / name
        _atomic_write(folder / "HEAD", f"v{version}\n")
        record = {
            "at": datetime.now(UTC).isoformat(timespec="seconds"),
            "event": event,
            "head": f"v{version}",
            **details,
        }
        append_jsonl(folder / "events.jsonl", [record])

    def _info(self, name: str, version: int) -> VersionInfo:
        folder = self._version_dir(name, version)
        try:
            info = VersionInfo.model_validate_json((folder / "meta.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ScaffoldError(f"{folder}/meta.json: unreadable ({exc})") from exc
        scores = folder / "scores.jsonl"
        if scores.exists():
            info.scores = read_jsonl(scores)  # a line torn by a killed writer is skipped, with a warning
        return info


def _atomic_write(path: Path, text: str) -> None:
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
