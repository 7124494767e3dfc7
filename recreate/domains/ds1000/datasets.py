"""Example datasets that DS-1000 problems download: seaborn's `sns.load_dataset("tips")` and
scikit-learn's `fetch_california_housing()`.

Both libraries download a dataset unless it is in their cache folder ($SEABORN_DATA, $SCIKIT_LEARN_DATA).
Evaluation sandboxes have no network, so such a problem's test fails before any solution is judged, on
every run. A datasets folder holding those caches under the libraries' own folder names
(`seaborn-data/tips.csv`, as in github.com/mwaskom/seaborn-data; `scikit_learn_data/`, as a fetch on a
machine with network leaves it) is bound read-only into the sandboxes, so they run offline; a run whose
tasks need a dataset the folder lacks is refused at start, naming what to put where.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import Path

from recreate.domains.common import shareable_copy, tasks_phrase

MOUNT = "/recreate-datasets"  # where sandboxes see the folder (a new top-level path: bwrap makes it)
SEABORN, SKLEARN = "seaborn-data", "scikit_learn_data"  # the libraries' own names for their caches
_SEABORN_CALL = re.compile(r"""\bload_dataset\(\s*(?:name\s*=\s*)?["']([A-Za-z0-9_-]+)["']""")
_SKLEARN_CALL = re.compile(r"\b(fetch_[a-z0-9_]+)\(")


def default_folder(home: Path) -> Path:
    return home / "datasets"


def needed_datasets(code: str) -> set[str]:
    """What `code` downloads: `seaborn-data/NAME.csv` for each literal `load_dataset("NAME")`, and the
    name of each scikit-learn fetcher it calls (`fetch_california_housing`)."""
    seaborn = {f"{SEABORN}/{name}.csv" for name in _SEABORN_CALL.findall(code)}
    return seaborn | set(_SKLEARN_CALL.findall(code))


def missing_datasets(folder: Path, needed: set[str]) -> list[str]:
    """Those of `needed` the folder lacks; a fetcher's cache is taken to be there when the folder has a
    scikit_learn_data folder (its files are named by scikit-learn's version of each fetcher)."""
    return sorted(item for item in needed if not (folder / (item if "/" in item else SKLEARN)).exists())


def spec_parts(folder: Path) -> tuple[tuple[tuple[str, str], ...], dict[str, str]]:
    """The read-only bind and the variables that make `folder` the libraries' caches in a sandbox (nothing
    when there is no such folder; a world-readable copy when a root-started sandbox's user cannot read it)."""
    if not folder.is_dir():
        return (), {}
    variables = {"SEABORN_DATA": f"{MOUNT}/{SEABORN}", "SCIKIT_LEARN_DATA": f"{MOUNT}/{SKLEARN}"}
    return ((str(shareable_copy(folder)), MOUNT),), variables


def folder_digest(folder: Path, needed: set[str]) -> str:
    """The files of `needed` (what the tasks download) by path, size and modification time, for the
    rollout cache's key: another copy of a dataset is another test. Files no task needs are left out,
    so adding one does not invalidate every cached rollout."""
    wanted = {folder / (item if "/" in item else SKLEARN) for item in needed}
    files: list[Path] = []
    for path in sorted(wanted):
        files += sorted(path.rglob("*")) if path.is_dir() else [path]
    digest = hashlib.sha256()
    for path in (path for path in files if path.is_file()):
        stat = path.stat()
        digest.update(f"{path.relative_to(folder)}\0{stat.st_size}\0{stat.st_mtime_ns}\0".encode())
    return digest.hexdigest()[:16]


def datasets_problem(folder: Path, needs: dict[str, set[str]]) -> str | None:
    """Why tasks (task id -> what its test downloads) cannot run: what `folder` lacks of it."""
    lacking = {key: missing_datasets(folder, needed) for key, needed in sorted(needs.items()) if needed}
    lacking = {key: missing for key, missing in lacking.items() if missing}
    if not lacking:
        return None
    missing = sorted(set().union(*lacking.values()))
    where = [f"{folder}/{item}" for item in missing if "/" in item]
    where += [f"{folder}/{SKLEARN} (as {item}() leaves it online)" for item in missing if "/" not in item]
    return (
        f"{tasks_phrase(list(lacking), 'downloads', 'download')} example data ({', '.join(missing)}), and "
        f"evaluation sandboxes have no network; put {'; '.join(where)} (seaborn's CSVs are in "
        "github.com/mwaskom/seaborn-data), or pass datasets=DIR (-o datasets=DIR), or leave those tasks out"
    )
