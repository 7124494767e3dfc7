"""What ingesting and verifying the experience store report."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class IngestReport:
    added: list[str] = field(default_factory=list)
    duplicates: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)  # "source: problem"
    truncated: list[str] = field(default_factory=list)  # "trajectory step N: stdout 1234567 chars"
    index_deferred: int = 0  # stored but left for the index owner (another process holds the index)

    def merge(self, other: IngestReport) -> None:
        for name in ("added", "duplicates", "errors", "truncated"):
            getattr(self, name).extend(getattr(other, name))
        self.index_deferred += other.index_deferred

    def summary(self) -> str:
        text = (
            f"{len(self.added)} added, {len(self.duplicates)} duplicate(s) skipped, "
            f"{len(self.errors)} error(s), {len(self.truncated)} observation(s) truncated"
        )
        if self.index_deferred:
            text += f"; {self.index_deferred} left for the process that owns the index"
        return text


@dataclass
class DriftReport:
    uncataloged_files: list[str] = field(default_factory=list)
    missing_files: list[str] = field(default_factory=list)
    missing_in_index: list[str] = field(default_factory=list)  # trajectory ids (summary or any step)
    extra_in_index: list[str] = field(default_factory=list)  # index ids with no catalog entry
    vectors_missing: list[str] = field(default_factory=list)  # indexed, but not in the vector file
    memory_missing: list[str] = field(default_factory=list)
    memory_extra: list[str] = field(default_factory=list)

    @property
    def ok(self) -> bool:
        return not any(vars(self).values())

    def lines(self) -> list[str]:
        lines = []
        for name, ids in vars(self).items():
            if ids:
                shown = ", ".join(sorted(ids)[:5]) + (", …" if len(ids) > 5 else "")
                lines.append(f"{name.replace('_', ' ')}: {len(ids)} ({shown})")
        return lines
