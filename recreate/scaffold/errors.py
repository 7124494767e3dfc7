"""Errors of the scaffold package: every problem names its file and field."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Problem:
    """One thing wrong with a scaffold: where (file, field) and what."""

    file: str  # relative to the scaffold directory, e.g. "scaffold.yaml" or "tools/grep/tool.yaml"
    field: str  # dotted path inside that file ("limits.max_steps"), or "" for the file as a whole
    message: str

    def __str__(self) -> str:
        where = f"{self.file}: {self.field}" if self.field else self.file
        return f"{where}: {self.message}"


class ScaffoldError(ValueError):
    """A scaffold, ref, store or edit problem the caller can fix."""


class ScaffoldValidationError(ScaffoldError):
    """A scaffold is invalid; `problems` lists every problem found, not just the first."""

    def __init__(self, problems: list[Problem], source: str | None = None) -> None:
        self.problems = list(problems)
        self.source = source
        head = f"{source}: " if source else ""
        count = len(self.problems)
        lines = "\n".join(f"  - {p}" for p in self.problems)
        super().__init__(f"{head}invalid scaffold ({count} problem{'s' * (count != 1)}):\n{lines}")


class OpError(ScaffoldError):
    """An edit op does not apply (no match, two matches, unknown id, malformed op)."""

    def __init__(self, message: str, index: int | None = None, op: str | None = None) -> None:
        self.index = index
        self.op = op
        where = f"op {index}" if index is not None else ""
        if op:
            where = f"{where} ({op})".strip()
        super().__init__(f"{where}: {message}" if where else message)
