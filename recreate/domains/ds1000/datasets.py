"""Example data DS-1000 problems download at run time: seaborn's `sns.load_dataset("tips")`, and
scikit-learn's `fetch_*()`, keras' `datasets.*.load_data()`, URLs.

Evaluation sandboxes have no network, so such a problem's test failed before any solution was judged, on
every run. Seaborn's datasets can come from a folder instead: `seaborn-data/NAME.csv` (the files of
github.com/mwaskom/seaborn-data) in the datasets folder (<home>/datasets, or `datasets=DIR`). Each file
a task needs is bound alone, read-only, as seaborn's cache ($SEABORN_DATA): nothing else of the folder
reaches a sandbox. The other downloads cannot run offline. A run whose tasks need what is missing is
refused at start, naming the files and the tasks.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import tempfile
from collections.abc import Collection
from pathlib import Path

from recreate.domains.common import others_can_read, tasks_phrase
from recreate.domains.ds1000.judge import test_trees

MOUNT = "/recreate-datasets"  # seaborn's cache in a sandbox (a new top-level path: bwrap makes it)
SEABORN = "seaborn-data"
SOURCE = "github.com/mwaskom/seaborn-data"
SKLEARN_FETCHERS = frozenset(
    [
        "fetch_20newsgroups",
        "fetch_20newsgroups_vectorized",
        "fetch_california_housing",
        "fetch_covtype",
        "fetch_file",
        "fetch_kddcup99",
        "fetch_lfw_pairs",
        "fetch_lfw_people",
        "fetch_olivetti_faces",
        "fetch_openml",
        "fetch_rcv1",
        "fetch_species_distributions",
    ]
)
NETWORK_CALLS = frozenset({"urlopen", "urlretrieve", "get_rdataset"})
_NAME = re.compile(r"[A-Za-z0-9_-]{1,64}")  # seaborn's dataset names; anything else names no file here
Downloads = tuple[frozenset[str], frozenset[str]]  # (seaborn dataset names, downloads no folder serves)


def needed_downloads(code_context: str) -> Downloads:
    """What a task's test downloads: the seaborn datasets it loads by name, and what else it fetches
    (`fetch_covtype()`, a URL, `load_dataset(name)`, `load_dataset("x", cache=False)`)."""
    seaborn, other = set(), set()
    for tree in test_trees(code_context):
        aliases = _aliases(tree)
        for call in (node for node in ast.walk(tree) if isinstance(node, ast.Call)):
            name = _dotted(call.func, aliases)
            last = name.rsplit(".", 1)[-1]
            if last == "load_dataset" and name.startswith(("seaborn.", "sns.")):
                first = call.args[0] if call.args else _keyword(call, "name")
                cached = not _false(_keyword(call, "cache"))
                literal = first.value if isinstance(first, ast.Constant) else None
                if isinstance(literal, str) and _NAME.fullmatch(literal) and cached:
                    seaborn.add(literal)
                else:
                    other.add("seaborn's load_dataset(...)")
            elif last in SKLEARN_FETCHERS or last in NETWORK_CALLS:
                other.add(f"{last}()")
            elif last == "load_data" and ".datasets." in name:
                other.add(f"{name}()")
            other |= {arg.value[:60] for arg in call.args if _is_url(arg)}
    return frozenset(seaborn), frozenset(other)


def dataset_files(folder: Path, names: set[str], answers: set[Path], private: Path) -> dict[str, Path]:
    """Name -> the file to bind, for each of `names` the folder has as `seaborn-data/NAME.csv`: a
    regular file (links resolved) that is none of `answers` (the tasks files) and not in `private` (the
    home: run state) unless the folder itself is there. A file a root-started sandbox's user cannot
    read is copied, named by its content."""
    inside, files = folder.resolve(), {}
    for name in sorted(names):
        path = (folder / SEABORN / f"{name}.csv").resolve()
        hidden = path in answers or (path.is_relative_to(private) and not path.is_relative_to(inside))
        if path.is_file() and not hidden:
            files[name] = _shareable(path)
    return files


def spec_parts(files: dict[str, Path]) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """The read-only binds and the variable that make `files` seaborn's cache in a sandbox."""
    if not files:
        return (), {}
    binds = tuple((str(path), f"{MOUNT}/{name}.csv") for name, path in files.items())
    return binds, {"SEABORN_DATA": MOUNT}


def files_digest(files: dict[str, Path]) -> str:
    """The bound files by name and content, for the rollout cache's key: another copy of a dataset is
    another test."""
    digest = hashlib.sha256()
    for name, path in sorted(files.items()):
        digest.update(f"{name}\0".encode() + hashlib.sha256(path.read_bytes()).digest())
    return digest.hexdigest()[:16]


def downloads_problem(folder: Path, needs: dict[str, Downloads], present: Collection[str]) -> str | None:
    """Why tasks (task id -> what its test downloads) cannot run offline, else None."""
    lacking = {key: names - set(present) for key, (names, _) in sorted(needs.items()) if names - set(present)}
    online = {key: sorted(other) for key, (_, other) in sorted(needs.items()) if other}
    if not lacking and not online:
        return None
    parts = []
    if lacking:
        files = ", ".join(f"{name}.csv" for name in sorted(set().union(*lacking.values())))
        parts.append(
            f"{tasks_phrase(list(lacking), 'loads', 'load')} seaborn's example data: put {files} (from "
            f"{SOURCE}) in {folder / SEABORN}, or pass datasets=DIR (-o datasets=DIR) holding {SEABORN}/"
        )
    if online:
        fetched = ", ".join(sorted(set().union(*online.values())))
        named = ", ".join(list(online)[:5]) + (f" and {len(online) - 5} more" if len(online) > 5 else "")
        verb, them = ("downloads", "it") if len(online) == 1 else ("download", "them")
        parts.append(f"{named} {verb} ({fetched}), which no folder serves: leave {them} out of the data")
    return "evaluation sandboxes have no network; " + "; ".join(parts)


def _aliases(tree: ast.Module) -> dict[str, str]:
    """Local name -> what it imports (`sns` -> seaborn, `ld` -> seaborn.load_dataset)."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):  # `import a.b` binds a; `import a.b as c` binds c to a.b
            for alias in node.names:
                top = alias.name.split(".")[0]
                aliases[alias.asname or top] = alias.name if alias.asname else top
        elif isinstance(node, ast.ImportFrom) and node.module:
            aliases |= {alias.asname or alias.name: f"{node.module}.{alias.name}" for alias in node.names}
    return aliases


def _dotted(func: ast.expr, aliases: dict[str, str]) -> str:
    parts = []
    while isinstance(func, ast.Attribute):
        parts.append(func.attr)
        func = func.value
    if isinstance(func, ast.Name):
        parts.append(aliases.get(func.id, func.id))
    return ".".join(reversed(parts))


def _keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((keyword.value for keyword in call.keywords if keyword.arg == name), None)


def _false(node: ast.expr | None) -> bool:
    return isinstance(node, ast.Constant) and node.value is False


def _is_url(node: ast.expr) -> bool:
    text = node.value if isinstance(node, ast.Constant) else None
    return isinstance(text, str) and text.startswith(("http://", "https://"))


def _shareable(path: Path) -> Path:
    if os.geteuid() != 0 or others_can_read(path):
        return path
    content = path.read_bytes()
    folder = Path(tempfile.gettempdir()) / "recreate-datasets" / hashlib.sha256(content).hexdigest()[:16]
    copy = folder / path.name
    if not copy.is_file():
        folder.mkdir(mode=0o755, parents=True, exist_ok=True)
        folder.parent.chmod(0o755)
        staging = folder / f".{path.name}.{os.getpid()}"
        staging.write_bytes(content)
        staging.chmod(0o644)
        staging.rename(copy)
    return copy
