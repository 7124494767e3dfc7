"""The floors of the code run one way, read from the source's own imports (every import counts: the
ones inside functions and under TYPE_CHECKING too, so a lazy import cannot hide an upward one).

- `recreate.finetune` (the model half of the loop) sits below `recreate.optimizer`: the optimizer's
  loop calls the fine-tuning step, never the other way round. What both need — the gate's statistics
  (`recreate.evaluation.stats`) and the progress lines (`recreate.progress`) — sits below both. The
  web UI reads runs from disk and sits below it too (the optimizer's report is the UI's run page).
- `recreate` reaches `tapo_backend` only through the trainer's entry points named in
  `tapo_backend/__init__.py` (`TRAINER_ENTRY_POINTS` here), and only from `recreate.finetune`; the
  trajectory schema is the other contract between the two packages.
- Modules stay at most 400 lines, every one of them.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
PACKAGES = ("recreate", "tapo_backend")
MAX_LINES = 400
TRAINER_ENTRY_POINTS = {  # tapo_backend module -> the names recreate.finetune may import from it
    "tapo_backend.config": {"ConfigError", "command_config", "settings_file"},
    "tapo_backend.data": {"dataset_for"},
    "tapo_backend.load": {"OUTSIDE", "link_outside", "trajectory_fault"},
    "tapo_backend.trainer": {"load_tokenizer", "token_logprobs", "train"},
}
BELOW_THE_OPTIMIZER = ("recreate.finetune", "recreate.evaluation.stats", "recreate.progress", "recreate.ui")


def module_name(path: Path) -> str:
    parts = path.relative_to(REPO).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def sources() -> dict[str, Path]:
    return {module_name(p): p for package in PACKAGES for p in sorted((REPO / package).rglob("*.py"))}


def imports(path: Path, name: str | None = None) -> list[tuple[str, str | None]]:
    """(module, name or None) for every import statement in `path` (module `name`, by default the one
    its place in the repository gives), relative ones made absolute."""
    package = (name or module_name(path)).split(".")
    if path.name != "__init__.py":
        package = package[:-1]
    found: list[tuple[str, str | None]] = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
        if isinstance(node, ast.Import):
            found += [(alias.name, None) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = package[: len(package) - node.level + 1] if node.level else []
            module = ".".join([*base, *([node.module] if node.module else [])])
            found += [(module, alias.name) for alias in node.names]
    return found


def reaches(module: str, name: str | None, prefix: str) -> bool:
    """Does importing `name` from `module` import (a module under) `prefix`?"""
    full = f"{module}.{name}" if name else module
    return any(m == prefix or m.startswith(prefix + ".") for m in (module, full))


def offenders(importer_prefix: str, imported_prefix: str) -> list[str]:
    return [
        f"{name} imports {module}{'.' + item if item else ''}"
        for name, path in sources().items()
        if reaches(name, None, importer_prefix)
        for module, item in imports(path)
        if reaches(module, item, imported_prefix)
    ]


@pytest.mark.parametrize("lower", BELOW_THE_OPTIMIZER)
def test_the_floors_below_the_optimizer_do_not_import_it(lower: str) -> None:
    assert offenders(lower, "recreate.optimizer") == []


def test_recreate_reaches_tapo_backend_only_through_the_trainer_entry_points() -> None:
    found = []
    for name, path in sources().items():
        if not name.startswith("recreate"):
            continue
        for module, item in imports(path):
            if not reaches(module, item, "tapo_backend"):
                continue
            allowed = name.startswith("recreate.finetune.") and item in TRAINER_ENTRY_POINTS.get(module, ())
            if not allowed:
                found.append(f"{name} imports {module}.{item or ''}")
    assert found == []


def test_the_entry_points_are_documented_where_tapo_backend_says_what_it_offers() -> None:
    doc = ast.get_docstring(ast.parse((REPO / "tapo_backend" / "__init__.py").read_text(encoding="utf-8")))
    for module, names in TRAINER_ENTRY_POINTS.items():
        for item in names:
            assert f"{module.removeprefix('tapo_backend.')}.{item}" in (doc or ""), (module, item)


def test_modules_stay_within_400_lines() -> None:
    sizes = {
        str(p.relative_to(REPO)): len(p.read_text(encoding="utf-8").splitlines()) for p in sources().values()
    }
    over = {f: n for f, n in sizes.items() if n > MAX_LINES}
    assert over == {}, f"split these modules (at most {MAX_LINES} lines): {over}"


def test_the_walk_sees_lazy_relative_and_type_checking_imports(tmp_path: Path) -> None:
    probe = tmp_path / "probe.py"
    probe.write_text(
        "from typing import TYPE_CHECKING\n"
        "if TYPE_CHECKING:\n    from ..optimizer.loop import EvolveLoop\n"
        "def f():\n    import recreate.optimizer.gate\n    from recreate import optimizer\n"
    )
    walked = imports(probe, "recreate.finetune.probe")
    found = [(m, n) for m, n in walked if reaches(m, n, "recreate.optimizer")]
    assert found == [("recreate.optimizer.loop", "EvolveLoop"), ("recreate.optimizer.gate", None),
                     ("recreate", "optimizer")]  # fmt: skip
    assert not reaches("recreate", "optimizer_x", "recreate.optimizer")
