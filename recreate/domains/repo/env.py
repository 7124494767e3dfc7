"""Test environments of repository instances: one venv per distinct requirement set, built from PyPI
once by `recreate domain setup repo --data FILE` and cached under <RECREATE_HOME>/envs/<key> (or
$RECREATE_REPO_ENVS/<key>); sandboxes bind it read-only at its own path (the venv names absolute
paths). The repository itself is never installed in it: the tests import it from the workspace.

Built by recreate/envbuild.py, which also says where they live when root runs us with a private home.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Callable, Iterable
from pathlib import Path

from recreate import envbuild
from recreate.domains.repo.instance import RepoEnvironment
from recreate.envbuild import EnvBuildError

STAMP = ".recreate-repo-ready"
# sandboxes see /usr but not home directories (pyenv, conda), so a system interpreter comes first
SYSTEM_PYTHONS = ("/usr/bin/python{v}", "/usr/local/bin/python{v}")


def envs_root(home: str | Path | None = None) -> Path:
    """RECREATE_REPO_ENVS, else <home>/envs (home: argument, RECREATE_HOME, or .recreate), or, for root
    with a home the sandbox's uid cannot enter, envbuild.SHARED_ENVS."""
    if os.environ.get("RECREATE_REPO_ENVS"):
        return Path(os.environ["RECREATE_REPO_ENVS"]).expanduser().absolute()
    return envbuild.envs_root(home, "RECREATE_REPO_ENVS")


def env_path(environment: RepoEnvironment, home: str | Path | None = None) -> Path:
    return envs_root(home) / environment.key()


def _stamp(environment: RepoEnvironment) -> str:
    return "\n".join((environment.python_version, *sorted(environment.install))) + "\n"


def is_ready(env: Path, environment: RepoEnvironment) -> bool:
    return envbuild.stamp_text(env, STAMP) == _stamp(environment)


def find_python(version: str) -> str:
    candidates = [pattern.format(v=version) for pattern in SYSTEM_PYTHONS]
    if "{}.{}".format(*sys.version_info[:2]) == version:
        candidates.append(getattr(sys, "_base_executable", sys.executable))
    for candidate in candidates:
        if Path(candidate).exists():
            return candidate
    raise EnvBuildError(
        f"no Python {version} found ({', '.join(candidates)}); install python{version} (with venv) "
        "or set the instances' environment.python_version to one you have"
    )


def ensure_env(
    environment: RepoEnvironment, home: str | Path | None = None, echo: Callable[[str], None] = print
) -> Path:
    """Build the venv of `environment` unless it is there. Safe to call from parallel processes."""
    env = env_path(environment, home)
    if is_ready(env, environment):
        return env
    install = list(environment.install)

    def steps(env: Path, log: Path) -> None:
        if install:
            envbuild.run_step(
                [*envbuild.pip(env), "install", *install],
                log,
                "installing " + " ".join(install),
            )

    return envbuild.build_once(
        env,
        ready=lambda env: is_ready(env, environment),
        python=find_python(environment.python_version),
        steps=steps,
        stamp=(STAMP, _stamp(environment)),
        announce=f"building the test environment {env.name} ({', '.join(install)}) in {env}",
        echo=echo,
    )


def distinct_environments(environments: Iterable[RepoEnvironment]) -> list[RepoEnvironment]:
    """Those that need a venv (no image), one per key."""
    seen: dict[str, RepoEnvironment] = {}
    for environment in environments:
        if environment.image is None:
            seen.setdefault(environment.key(), environment)
    return list(seen.values())
