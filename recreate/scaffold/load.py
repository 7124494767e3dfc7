"""`load_scaffold`: one entry point for a Scaffold, a directory, or a stored ref."""

from __future__ import annotations

from pathlib import Path

from recreate.scaffold.errors import ScaffoldError
from recreate.scaffold.files import SCAFFOLD_FILE, read_dir
from recreate.scaffold.mini_swe import import_config
from recreate.scaffold.model import Scaffold
from recreate.scaffold.store import ScaffoldStore


def load_scaffold(source: Scaffold | str | Path, store: ScaffoldStore | None = None) -> Scaffold:
    """A Scaffold from any of:
    - a Scaffold (returned as is);
    - a scaffold directory (holding scaffold.yaml), or its scaffold.yaml;
    - a mini-swe-agent config file (`*.yaml`), imported (see `recreate.scaffold.mini_swe`);
    - `DIR@v7` where DIR is a store lineage folder (`<store root>/<name>`) or a store root holding
      one scaffold; `DIR` alone means its head;
    - `name@v7` / `name` resolved in `store` (default: Settings.home / "scaffolds").
    Nothing in the scaffold is executed."""
    if isinstance(source, Scaffold):
        return source
    text = str(source)
    path = Path(text).expanduser()
    if path.is_file() and path.name == SCAFFOLD_FILE:
        return read_dir(path.parent)
    if path.is_file() and path.suffix in (".yaml", ".yml"):  # another agent's config (mini-swe-agent)
        return import_config([path])[0]
    if path.is_dir():
        if (path / SCAFFOLD_FILE).is_file():
            return read_dir(path)
        return _from_store_path(path, "head", text)
    location, sep, selector = text.rpartition("@")
    if sep and Path(location).expanduser().is_dir():
        return _from_store_path(Path(location).expanduser(), selector, text)
    if "/" in text or text.startswith("."):
        raise ScaffoldError(f"{text}: no such scaffold directory or store path")
    return (store or ScaffoldStore()).load(text)


def _from_store_path(path: Path, selector: str, text: str) -> Scaffold:
    """`path` is a lineage folder (`<root>/<name>`) or a store root with exactly one scaffold."""
    lineage_store = ScaffoldStore(path.parent)
    if lineage_store.versions(path.name):
        return lineage_store.load(f"{path.name}@{selector}")
    names = ScaffoldStore(path).names()
    if len(names) == 1:
        return ScaffoldStore(path).load(f"{names[0]}@{selector}")
    if names:
        raise ScaffoldError(
            f"{text}: store {path} holds several scaffolds ({', '.join(names)}); use {path}/<name>@{selector}"
        )
    raise ScaffoldError(
        f"{text}: {path} is neither a scaffold directory (no {SCAFFOLD_FILE}) nor a scaffold store"
    )
