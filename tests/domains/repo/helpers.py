"""Shared by the repo domain tests: a tiny real sdist (a package that ships its tests), the test venv
(built once into a cache that outlives test runs), and a dataset built from the sdist once per session."""

from __future__ import annotations

import io
import os
import shutil
import tarfile
import tempfile
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "examples" / "repo"
SOURCES = {
    "tinycalc/__init__.py": '''"""Small numeric helpers."""


def clamp(x, low, high):
    if x < low:
        return low
    if x > high:
        return high
    return x


def mean(values):
    if not values:
        raise ValueError("mean of nothing")
    return sum(values) / len(values)


def span(values):
    return max(values) - min(values)


def is_even(number):
    return number % 2 == 0


def window(values, size):
    out = []
    for start in range(len(values) - size + 1):
        out.append(values[start : start + size])
    return out
''',
    "tests/test_tinycalc.py": """import pytest

from tinycalc import clamp, is_even, mean, span, window


def test_clamp_inside():
    assert clamp(5, 0, 10) == 5


def test_clamp_low():
    assert clamp(-3, 0, 10) == 0


def test_clamp_high():
    assert clamp(42, 0, 10) == 10


def test_mean():
    assert mean([1, 2, 3, 6]) == 3


def test_mean_empty():
    with pytest.raises(ValueError):
        mean([])


def test_span():
    assert span([3, 9, 4]) == 6


@pytest.mark.parametrize("number, expected", [(2, True), (7, False), (0, True)])
def test_is_even(number, expected):
    assert is_even(number) is expected


def test_window():
    assert window([1, 2, 3, 4], 2) == [[1, 2], [2, 3], [3, 4]]
""",
    "PKG-INFO": "Metadata-Version: 2.1\nName: tinycalc\nVersion: 0.1\n",
}


def write_sdist(folder: Path, sources: dict[str, str] = SOURCES) -> Path:
    """tinycalc-0.1.tar.gz: the layout of a real sdist (one top folder, tests shipped)."""
    target = folder / "tinycalc-0.1.tar.gz"
    with tarfile.open(target, "w:gz") as tar:
        for name, text in sorted(sources.items()):
            data = text.encode()
            info = tarfile.TarInfo(f"tinycalc-0.1/{name}")
            info.size, info.mode, info.mtime = len(data), 0o644, 0
            tar.addfile(info, io.BytesIO(data))
    return target


def shared_envs() -> Path:
    """Where test venvs are cached: reachable by the sandbox's unprivileged user, kept between runs."""
    path = Path(os.environ.get("RECREATE_REPO_ENVS") or Path(tempfile.gettempdir()) / "recreate-repo-envs")
    path.mkdir(parents=True, exist_ok=True)
    path.chmod(0o755)
    return path


def public_dir(prefix: str) -> Path:
    path = Path(tempfile.mkdtemp(prefix=prefix))
    path.chmod(0o755)
    return path


@pytest.fixture(scope="session")
def repo_envs(bwrap) -> Path:
    """RECREATE_REPO_ENVS for the session, with the default test venv (pytest) built in it."""
    from recreate.domains.repo.env import ensure_env
    from recreate.domains.repo.instance import RepoEnvironment
    from recreate.envbuild import EnvBuildError

    envs = shared_envs()
    os.environ["RECREATE_REPO_ENVS"] = str(envs)
    try:
        ensure_env(RepoEnvironment())
    except EnvBuildError as exc:
        pytest.skip(f"cannot build the repo test environment (offline without a wheelhouse?): {exc}")
    return envs


@pytest.fixture(scope="session")
def tiny_dataset(repo_envs, bwrap):
    """A dataset built from the tinycalc sdist: (folder with tinycalc-0.1.jsonl, the sdist)."""
    from recreate.domains.repo.build import Builder

    work = public_dir("recreate-repo-test-")
    sdist = write_sdist(work)
    Builder(bwrap, seed=0, echo=lambda _: None).build(str(sdist), work / "data", n=3)
    yield work / "data", sdist
    shutil.rmtree(work, ignore_errors=True)
