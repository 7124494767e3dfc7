"""What the DS-1000 tests share: the dataset's own test harness (two test cases) for the problems they
write, and a script run in the DS-1000 environment."""

import subprocess
import textwrap

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
