"""A Python evaluator's identity (the rollout cache's key of it): each case changes what the evaluator
decides while its own function's source stays the same, and must change the identity; the identity must
be the same in another process and must not change as the evaluator runs."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from recreate.evaluation.identity import callable_identity

BASE = {
    "helpers.py": """
        import re

        K = 3
        PATTERN = re.compile(r"yes")


        def norm(text):
            return text.strip()[:K]


        def score(text):
            return 1.0 if PATTERN.search(norm(text)) else 0.0
    """,
    "pkg/__init__.py": "",
    "pkg/sub.py": """
        def ok(text):
            return len(text) > 1
    """,
    "judge.py": """
        import dataclasses
        import functools

        import numpy as np
        import pkg.sub

        from helpers import score

        WEIGHTS = np.array([1.0, 2.0])
        _memo = {}


        @dataclasses.dataclass(frozen=True, slots=True)
        class Limits:
            low: float = 0.5


        class Config:
            threshold = 0.5

            @staticmethod
            def scale(x):
                return x * 1.0


        CFG = Config()
        LIMITS = Limits()


        @functools.lru_cache(maxsize=None)
        def cached_len(text):
            return len(text)


        def judge(task, submission):
            _memo[submission] = True
            value = score(submission) * WEIGHTS[0] * CFG.scale(1.0)
            ok = pkg.sub.ok(submission) and cached_len(submission) > 0
            return 1.0 if ok and value >= max(CFG.threshold, LIMITS.low) else 0.0
    """,
}

CHANGES = {
    "a helper's helper's constant": ("helpers.py", "K = 3", "K = 4"),
    "a compiled pattern": ("helpers.py", 'r"yes"', 'r"no"'),
    "a helper's helper's body": ("helpers.py", "text.strip()[:K]", "text[:K]"),
    "an array constant": ("judge.py", "[1.0, 2.0]", "[0.5, 2.0]"),
    "a slotted dataclass's default": ("judge.py", "low: float = 0.5", "low: float = 0.9"),
    "a class attribute read through an instance": ("judge.py", "threshold = 0.5", "threshold = 0.7"),
    "a staticmethod's body": ("judge.py", "return x * 1.0", "return x * 2.0"),
    "an lru_cache helper's body": ("judge.py", "return len(text)", "return len(text) - 1"),
    "a submodule read as pkg.sub.ok": ("pkg/sub.py", "len(text) > 1", "len(text) > 2"),
}


def _write(folder: Path, files: dict[str, str]) -> None:
    for name, text in files.items():
        path = folder / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))


def _identity_of_judge(folder: Path) -> str:
    """The identity, computed in a fresh process with another hash seed (no addresses, no set order)."""
    code = (
        f"import sys; sys.path.insert(0, {str(folder)!r});"
        "from recreate.evaluation.identity import callable_identity; import judge;"
        "print(callable_identity(judge.judge))"
    )
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env={"PYTHONHASHSEED": "7"}, check=True
    )
    return done.stdout.strip()


def test_the_identity_is_the_same_in_another_process_and_after_the_evaluator_ran(tmp_path, monkeypatch):
    _write(tmp_path, BASE)
    monkeypatch.syspath_prepend(str(tmp_path))
    for name in ("judge", "helpers", "pkg", "pkg.sub"):
        sys.modules.pop(name, None)
    judge = importlib.import_module("judge").judge
    before = callable_identity(judge)
    assert judge(None, "yes!") == 1.0  # runs: fills its private memo and its lru cache
    assert callable_identity(judge) == before == _identity_of_judge(tmp_path)
    for name in ("judge", "helpers", "pkg", "pkg.sub"):
        sys.modules.pop(name, None)


@pytest.mark.parametrize("change", list(CHANGES), ids=list(CHANGES))
def test_what_decides_the_verdict_is_part_of_the_identity(tmp_path, change):
    _write(tmp_path / "base", BASE)
    file, old, new = CHANGES[change]
    changed = dict(BASE)
    assert old in changed[file]
    changed[file] = changed[file].replace(old, new)
    _write(tmp_path / "changed", changed)
    assert _identity_of_judge(tmp_path / "base") != _identity_of_judge(tmp_path / "changed")


def test_a_global_whose_attributes_raise_is_its_class_not_a_crash() -> None:
    class Proxy:
        @property
        def __dict__(self):  # e.g. a werkzeug LocalProxy outside its context
            raise RuntimeError("no context")

    proxy = Proxy()

    def judge(task, submission):
        return 1.0 if proxy else 0.0

    assert callable_identity(judge) == callable_identity(judge)  # no crash, and stable
