"""Fixtures of the DS-1000 tests: the pinned environment with torch, with tensorflow (skipped, naming the
setup command, where the environment lacks them)."""

from __future__ import annotations

import pytest

from tests.domains.ds1000.problems import run_in_env


def _lacks(env, module: str) -> bool:
    probe = run_in_env(
        env, f"import importlib.util, sys\nsys.exit(importlib.util.find_spec({module!r}) is None)"
    )
    return probe.returncode != 0


@pytest.fixture(scope="module")
def torch_env(ds1000_env):
    if _lacks(ds1000_env, "torch"):
        pytest.skip("the DS-1000 environment has no torch (recreate domain setup ds1000 --with pytorch)")
    return ds1000_env


@pytest.fixture(scope="module")
def tf_env(ds1000_env):
    if _lacks(ds1000_env, "tensorflow"):
        pytest.skip(
            "the DS-1000 environment has no tensorflow (recreate domain setup ds1000 --with tensorflow)"
        )
    return ds1000_env
