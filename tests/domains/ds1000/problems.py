"""What the DS-1000 tests share: the dataset's own test harness (two test cases) for the problems they
write, and a script run in the DS-1000 environment."""

import json
import subprocess
import textwrap
from collections.abc import Iterator
from pathlib import Path

from recreate.domains import get_domain
from recreate.domains.base import Domain, Task
from recreate.domains.ds1000.env import env_python
from recreate.domains.ds1000.judge import CHECKS_DIR

TEST_EXECUTION = """

def test_execution(solution: str):
    code = exec_context.replace("[insert]", solution)
    for i in range(2):
        test_input, expected_result = generate_test_case(i + 1)
        test_env = {"test_input": test_input}
        exec(code, test_env)
        assert exec_test(test_env["result"], expected_result)
"""


def run_in_env(env, script: str) -> subprocess.CompletedProcess:
    """`script` in the DS-1000 environment's Python, in the checks folder (its modules importable)."""
    return subprocess.run(
        [str(env_python(env)), "-c", textwrap.dedent(script)],
        cwd=CHECKS_DIR,
        capture_output=True,
        text=True,
        timeout=300,
    )


def ds1000_domain(
    rows: list[dict], env: Path, folder: Path, timeout: float = 60, **options: object
) -> Iterator[Domain]:
    """A DS-1000 domain of `rows` (written to `folder`) on the environment `env`, closed after use (a
    fixture's body: `yield from ds1000_domain(...)`)."""
    path = folder / "tasks.jsonl"
    path.write_text("".join(json.dumps(row) + "\n" for row in rows))
    domain = get_domain("ds1000", data=path, env=env, timeout=timeout, **options)
    yield domain
    domain.close()


def task_of(domain: Domain, problem_id: int) -> Task:
    return next(task for task in domain.tasks() if task.id == f"ds1000-{problem_id}")
