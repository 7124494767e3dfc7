"""Virtualenvs built once: the one builder behind DS-1000's pinned environment, the repo domain's test
environments and vLLM's own environment.

`build_once` creates the venv under an exclusive lock on a sibling file (parallel processes build it once;
the others wait and find it ready), logs every step to `<env>-build.log`, names the failed step with the
log's tail, removes a half-built env from an interrupted run, and writes the ready stamp last.

Where: `<home>/envs` (home: RECREATE_HOME, else .recreate). Run as root, sandboxes are a throwaway
unprivileged uid that cannot enter a private home (0700 or 0750, the default on many distributions), so
`envs_root` then answers SHARED_ENVS, a root-owned folder others can read but not write (the envs hold
public PyPI packages only), and what root builds is opened to others' reads.

Standard library only, and loaded by its path (not as `recreate.envbuild`) when
recreate/domains/ds1000/env.py or recreate/local/vllm_env.py run as scripts (scripts/ds1000_env.sh,
scripts/vllm_env.sh) with any Python 3, before the project is installed; hence fcntl, not filelock.
"""

from __future__ import annotations

import argparse
import contextlib
import fcntl
import os
import shutil
import stat
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

SHARED_ENVS = Path("/var/tmp/recreate-envs")
PIP_OPTIONS = ("-m", "pip", "--disable-pip-version-check", "--no-input")
OFFLINE_HINT = "Offline? Point PIP_FIND_LINKS at a wheelhouse and set PIP_NO_INDEX=1."
LOG_TAIL_LINES = 15


class EnvBuildError(RuntimeError):
    """An environment cannot be built or found; the message says why and what to do."""


def home_envs(home: str | Path | None = None) -> Path:
    """<home>/envs, absolute (home: the argument, else RECREATE_HOME, else .recreate)."""
    base = Path(home or os.environ.get("RECREATE_HOME") or ".recreate").expanduser()
    return (base / "envs").absolute()


def envs_root(home: str | Path | None, variable: str) -> Path:
    """Where environments that sandboxes read are built: home_envs(home), unless root runs us with a home
    the sandbox's uid cannot enter: then SHARED_ENVS. `variable` names the setting that picks another
    place (said when SHARED_ENVS is refused)."""
    private = home_envs(home)
    if os.geteuid() != 0 or others_can_enter(private):
        return private
    return shared_envs(variable)


def others_can_enter(path: Path) -> bool:
    """Whether an unprivileged uid can reach `path` (or, while it does not exist yet, where it will be
    made with the default umask): every existing folder on the way lets others through."""
    existing = [p for p in (*reversed(path.resolve().parents), path.resolve()) if p.exists()]
    return all(stat.S_ISDIR(m) and m & stat.S_IXOTH for m in (p.stat().st_mode for p in existing))


def shared_envs(variable: str) -> Path:
    """SHARED_ENVS, made root-owned and readable by all; refused when others could have planted a venv
    in it (it lives in a world-writable folder)."""
    with contextlib.suppress(FileExistsError):  # something that is not a folder: refused below
        SHARED_ENVS.mkdir(mode=0o755, parents=True, exist_ok=True)
    info = SHARED_ENVS.lstat()
    if not stat.S_ISDIR(info.st_mode) or info.st_uid != 0 or info.st_mode & 0o022:
        raise EnvBuildError(
            f"{SHARED_ENVS} (where root keeps environments sandboxes read when RECREATE_HOME is private) is "
            f"not a root-owned folder closed to others' writes; remove it, or set {variable} to a folder "
            "others can read"
        )
    SHARED_ENVS.chmod(0o755)
    return SHARED_ENVS


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def pip(env: Path) -> list[str]:
    """The command prefix of the env's pip (add `install ...` or `uninstall ...`)."""
    return [str(env_python(env)), *PIP_OPTIONS]


def stamp_text(env: Path, stamp: str) -> str | None:
    """The ready stamp's text, or None while the env is not there (no stamp, or no python)."""
    path = env / stamp
    if not path.is_file() or not env_python(env).exists():
        return None
    return path.read_text()


def run_step(command: list[str], log: Path, what: str) -> None:
    """Run one build step, its output appended to `log`; EnvBuildError names `what` failed and shows the
    log's tail when it exits non-zero."""
    with log.open("a") as out:
        out.write("$ " + " ".join(command) + "\n")
        out.flush()
        try:
            done = subprocess.run(command, stdout=out, stderr=subprocess.STDOUT)
        except OSError as exc:  # no such program, not executable
            raise EnvBuildError(f"{what} failed: {exc}") from None
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-LOG_TAIL_LINES:]
        raise EnvBuildError(
            "\n".join((f"{what} failed (exit {done.returncode}); log: {log}", *tail, OFFLINE_HINT))
        )


def build_once(
    env: Path,
    *,
    ready: Callable[[Path], bool],
    python: str,
    steps: Callable[[Path, Path], None],
    stamp: tuple[str, str],
    announce: str,
    echo: Callable[[str], None] = print,
) -> Path:
    """Build the venv `env` on `python` unless `ready(env)`; returns `env`. `steps(env, log)` installs into
    the fresh venv (with run_step); `stamp` (file name, text) is written last, so an interrupted build is
    never taken as ready; `announce` is echoed before building, followed by where the log is."""
    if ready(env):
        return env
    env.parent.mkdir(parents=True, exist_ok=True)
    with open(env.parent / f".{env.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if ready(env):
            return env
        if env.exists():
            shutil.rmtree(env)  # half-built by an interrupted run
        log = env.parent / f"{env.name}-build.log"
        log.write_text("")
        echo(f"{announce} (log: {log})")
        run_step([python, "-m", "venv", str(env)], log, "creating the venv")
        steps(env, log)
        if os.geteuid() == 0:
            open_to_others(env)  # the sandbox's uid reads it, whatever our umask
        name, text = stamp
        (env / name).write_text(text)
    return env


def open_to_others(env: Path) -> None:
    """Let every uid read the files and enter the folders below `env` (links are left alone)."""
    for folder, _, files in os.walk(env):
        os.chmod(folder, os.stat(folder).st_mode | 0o555)
        for name in files:
            path = os.path.join(folder, name)
            if not os.path.islink(path):
                os.chmod(path, os.stat(path).st_mode | 0o444)


def _to_stderr(text: str) -> None:
    print(text, file=sys.stderr)


def script_main(
    argv: list[str] | None, what: str, python_help: str, build: Callable[..., Path], groups: str = ""
) -> int:
    """The command line of a builder run as a script: `[TARGET] [--python PATH]` (and `--with A,B` when
    the build has optional `groups`, named in the help); prints what `build(target, python=..., echo=...)`
    returns on stdout, progress and a one-line error on stderr."""
    parser = argparse.ArgumentParser(description=f"Build {what} (idempotent).")
    parser.add_argument("target", nargs="?", help="where to build it (default: under <RECREATE_HOME>/envs)")
    parser.add_argument("--python", help=python_help)
    if groups:
        parser.add_argument("--with", dest="groups", default="", help=f"optional, comma-separated: {groups}")
    args = parser.parse_args(argv)
    options = {"extras": [x.strip() for x in args.groups.split(",") if x.strip()]} if groups else {}
    try:
        built = build(args.target, python=args.python, echo=_to_stderr, **options)
    except EnvBuildError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(built)
    return 0
