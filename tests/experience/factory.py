"""Build schema-v1 trajectories for the experience tests (deterministic content, chosen ids)."""

from __future__ import annotations

from recreate.experience.schema import (
    Evaluation,
    ModelInfo,
    Observation,
    Outcome,
    ScaffoldRef,
    Step,
    Trajectory,
)

TRACEBACK = (
    'Traceback (most recent call last):\n  File "solve.py", line 3\nZeroDivisionError: division by zero'
)


def bash_step(index: int, command: str, stdout: str = "", stderr: str = "", exit_code: int = 0) -> Step:
    return Step(
        index=index,
        action={"tool": "bash", "args": {"command": command}},
        observation=Observation(stdout=stdout, stderr=stderr, exit_code=exit_code),
    )


def make_trajectory(
    trajectory_id: str,
    *,
    task_id: str = "task-1",
    domain: str = "ds1000",
    passed: bool = True,
    steps: list[Step] | None = None,
    n_steps: int = 4,
    task_text: str = "Write solve.py that prints the sum of the first ten primes.",
    version: str = "v1",
) -> Trajectory:
    if steps is None:
        steps = [bash_step(i, f"python solve.py --case {i}", stdout=f"case {i} ok") for i in range(n_steps)]
    return Trajectory(
        trajectory_id=trajectory_id,
        task_id=task_id,
        run_id="run-1",
        domain=domain,
        scaffold=ScaffoldRef(name="minimal", version=version, hash="abc123def456"),
        model=ModelInfo(name="scripted-model"),
        messages=[{"role": "system", "content": "You are a coder."}, {"role": "user", "content": task_text}],
        steps=steps,
        outcome=Outcome(exit_status="submitted", submission="print(129)"),
        evaluation=Evaluation(
            score=1.0 if passed else 0.0,
            passed=passed,
            feedback="all checks passed" if passed else "wrong output",
        ),
    )


def long_trajectory(trajectory_id: str, n_steps: int = 300) -> Trajectory:
    """A long run with file edits, failing and passing test runs, tracebacks and big outputs."""
    steps = []
    for i in range(n_steps - 1):
        if i % 10 == 3:
            steps.append(
                bash_step(
                    i,
                    "python -m pytest tests/test_solve.py -q",
                    stdout="3 passed, 1 failed in 0.2s",
                    exit_code=1,
                )
            )
        elif i % 10 == 7:
            steps.append(
                bash_step(i, f"python src/module_{i}.py", stderr=TRACEBACK + "x" * 3000, exit_code=1)
            )
        else:
            steps.append(
                bash_step(
                    i, f"sed -i 's/a/b/' src/module_{i}.py && cat src/module_{i}.py", stdout="line\n" * 400
                )
            )
    steps.append(bash_step(n_steps - 1, "python -m pytest tests/test_solve.py -q", stdout="4 passed in 0.3s"))
    return make_trajectory(trajectory_id, steps=steps, passed=True)


def near_duplicate_runs(count: int, steps: int = 20, seed: int = 0) -> list[Trajectory]:
    """Runs that repeat a few commands and outputs with small variations, as real agent logs do:
    the hard case for an approximate (HNSW) index."""
    import random

    rng = random.Random(seed)
    commands = ("python solve.py --case {n}", "cat src/mod_{n}.py", "python -m pytest tests/test_{n}.py -q")
    words = ("ok", "row", "value", "done", "loaded", "col")
    errors = ("", "", "KeyError: 'price'", "ZeroDivisionError: division by zero")
    runs = []
    for number in range(count):
        run_steps = []
        for index in range(steps):
            error = rng.choice(errors)
            run_steps.append(
                bash_step(
                    index,
                    rng.choice(commands).format(n=rng.randint(0, 99)),
                    stdout=" ".join(rng.choice(words) for _ in range(30)),
                    stderr=f"Traceback (most recent call last):\n{error}" if error else "",
                    exit_code=1 if error else 0,
                )
            )
        runs.append(
            make_trajectory(
                f"near-{number:04d}",
                task_id=f"task-{number % 7}",
                domain=("ds1000", "math", "swe")[number % 3],
                passed=number % 2 == 0,
                steps=run_steps,
            )
        )
    return runs
