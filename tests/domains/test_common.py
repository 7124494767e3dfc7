import os
import tempfile
from pathlib import Path

import pytest

from recreate.domains.common import others_can_read, shareable_copy
from recreate.sandbox import SandboxSpec


@pytest.fixture
def private_package():
    root = Path(tempfile.mkdtemp())  # mode 0700: only we can enter it
    package = root / "privlib"
    package.mkdir()
    (package / "__init__.py").write_text("ANSWER = 42\n")
    return package


def test_others_can_read(private_package):
    assert not others_can_read(private_package)
    assert others_can_read(Path("/usr/lib"))


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root-run sandbox drops to another uid")
def test_private_libraries_are_copied_where_a_sandbox_can_read_them(private_package, bwrap):
    copy = shareable_copy(private_package)
    assert copy != private_package and others_can_read(copy)
    assert shareable_copy(private_package) == copy  # made once
    spec = SandboxSpec(ro_binds=((str(copy), "/libs/privlib"),))
    with bwrap.open(spec) as session:
        result = session.run(
            'python3 -I -c \'import sys; sys.path.insert(0, "/libs"); import privlib; '
            "print(privlib.ANSWER)'",
            timeout=30,
        )
    assert result.stdout.strip() == "42", result.stderr


@pytest.mark.skipif(os.geteuid() != 0, reason="only a root-run sandbox drops to another uid")
def test_a_private_evaluator_folder_fails_with_the_fix(private_package, bwrap):
    from recreate.domains import get_domain

    tasks = private_package / "tasks.jsonl"
    tasks.write_text('{"id": "a", "task": "t"}\n')
    domain = get_domain("jsonl", data=tasks, evaluator="python3 /evaluator/judge.py")
    evaluation = domain.evaluate(domain.tasks()[0], "x", bwrap)
    assert evaluation.score == 0.0
    assert "cannot read" in evaluation.feedback and "somewhere others can read" in evaluation.feedback
