"""Test environments of repository instances: one venv per distinct requirement set, built from PyPI
once by `recreate domain setup repo --data FILE` and cached under <RECREATE_HOME>/envs/<key> (or
$RECREATE_REPO_ENVS/<key>); sandboxes bind it read-only at its own path (the venv names absolute
paths). The repository itself is never installed in it: the tests import it from the workspace.

Run as root, the sandbox is a throwaway unprivileged uid that cannot enter a private home (0700 or
0750, the default on many distributions): the venvs then live in SHARED_ENVS, a root-owned folder
others can read but not write (they hold public PyPI packages only).
"""

from __future__ import annotations

import fcntl
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from recreate.domains.repo_instance import RepoEnvironment

STAMP = ".recreate-repo-ready"
SHARED_ENVS = Path("/var/tmp/recreate-repo-envs")
# sandboxes see /usr but not home directories (pyenv, conda), so a system interpreter comes first
SYSTEM_PYTHONS = ("/usr/bin/python{v}", "/usr/local/bin/python{v}")


class RepoEnvError(RuntimeError):
    """The environment could not be built; the message says why and what to do."""


def envs_root(home: str | Path | None = None) -> Path:
    """RECREATE_REPO_ENVS, else <home>/envs (home: argument, RECREATE_HOME, or .recreate), else (root
    with a home the sandbox's uid cannot enter) SHARED_ENVS."""
    if os.environ.get("RECREATE_REPO_ENVS"):
        return Path(os.environ["RECREATE_REPO_ENVS"]).expanduser().absolute()
    base = Path(home or os.environ.get("RECREATE_HOME") or ".recreate").expanduser()
    private = (base / "envs").absolute()
    if os.geteuid() != 0 or _others_can_enter(private):
        return private
    return shared_envs()


def _others_can_enter(path: Path) -> bool:
    """Whether an unprivileged uid can reach `path` (or, while it does not exist yet, where it will be
    made with the default umask): every existing folder on the way lets others through."""
    existing = [p for p in (*reversed(path.resolve().parents), path.resolve()) if p.exists()]
    return all(stat.S_ISDIR(m) and m & stat.S_IXOTH for m in (p.stat().st_mode for p in existing))


def shared_envs() -> Path:
    """SHARED_ENVS, made root-owned and readable by all; refused when others could have planted a venv."""
    SHARED_ENVS.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = SHARED_ENVS.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise RepoEnvError(
            f"{SHARED_ENVS} (where root keeps repo test environments when RECREATE_HOME is private) is not "
            "a root-owned folder closed to others' writes; remove it, or set RECREATE_REPO_ENVS to a "
            "folder others can read"
        )
    SHARED_ENVS.chmod(0o755)
    return SHARED_ENVS


def env_path(environment: RepoEnvironment, home: str | Path | None = None) -> Path:
    return envs_root(home) / environment.key()


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def _stamp(environment: RepoEnvironment) -> str:
    return "\n".join((environment.python_version, *sorted(environment.install))) + "\n"


def is_ready(env: Path, environment: RepoEnvironment) -> bool:
    stamp = env / STAMP
    return stamp.is_file() and env_python(env).exists() and stamp.read_text() == _stamp(environment)


def find_python(version: str) -> str:
    candidates = [pattern.format(v=version) for pattern in SYSTEM_PYTHONS]
    if "{}.{}".format(*sys.version_info[:2]) == version:
        candidates.append(getattr(sys, "_base_executable", sys.executable))
    for candidate in candidates:
        if Path(candidate).exists():
            return candidate
    raise RepoEnvError(
        f"no Python {version} found ({', '.join(candidates)}); install python{version} (with venv) "
        "or set the instances' environment.python_version to one you have"
    )


def _run(command: list[str], log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = "\n".join(log.read_text(errors="replace").splitlines()[-12:])
        raise RepoEnvError(f"{what} failed (exit {done.returncode}); log: {log}\n{tail}")


def ensure_env(
    environment: RepoEnvironment, home: str | Path | None = None, echo: Callable[[str], None] = print
) -> Path:
    """Build the venv of `environment` unless it is there. Safe to call from parallel processes."""
    env = env_path(environment, home)
    if is_ready(env, environment):
        return env
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_ready(env, environment):
            return env
        if env.exists():
            shutil.rmtree(env)  # half-built by an interrupted run
        log = env.parent / f"{env.name}-build.log"
        log.write_text("")
        echo(f"building the test environment {env.name} ({', '.join(environment.install)}) in {env}")
        _run([find_python(environment.python_version), "-m", "venv", str(env)], log, "creating the venv")
        if environment.install:
            pip = [str(env_python(env)), "-m", "pip", "install", "--disable-pip-version-check", "--no-input"]
            _run([*pip, *environment.install], log, "installing " + " ".join(environment.install))
        if os.geteuid() == 0:
            _open_to_others(env)  # the sandbox's uid reads it, whatever our umask
        (env / STAMP).write_text(_stamp(environment))
    return env


def _open_to_others(env: Path) -> None:
    for folder, _, files in os.walk(env):
        os.chmod(folder, os.stat(folder).st_mode | 0o555)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def distinct_environments(environments: Iterable[RepoEnvironment]) -> list[RepoEnvironment]:
    """Those that need a venv (no image), one per key."""
    seen: dict[str, RepoEnvironment] = {}
    for environment in environments:
        if environment.image is None:
            seen.setdefault(environment.key(), environment)
    return list(seen.values())
