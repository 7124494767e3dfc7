"""Framework overhead per agent step: recreate's domain agent vs mini-swe-agent, same scripted episode.

Both agents get a zero-latency in-process scripted model that asks for the same trivial command
(`echo hi`) N times and then submits, and both run commands in their local (unisolated) environment
and record their trajectory after every step. We time whole episodes and the time spent inside each
environment's command execution during them; the difference is the framework's own cost per step.

    python benchmarks/agent_overhead.py [--steps 50] [--repeats 5]

Two modes: `real` runs the command in each agent's local environment; `instant` swaps each
environment's execute call for a stub that returns "hi" at once, so what remains is the framework.
Prints wall-clock and CPU milliseconds per step (CPU time of this process is robust to other load on
the machine): whole episode, command execution, and the difference, the framework's own overhead; and
the ratio recreate / mini-swe-agent (target: overhead <= 1.0x and <= 3 ms/step).
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import tempfile
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

from langchain_core.language_models.fake_chat_models import GenericFakeChatModel
from langchain_core.messages import AIMessage
from rich.console import Console
from rich.table import Table

REPO = Path(__file__).resolve().parents[1]
COMMAND = "echo hi"
SYSTEM = "You are a helpful assistant that runs commands."
INSTANCE = "Do the task: {{task}}"


class ScriptedModel(GenericFakeChatModel):
    """Replays AIMessages with tool calls, no latency; tools are already in the script."""

    def bind_tools(self, tools, **kwargs):
        return self


def recreate_episode(steps: int, workdir: Path) -> float:
    from recreate import create_domain_agent
    from recreate.experience.schema import load_trajectory
    from recreate.sandbox.local import LocalSandbox
    from recreate.scaffold import load_scaffold

    seed = load_scaffold(REPO / "scaffolds" / "minimal")
    scaffold = seed.model_copy(update={"limits": seed.limits.model_copy(update={"max_steps": steps + 5})})
    script = [
        AIMessage("", tool_calls=[{"name": "bash", "args": {"command": COMMAND}, "id": f"c{i}"}])
        for i in range(steps)
    ] + [AIMessage("", tool_calls=[{"name": "submit", "args": {"answer": "hi"}, "id": "done"}])]
    agent = create_domain_agent(
        scaffold, model=ScriptedModel(messages=iter(script)), sandbox=LocalSandbox(), trajectory_dir=workdir
    )
    start = time.perf_counter()
    out = agent.invoke({"task": "say hi"}, {"recursion_limit": 4 * steps + 20})
    elapsed = time.perf_counter() - start
    assert out["exit_status"] == "submitted", out.get("error")
    (path,) = workdir.rglob(f"*{out['trajectory_id']}*.json")  # the trajectory the run wrote
    assert len(load_trajectory(path).steps) == steps + 1
    return elapsed


def mini_episode(steps: int, workdir: Path) -> float:
    from minisweagent.agents.default import DefaultAgent
    from minisweagent.environments.local import LocalEnvironment
    from minisweagent.models.test_models import DeterministicModel, make_output

    outputs = [make_output("", [{"command": COMMAND}], cost=0.0) for _ in range(steps)]
    outputs.append(make_output("", [{"command": "echo COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT; echo hi"}], 0.0))
    agent = DefaultAgent(
        DeterministicModel(outputs=outputs),
        LocalEnvironment(cwd=str(workdir)),
        system_template=SYSTEM,
        instance_template=INSTANCE,
        step_limit=0,
        cost_limit=0,
        output_path=workdir / "mini.traj.json",
    )
    start = time.perf_counter()
    result = agent.run("say hi")
    elapsed = time.perf_counter() - start
    assert result["exit_status"] == "Submitted", result
    return elapsed


@contextlib.contextmanager
def command_clock(cls: type, method: str, replacement=None) -> Iterator[list[float]]:
    """Sum the wall and CPU seconds this process spends in `cls.method` (where each agent runs its
    commands) while active: [wall, cpu]. With `replacement`, that runs instead (an instant command)."""
    spent = [0.0, 0.0]
    original = getattr(cls, method)
    run = replacement or original

    def timed(self, *args, **kwargs):
        wall, cpu = time.perf_counter(), time.process_time()
        try:
            return run(self, *args, **kwargs)
        finally:
            spent[0] += time.perf_counter() - wall
            spent[1] += time.process_time() - cpu

    setattr(cls, method, timed)
    try:
        yield spent
    finally:
        setattr(cls, method, original)


def instant_recreate_run(self, cmd: str, *, timeout: float = 60.0, env=None):
    from recreate.sandbox.base import Result

    return Result(stdout="hi\n", stderr="", exit_code=0, duration_s=0.0)


def instant_mini_execute(self, action: dict, cwd: str = "", *, timeout=None) -> dict:
    output = {"output": "hi\n", "returncode": 0, "exception_info": ""}
    if "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT" in action.get("command", ""):
        output["output"] = "COMPLETE_TASK_AND_SUBMIT_FINAL_OUTPUT\nhi\n"
    self._check_finished(output)  # mini-swe-agent submits through a command's output
    return output


def measure(episode, target: tuple, steps: int, repeats: int) -> dict[str, float]:
    """Medians over `repeats` episodes, in ms per model call: wall and CPU time of the whole episode,
    and of the command execution inside it."""
    runs = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as tmp, command_clock(*target) as spent:
            cpu = time.process_time()
            wall = episode(steps, Path(tmp))
            cpu = time.process_time() - cpu
        runs.append((wall, spent[0], cpu, spent[1]))
    scale = 1000 / (steps + 1)
    wall, wall_cmd, cpu, cpu_cmd = (statistics.median(r[i] for r in runs) * scale for i in range(4))
    return {"wall": wall, "wall_cmd": wall_cmd, "cpu": cpu, "cpu_cmd": cpu_cmd,
            "wall_framework": wall - wall_cmd, "cpu_framework": cpu - cpu_cmd}  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--steps", type=int, default=50, help="bash steps per episode (plus one submit)")
    parser.add_argument("--repeats", type=int, default=5, help="episodes per agent (median is reported)")
    args = parser.parse_args()
    warnings.simplefilter("ignore")  # the local backend warns that it does not isolate
    os.environ.setdefault("RECREATE_HOME", tempfile.mkdtemp(prefix="recreate-bench-"))
    from minisweagent.environments.local import LocalEnvironment

    from recreate.sandbox.local import LocalSession

    rows = {}
    for mode in ("real", "instant"):
        for name, episode, cls, method, stub in (
            ("recreate", recreate_episode, LocalSession, "run", instant_recreate_run),
            ("mini-swe-agent", mini_episode, LocalEnvironment, "execute", instant_mini_execute),
        ):
            target = (cls, method, stub if mode == "instant" else None)
            measure(episode, target, 3, 1)  # warm imports and caches
            rows[name, mode] = measure(episode, target, args.steps, args.repeats)
    title = f"{args.steps} x `{COMMAND}` + submit, median of {args.repeats} episodes, ms per step"
    table = Table(title=title)
    columns = ("wall", "wall_cmd", "wall_framework", "cpu", "cpu_cmd", "cpu_framework")
    table.add_column("agent")
    table.add_column("commands")
    for column in columns:
        table.add_column(column.replace("_", " "), justify="right")
    for (name, mode), row in rows.items():
        table.add_row(name, mode, *(f"{row[c]:.2f}" for c in columns))
    console = Console()
    console.print(table)
    for mode in ("real", "instant"):
        ours, theirs = rows["recreate", mode], rows["mini-swe-agent", mode]
        for kind in ("wall", "cpu"):
            mine, base = ours[f"{kind}_framework"], theirs[f"{kind}_framework"]
            console.print(
                f"{mode} commands, {kind}: framework overhead recreate {mine:.2f} vs mini-swe-agent "
                f"{base:.2f} ms/step = {mine / base:.2f}x (end to end {ours[kind] / theirs[kind]:.2f}x)"
            )
    console.print("target: framework overhead <= 1.0x mini-swe-agent and <= 3 ms/step")


if __name__ == "__main__":
    main()
