"""The pinned DS-1000 evaluation environment: a virtualenv built once, bound read-only into sandboxes.

DS-1000 reference solutions were written for old library versions (numpy 1.26, pandas 1.5.3, ...);
newer ones fail some of them, so evaluation never uses the project's own environment.

Standard library only: `scripts/ds1000_env.sh` runs this file directly with any Python 3.11, before
the project is installed. Offline: pip honours PIP_NO_INDEX / PIP_FIND_LINKS (a wheelhouse) and its cache.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import shutil
import stat
import subprocess
import sys
from pathlib import Path

REQUIREMENTS = (
    "numpy==1.26.4",
    "pandas==1.5.3",
    "scipy==1.12.0",
    "scikit-learn==1.4.0",
    "matplotlib==3.8.4",
    "seaborn==0.13.2",
    "statsmodels==0.14.1",
    "xgboost==2.0.3",
    "PyYAML==6.0.2",
)
PYTHON_VERSION = (3, 11)  # pandas 1.5.3 has no wheels for newer Pythons
STAMP = ".recreate-ds1000-ready"
MPL_CACHE = "mpl-cache"  # matplotlib font cache built once, copied into each sandbox HOME


class EnvBuildError(RuntimeError):
    """The environment could not be built; the message says why and what to do."""


SHARED_ENV = Path("/var/tmp/recreate-ds1000-env")


def default_env_path(home: str | Path | None = None) -> Path:
    """RECREATE_DS1000_ENV, else <home>/envs/ds1000 (home: argument, RECREATE_HOME, or .recreate), else
    (root with a home the sandbox's unprivileged uid cannot enter, e.g. a 0700 home) SHARED_ENV."""
    if os.environ.get("RECREATE_DS1000_ENV"):
        return Path(os.environ["RECREATE_DS1000_ENV"]).expanduser().absolute()
    base = Path(home or os.environ.get("RECREATE_HOME") or ".recreate").expanduser()
    private = (base / "envs" / "ds1000").absolute()
    if os.geteuid() != 0 or _others_can_enter(private):
        return private
    return _shared_env()


def _others_can_enter(path: Path) -> bool:
    # the same rule as recreate.domains.repo_env's (this file runs before the package is installed)
    existing = [p for p in (*reversed(path.resolve().parents), path.resolve()) if p.exists()]
    return all(stat.S_ISDIR(m) and m & stat.S_IXOTH for m in (p.stat().st_mode for p in existing))


def _shared_env() -> Path:
    """SHARED_ENV's parent must be root's and closed to others' writes: nobody else may plant a venv."""
    parent = SHARED_ENV.parent
    info = parent.lstat()
    if not stat.S_ISDIR(info.st_mode) or (info.st_uid != 0 and info.st_mode & 0o022):
        raise EnvBuildError(
            f"{parent} is not a safe place for the shared DS-1000 environment; set RECREATE_DS1000_ENV"
        )
    if SHARED_ENV.exists() and (SHARED_ENV.lstat().st_uid != 0 or SHARED_ENV.lstat().st_mode & 0o022):
        raise EnvBuildError(
            f"{SHARED_ENV} (where root keeps the DS-1000 environment when RECREATE_HOME is private) is not a "
            "root-owned folder closed to others' writes; remove it, or set RECREATE_DS1000_ENV"
        )
    return SHARED_ENV


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def _stamp_text(python: str) -> str:
    return "\n".join((python, *REQUIREMENTS)) + "\n"


def is_ready(env: Path) -> bool:
    stamp = env / STAMP
    if not stamp.is_file() or not env_python(env).exists():
        return False
    return stamp.read_text().splitlines()[1:] == list(REQUIREMENTS)


def find_python() -> str:
    """A Python 3.11 to base the venv on: $PYTHON, else a system one first. The venv's interpreter is a
    link to it, and sandboxes see /usr but not home directories (pyenv, conda), so prefer /usr."""
    candidates = [os.environ.get("PYTHON"), "/usr/bin/python3.11", "/usr/local/bin/python3.11"]
    candidates.append(shutil.which("python3.11"))
    if sys.version_info[:2] == PYTHON_VERSION:
        candidates.append(getattr(sys, "_base_executable", sys.executable))
    for candidate in candidates:
        if not candidate or not Path(candidate).exists():
            continue
        probe = subprocess.run(
            [candidate, "-c", "import sys, venv; print('%d.%d' % sys.version_info[:2])"],
            capture_output=True,
            text=True,
        )
        if probe.returncode == 0 and probe.stdout.strip() == "{}.{}".format(*PYTHON_VERSION):
            return candidate
    raise EnvBuildError(
        "DS-1000 needs Python 3.11 with the venv module; install it or set PYTHON=/path/to/python3.11"
    )


def _run(cmd: list[str], log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise EnvBuildError(
            f"{what} failed (exit {done.returncode}); log: {log}\n"
            + "\n".join(tail)
            + "\nOffline? Point PIP_FIND_LINKS at a wheelhouse and set PIP_NO_INDEX=1."
        )


def ensure_env(env: str | Path | None = None, python: str | None = None, echo=print) -> Path:
    """Build the pinned venv at `env` unless it is already there. Safe to call from parallel processes."""
    env = Path(env).expanduser().absolute() if env else default_env_path()
    if is_ready(env):
        return env
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_ready(env):
            return env
        base = python or find_python()
        if env.exists():
            shutil.rmtree(env)  # a half-built env from an interrupted run
        log = env.parent / f"{env.name}-build.log"
        log.write_text("")
        echo(f"building the DS-1000 environment in {env} (about 1 min online; log: {log})")
        umask = os.umask(0o022)  # the sandbox's unprivileged uid reads it, whatever the caller's umask
        try:
            _run([base, "-m", "venv", str(env)], log, "creating the venv")
            pip = [str(env_python(env)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
            _run([*pip, *REQUIREMENTS], log, "installing the pinned libraries")
            _build_font_cache(env, log)
            (env / STAMP).write_text(_stamp_text(base))
        finally:
            os.umask(umask)
    return env


def _build_font_cache(env: Path, log: Path) -> None:
    cache = env / MPL_CACHE
    cache.mkdir(exist_ok=True)
    script = "import matplotlib; matplotlib.use('Agg'); import matplotlib.font_manager"
    with log.open("a") as out:
        subprocess.run(
            [str(env_python(env)), "-c", script],
            env={**os.environ, "MPLCONFIGDIR": str(cache)},
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the pinned DS-1000 evaluation venv (idempotent).")
    parser.add_argument("target", nargs="?", help="where to build it (default: <RECREATE_HOME>/envs/ds1000)")
    parser.add_argument("--python", help="a Python 3.11 interpreter to base it on")
    args = parser.parse_args(argv)
    try:
        path = ensure_env(args.target, python=args.python)
    except EnvBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
