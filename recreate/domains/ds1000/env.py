"""The pinned DS-1000 evaluation environment: a virtualenv built once, bound read-only into sandboxes.

DS-1000 reference solutions were written for old library versions (numpy 1.26, pandas 1.5.3, ...);
newer ones fail some of them, so evaluation never uses the project's own environment.

Standard library only: `scripts/ds1000_env.sh` runs this file directly with any Python 3, before the
project is installed (it then loads recreate/envbuild.py, the builder, by path). Offline: pip honours
PIP_NO_INDEX / PIP_FIND_LINKS (a wheelhouse) and its cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from collections.abc import Callable
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


def is_ready(env: Path) -> bool:
    """Built with today's pins (the stamp's first line is the Python it was based on)."""
    text = envbuild.stamp_text(env, STAMP)
    return text is not None and text.splitlines()[1:] == list(REQUIREMENTS)


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
    env: str | Path | None = None, python: str | None = None, echo: Callable[[str], None] = print
) -> Path:
    """Build the pinned venv at `env` unless it is already there. Safe to call from parallel processes."""
    env = Path(env).expanduser().absolute() if env else default_env_path()
    if is_ready(env):
        return env
    base = python or find_python()
    return envbuild.build_once(
        env,
        ready=is_ready,
        python=base,
        steps=_install,
        stamp=(STAMP, "\n".join((base, *REQUIREMENTS)) + "\n"),
        announce=f"building the DS-1000 environment in {env}, about 1 min online",
        echo=echo,
    )


def _install(env: Path, log: Path) -> None:
    envbuild.run_step([*envbuild.pip(env), "install", *REQUIREMENTS], log, "installing the pinned libraries")
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
    return envbuild.script_main(argv, "the pinned DS-1000 evaluation venv", python_help, ensure_env)


if __name__ == "__main__":
    sys.exit(main())
