"""The test suite's own layout: every file that uses a costly session fixture is in that fixture's
xdist group (tests/conftest.py), so a parallel run makes the fixture once."""

from __future__ import annotations

import re
import subprocess
import sys

from tests.conftest import FILE_GROUPS, REPO, SHARED_FIXTURES

WHERE = re.compile(r"^-+ \((?P<file>[^:]+):\d+\) -+$")


def test_every_user_of_a_costly_fixture_is_in_its_group() -> None:
    listed = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "-p", "no:xdist",
         "--fixtures-per-test", "tests"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert listed.returncode == 0, listed.stdout[-2000:] + listed.stderr[-2000:]
    users: dict[str, set[str]] = {}
    file = ""
    for line in listed.stdout.splitlines():
        if where := WHERE.match(line):
            file = where["file"]
        elif " -- " in line and not line.startswith(" "):
            users.setdefault(line.split(" -- ")[0], set()).add(file)
    assert users.get("tmp_path_factory"), "the listing was not read (pytest changed its format?)"
    wrong = [
        f"{file} uses {name}: add it to FILE_GROUPS as {group!r}"
        for name, group in SHARED_FIXTURES.items()
        for file in sorted(users.get(name, ()))
        if FILE_GROUPS.get(file) != group
    ]
    assert not wrong, wrong
