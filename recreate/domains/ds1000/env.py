"""The pinned DS-1000 evaluation environment: a virtualenv built once, bound read-only into sandboxes.

DS-1000 reference solutions were written for old library versions (numpy 1.26, pandas 1.5.3, ...);
newer ones fail some of them, so evaluation never uses the project's own environment.

Standard library only: `scripts/ds1000_env.sh` runs this file directly with any Python 3, before the
project is installed (it then loads recreate/envbuild.py, the builder, by path). Offline: pip honours
PIP_NO_INDEX / PIP_FIND_LINKS (a wheelhouse) and its cache.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path

if __package__:
    from recreate import envbuild
else:  # run as a script by scripts/ds1000_env.sh, before the project is installed: load it by path
    sys.path.append(str(Path(__file__).resolve().parents[2]))
    import envbuild

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


@dataclass(frozen=True)
class LibraryGroup:
    """An optional library group of the environment, for DS-1000's Pytorch or Tensorflow problems."""

    pins: tuple[str, ...]
    modules: tuple[str, ...]  # the top-level modules it provides, its library's first
    library: str  # the name DS-1000's metadata["library"] gives its problems
    label: str  # how the agent's description names it
    version: str  # ... and its version


# `recreate domain setup ds1000 --with NAME`. On PyPI, Linux torch wheels bring CUDA libraries (GBs); a
# CPU-only wheel in pip's find-links is taken first.
GROUPS: dict[str, LibraryGroup] = {
    "pytorch": LibraryGroup(("torch==2.13.0",), ("torch",), "Pytorch", "PyTorch", "torch 2.13"),
    "tensorflow": LibraryGroup(
        ("tensorflow-cpu==2.16.1", "keras==3.15.1"),
        ("tensorflow", "keras"),
        "Tensorflow",
        "TensorFlow",
        "tensorflow 2.16",
    ),
}
PYTHON_VERSION = (3, 11)  # pandas 1.5.3 has no wheels for newer Pythons
STAMP = ".recreate-ds1000-ready"
MPL_CACHE = "mpl-cache"  # matplotlib font cache built once, copied into each sandbox HOME
EnvBuildError = envbuild.EnvBuildError
env_python = envbuild.env_python


def default_env_path(home: str | Path | None = None) -> Path:
    """RECREATE_DS1000_ENV, else <home>/envs/ds1000 (home: argument, RECREATE_HOME, or .recreate), or,
    for root with a home the sandbox's unprivileged uid cannot enter, the shared folder's ds1000."""
    if os.environ.get("RECREATE_DS1000_ENV"):
        return Path(os.environ["RECREATE_DS1000_ENV"]).expanduser().absolute()
    return envbuild.envs_root(home, "RECREATE_DS1000_ENV") / "ds1000"


def requirements(extras: Iterable[str] = ()) -> list[str]:
    """The pins of the base set and of `extras` (names of GROUPS), in a fixed order."""
    extras = set(extras)
    unknown = sorted(extras - set(GROUPS))
    if unknown:
        raise EnvBuildError(f"unknown DS-1000 library group {unknown[0]!r}; known: {', '.join(GROUPS)}")
    return [*REQUIREMENTS, *(pin for name, group in GROUPS.items() if name in extras for pin in group.pins)]


def installed_extras(env: Path) -> list[str]:
    """The library groups `env` was built with (none when it is not built with today's pins)."""
    return _built_with(env) or []


def is_ready(env: Path, extras: Iterable[str] = ()) -> bool:
    """Built with today's pins and at least the library groups `extras`."""
    built = _built_with(env)
    return built is not None and set(extras) <= set(built)


def _built_with(env: Path) -> list[str] | None:
    """The groups of a build with today's pins (the stamp's first line is the Python it was based on,
    then one pin per line); None when `env` is not such a build."""
    text = envbuild.stamp_text(env, STAMP)
    if text is None:
        return None
    pins = text.splitlines()[1:]
    names = [name for name, group in GROUPS.items() if set(group.pins) <= set(pins)]
    return names if pins == requirements(names) else None


def missing_modules(env: Path, modules: Iterable[str]) -> list[str]:
    """The top-level modules of `modules` that `env`'s Python cannot find (found, not imported)."""
    names = sorted({name.split(".")[0] for name in modules})
    script = "import importlib.util as u, json, sys\n"
    script += "print(json.dumps([m for m in sys.argv[1:] if not u.find_spec(m)]))"
    probe = subprocess.run(
        [str(env_python(env)), "-I", "-c", script, *names], capture_output=True, text=True, timeout=120
    )
    if probe.returncode != 0:
        raise EnvBuildError(f"the DS-1000 environment's Python at {env} does not run: {probe.stderr[-300:]}")
    return json.loads(probe.stdout)


def groups_for(modules: Iterable[str]) -> list[str]:
    """The library groups that provide `modules` (top-level names; those of no group are left out)."""
    modules = set(modules)
    return [name for name, group in GROUPS.items() if modules & set(group.modules)]


def library_module(library: str | None) -> str | None:
    """The module a DS-1000 library name needs when a group provides it ("Pytorch": torch)."""
    return next((group.modules[0] for group in GROUPS.values() if group.library == library), None)


def setup_hint(env: Path, modules: Iterable[str]) -> str:
    """How to get `modules` into the environment: the setup command with their library groups, or to
    leave their tasks out when no group provides them."""
    modules = list(modules)
    groups = groups_for(modules)
    if groups and all(groups_for([m]) for m in modules):
        them = "it" if len(modules) == 1 else "them"
        return f"add {them} with `recreate domain setup ds1000 --with {','.join(groups)} --path {env}`"
    return "no library group of the pinned environment provides them: leave those tasks out of the data"


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


def ensure_env(
    env: str | Path | None = None,
    python: str | None = None,
    echo: Callable[[str], None] = print,
    extras: Iterable[str] = (),
) -> Path:
    """Build the pinned venv at `env` unless it is already there with the library groups `extras`; a
    build keeps the groups the env had. Safe to call from parallel processes."""
    env = Path(env).expanduser().absolute() if env else default_env_path()
    wanted = sorted(set(extras) | set(installed_extras(env)))
    pins = requirements(wanted)
    if is_ready(env, wanted):
        return env
    base = python or find_python()
    groups = f" with {', '.join(wanted)}" if wanted else ""
    return envbuild.build_once(
        env,
        ready=lambda path: is_ready(path, wanted),
        python=base,
        steps=lambda path, log: _install(path, log, pins),
        stamp=(STAMP, "\n".join((base, *pins)) + "\n"),
        announce=f"building the DS-1000 environment{groups} in {env}, about {1 + len(wanted)} min online",
        echo=echo,
    )


def _install(env: Path, log: Path, pins: list[str]) -> None:
    envbuild.run_step([*envbuild.pip(env), "install", *pins], log, "installing the pinned libraries")
    cache = env / MPL_CACHE
    cache.mkdir(exist_ok=True)
    script = "import matplotlib; matplotlib.use('Agg'); import matplotlib.font_manager"
    with log.open("a") as out:  # best effort: without it each sandbox rebuilds the font cache (~1 s)
        subprocess.run(
            [str(env_python(env)), "-c", script],
            env={**os.environ, "MPLCONFIGDIR": str(cache)},
            stdout=out,
            stderr=subprocess.STDOUT,
            check=False,
        )


def main(argv: list[str] | None = None) -> int:
    python_help = "a Python 3.11 interpreter to base it on"
    what, groups = "the pinned DS-1000 evaluation venv", ", ".join(GROUPS)
    return envbuild.script_main(argv, what, python_help, ensure_env, groups=groups)


if __name__ == "__main__":
    sys.exit(main())
