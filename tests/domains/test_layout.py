"""The domains' layout: the shared contract at the top of recreate/domains/, one package per domain that
reaches no other domain, and every in-sandbox script shipped with the distribution."""

from __future__ import annotations

import ast
import fnmatch
import tomllib
from pathlib import Path

import pytest

from recreate.domains.registry import BUILTIN_DOMAINS

REPO = Path(__file__).resolve().parents[2]
DOMAINS = REPO / "recreate" / "domains"
PACKAGES = sorted(p.name for p in DOMAINS.iterdir() if (p / "__init__.py").is_file())
DISPATCHER = DOMAINS / "cli.py"  # `recreate domain ...` hands each domain's commands to its own cli.py


def imported(path: Path) -> set[str]:
    """The modules `path` imports (absolute names), at any depth of the file."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def domain_of(module: str) -> str | None:
    parts = module.split(".")
    return (
        parts[2] if parts[:2] == ["recreate", "domains"] and len(parts) > 2 and parts[2] in PACKAGES else None
    )


def test_every_built_in_domain_is_a_package_of_its_own():
    assert {module for module, _, _ in BUILTIN_DOMAINS.values()} == {
        f"recreate.domains.{p}" for p in PACKAGES
    }


@pytest.mark.parametrize("package", PACKAGES)
def test_a_domain_package_reaches_no_other_domain(package):
    for path in (DOMAINS / package).rglob("*.py"):
        others = {domain_of(m) for m in imported(path)} - {None, package}
        assert not others, f"{path.relative_to(REPO)} imports the domain(s) {sorted(others)}"


def test_the_shared_contract_depends_on_no_domain():
    for path in DOMAINS.glob("*.py"):
        if path != DISPATCHER:
            used = {domain_of(m) for m in imported(path)} - {None}
            assert not used, f"{path.relative_to(REPO)} imports the domain(s) {sorted(used)}"


def test_every_file_the_sandboxes_get_ships_in_the_wheel():
    """Scripts in checks/ and probes/ are read as files, not imported: setuptools ships them only as
    package data, so each must match a package-data pattern of pyproject.toml."""
    patterns = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    root = REPO / "recreate"
    loose = [
        path.relative_to(root).as_posix()
        for path in root.rglob("*.py")
        if "__pycache__" not in path.parts and not (path.parent / "__init__.py").is_file()
    ]
    assert loose, "no in-sandbox scripts found: has the layout moved?"
    unshipped = [name for name in loose if not any(fnmatch.fnmatch(name, p) for p in patterns["recreate"])]
    assert not unshipped, f"add to [tool.setuptools.package-data] recreate: {unshipped}"


def test_domain_modules_stay_small():
    for path in [*DOMAINS.rglob("*.py"), REPO / "recreate" / "envbuild.py"]:
        lines = len(path.read_text().splitlines())
        assert lines <= 400, f"{path.relative_to(REPO)}: {lines} lines; split it"
