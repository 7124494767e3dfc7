"""A readable, per-component diff between two scaffolds."""

from __future__ import annotations

import difflib
from dataclasses import dataclass, field
from typing import Any, Literal

from recreate.scaffold.model import Scaffold

Kind = Literal["added", "removed", "changed"]
_TEXT_FIELDS = ("description", "system_prompt", "instance_template")
_MARK = {"added": "+", "removed": "-", "changed": "~"}


@dataclass(frozen=True)
class Change:
    component: str  # "system_prompt", "limits", "rules", "tools", "memory", "examples", "metadata", ...
    key: str  # the field, rule id, tool name, memory id, example position ("#1") or metadata key
    kind: Kind
    detail: str = ""  # a unified diff for text, "old -> new" for values, a summary for added/removed

    def render(self) -> str:
        head = f"{_MARK[self.kind]} [{self.component}] {self.key}"
        if not self.detail:
            return head
        if "\n" in self.detail:
            return head + "\n" + "\n".join("    " + line for line in self.detail.splitlines())
        return f"{head}: {self.detail}"


@dataclass
class ScaffoldDiff:
    a: str
    b: str
    changes: list[Change] = field(default_factory=list)

    def __bool__(self) -> bool:
        return bool(self.changes)

    def components(self) -> list[str]:
        return list(dict.fromkeys(c.component for c in self.changes))

    def render(self) -> str:
        if not self.changes:
            return f"{self.a} and {self.b} are identical"
        return "\n".join([f"--- {self.a}", f"+++ {self.b}", *(c.render() for c in self.changes)])


def diff_scaffolds(a: Scaffold, b: Scaffold) -> ScaffoldDiff:
    out = ScaffoldDiff(a.ref or a.name, b.ref or b.name)
    for name in ("name", "domain", "action_format"):
        old, new = getattr(a, name), getattr(b, name)
        if old != new:
            out.changes.append(Change(name, name, "changed", f"{old!r} -> {new!r}"))
    for name in _TEXT_FIELDS:
        old, new = getattr(a, name), getattr(b, name)
        if old != new:
            out.changes.append(Change(name, name, "changed", text_diff(old, new)))
    limits_a, limits_b = a.limits.model_dump(), b.limits.model_dump()
    for key in limits_a:
        if limits_a[key] != limits_b[key]:
            out.changes.append(Change("limits", key, "changed", f"{limits_a[key]} -> {limits_b[key]}"))
    out.changes += _item_changes(
        "rules", "id", [r.model_dump() for r in a.rules], [r.model_dump() for r in b.rules]
    )
    out.changes += _item_changes(
        "tools", "name", [t.model_dump() for t in a.tools], [t.model_dump() for t in b.tools]
    )
    out.changes += _item_changes(
        "memory", "id", [m.model_dump() for m in a.memory], [m.model_dump() for m in b.memory]
    )
    out.changes += _item_changes("examples", "example", _examples(a), _examples(b))
    out.changes += _metadata_changes(a.metadata, b.metadata)
    return out


def _examples(scaffold: Scaffold) -> list[dict[str, Any]]:
    """The worked examples keyed by position ("#1" is the first), as `remove_example` names them."""
    return [{"example": f"#{n}", **e.model_dump()} for n, e in enumerate(scaffold.examples, start=1)]


def _metadata_changes(old: dict[str, Any], new: dict[str, Any]) -> list[Change]:
    """One change per top-level metadata key (its value can be a whole imported config: not shown)."""
    changes = []
    for key in sorted(old.keys() | new.keys()):
        if key not in old:
            changes.append(Change("metadata", key, "added"))
        elif key not in new:
            changes.append(Change("metadata", key, "removed"))
        elif old[key] != new[key]:
            changes.append(Change("metadata", key, "changed"))
    return changes


def text_diff(old: str, new: str) -> str:
    lines = difflib.unified_diff(old.splitlines(), new.splitlines(), "before", "after", lineterm="", n=1)
    return "\n".join(list(lines)[2:])  # drop the ---/+++ header: the component already names it


def _item_changes(
    component: str, key: str, old: list[dict[str, Any]], new: list[dict[str, Any]]
) -> list[Change]:
    before = {item[key]: item for item in old}
    after = {item[key]: item for item in new}
    changes = []
    for ident, item in after.items():
        if ident not in before:
            changes.append(Change(component, ident, "added", _summary(item)))
    for ident, item in before.items():
        if ident not in after:
            changes.append(Change(component, ident, "removed", _summary(item)))
    for ident in before.keys() & after.keys():
        parts = []
        for name, value in after[ident].items():
            previous = before[ident].get(name)
            if previous == value:
                continue
            if isinstance(value, str) and ("\n" in value or "\n" in str(previous) or len(value) > 60):
                parts.append(f"{name}:\n{text_diff(str(previous), value)}")
            else:
                parts.append(f"{name}: {previous!r} -> {value!r}")
        if parts:
            changes.append(
                Change(component, ident, "changed", "\n".join(parts) if len(parts) > 1 else parts[0])
            )
    return sorted(changes, key=lambda c: (c.kind != "added", c.kind != "removed", c.key))


def _summary(item: dict[str, Any]) -> str:
    text = item.get("text") or item.get("title") or item.get("description") or item.get("task") or ""
    text = " ".join(str(text).split())
    return text if len(text) <= 100 else text[:97] + "..."
