"""Evolve throughput: tasks/min of the rollout + reflection phase at concurrency 8 with a simulated
500 ms LLM latency, against the ideal for that latency and concurrency.

Each training task costs a fixed chain of LLM calls in the scripted episode (the agent's 2 calls, the
ReCreate-Agent's 5), so with latency L and concurrency C the ideal phase time for N tasks is
ceil(N / C) * 7 * L. Everything else is real: HTTP to a local OpenAI-compatible server (in its own
process, like any real endpoint: in ours its threads would take turns with ours on the GIL), bubblewrap
sandboxes for the agent and the evaluator, the experience store and the scaffold store.

`--breakdown` times the parts of a task: model calls, sandbox opens, commands, file copies, experience
writes and the rest, per task, in the serial phase (one task at a time: every part is on the critical
path) and again in the threads phase (what concurrency adds to each part).

`--executor ray` runs the same phase a second time with each rollout a Ray task on a local Ray (started
before either phase; its workers warm up on the round's v0 validation, as they do in any run) and prints
the two side by side with their ratio.

    .venv/bin/python benchmarks/evolve_throughput.py [--tasks 32] [--concurrency 8] [--latency 0.5]
        [--executor threads|ray] [--breakdown]
"""

from __future__ import annotations

import argparse
import collections
import contextlib
import functools
import json
import multiprocessing
import multiprocessing.queues
import multiprocessing.synchronize
import statistics
import sys
import tempfile
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recreate.domains import get_domain  # noqa: E402
from recreate.evaluation.ray_executor import make_executor  # noqa: E402
from recreate.experience.store import ExperienceStore  # noqa: E402
from recreate.optimizer import EvolveConfig, ReCreateOptimizer  # noqa: E402
from recreate.testing import ScriptedOpenAIServer  # noqa: E402
from tests.optimizer.script import EVALUATOR, WORDS, responder  # noqa: E402

CALLS_PER_TASK = 7  # agent: bash + submit; ReCreate-Agent: read, run, test_tool, propose, final message


def _serve(
    latency: float, urls: multiprocessing.queues.Queue[str], stop: multiprocessing.synchronize.Event
) -> None:
    with ScriptedOpenAIServer(responder, latency_s=latency) as server:
        urls.put(server.url)
        stop.wait()


@contextmanager
def endpoint(latency: float) -> Iterator[str]:
    """URL of the scripted endpoint, served by a child process."""
    ctx = multiprocessing.get_context("spawn")
    urls, stop = ctx.Queue(), ctx.Event()
    child = ctx.Process(target=_serve, args=(latency, urls, stop), daemon=True)
    child.start()
    try:
        yield urls.get(timeout=120)
    finally:
        stop.set()
        child.join(timeout=30)


def make_domain(root: Path, n_train: int) -> tuple[object, list, list]:
    rows = [
        {"id": f"w{i:03d}", "task": f"Reply with the word: Word{i}", "expected": f"word{i}"}
        for i in range(n_train + 8)
    ]
    (root / "tasks.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    # the evaluator in a folder of its own: beside the tasks file (and the run's home) it is copied
    # without the answers, and again whenever anything in that folder changes (every evaluation)
    evaluator = root / "evaluator"
    evaluator.mkdir(mode=0o755)
    (evaluator / "evaluate.py").write_text((WORDS / "evaluate.py").read_text())
    domain = get_domain("jsonl", data=root / "tasks.jsonl", evaluator=EVALUATOR, evaluator_dir=evaluator)
    tasks = domain.tasks("all")
    return domain, tasks[:n_train], tasks[n_train:]


def run_phase(
    n_tasks: int, concurrency: int, latency: float, executor: object = None
) -> tuple[float, list[float], tuple[float, float]]:
    """(rollout+reflection phase wall time, per-task wall times, the phase's (start, end) in epoch
    seconds) of one evolve round."""
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the evaluator folder is bound into the sandbox, whose user must reach it
        domain, train, val = make_domain(root, n_tasks)
        with endpoint(latency) as url:
            opt = ReCreateOptimizer(
                optimizer_model=f"scripted@{url}",
                agent_model=f"scripted@{url}",
                sandbox="bwrap",
                max_concurrency=concurrency,
                home=root / "home",
                experience=ExperienceStore(root / "home" / "experience", embedding="hash"),
                config=EvolveConfig(rounds=1, batch_size=n_tasks),
                executor=executor,
            )
            sets = {
                "seed": REPO / "scaffolds" / "minimal",
                "domain": domain,
                "trainset": train,
                "valset": val,
            }
            results = opt.optimize(run_id="bench", **sets).results
            feedback = [opt.experience.get(e.id).evaluation.feedback for e in opt.experience.list()]
    broken = [f for f in feedback if "evaluation sandbox failed" in f]
    assert not broken, f"{len(broken)} evaluations did not run: {broken[0]}"  # a fast failure is no figure
    window = min(r["started"] for r in results), max(r["finished"] for r in results)
    return window[1] - window[0], sorted(r["finished"] - r["started"] for r in results), window


@contextmanager
def timed_parts() -> Iterator[dict[str, list[tuple[float, float]]]]:
    """(start in epoch seconds, duration) of the critical-path parts of what runs inside the block."""
    import openai._base_client

    from recreate.sandbox.bwrap import BwrapSandbox
    from recreate.sandbox.host import HostSession

    parts: dict[str, list[tuple[float, float]]] = collections.defaultdict(list)
    wrapped = [
        (openai._base_client.SyncAPIClient, "request", "model call"),
        (BwrapSandbox, "open", "sandbox open"),
        (HostSession, "run", "command"),
        (HostSession, "put", "file copy"),
        (ExperienceStore, "add", "experience write"),
    ]
    originals = [(owner, name, getattr(owner, name)) for owner, name, _ in wrapped]

    def timing(fn: Any, label: str) -> Any:
        @functools.wraps(fn)
        def timed(*args: Any, **kwargs: Any) -> Any:
            began, clock = time.time(), time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                parts[label].append((began, time.perf_counter() - clock))

        return timed

    for (owner, name, label), (_, _, fn) in zip(wrapped, originals, strict=True):
        setattr(owner, name, timing(fn, label))
    try:
        yield parts
    finally:
        for owner, name, fn in originals:
            setattr(owner, name, fn)


def print_breakdown(
    timed: dict[str, list[tuple[float, float]]],
    window: tuple[float, float],
    task_walls: list[float],
    latency: float,
    how: str,
) -> None:
    """Per task of a phase: each part's time, the model calls' time beyond the simulated latency, and
    the rest (a task's wall time less its parts: our code, and waiting for the GIL or a core)."""
    parts = {k: [d for start, d in v if window[0] <= start <= window[1]] for k, v in timed.items()}
    parts = {k: v for k, v in parts.items() if v}
    tasks, wall = len(task_walls), sum(task_walls)
    print(f"where a task's {wall / tasks * 1000:.0f} ms go ({how}, {tasks} tasks; per task, ms):")
    calls = len(parts.get("model call", []))
    for label, times in sorted(parts.items(), key=lambda item: -sum(item[1])):
        print(f"  {label:<17} {sum(times) / tasks * 1000:7.1f}  ({len(times) / tasks:.1f} a task, p50 "
              f"{statistics.median(times) * 1000:.1f} ms)")  # fmt: skip
    beyond = sum(parts.get("model call", [])) - calls * latency
    print(f"  {'of which beyond the simulated latency':<17}: {beyond / tasks * 1000:.1f}")
    print(f"  {'rest':<17} {(wall - sum(sum(t) for t in parts.values())) / tasks * 1000:7.1f}")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--tasks", type=int, default=32)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--executor", choices=["threads", "ray"], default="threads")
    ap.add_argument("--breakdown", action="store_true", help="time the parts of the serial phase")
    args = ap.parse_args()
    on_ray = None
    if args.executor == "ray":
        started = time.monotonic()
        on_ray = make_executor("ray", concurrency=args.concurrency)
        on_ray.connect()  # type: ignore[union-attr]
        print(f"local Ray started in {time.monotonic() - started:.1f} s (not in any phase)")
    with timed_parts() if args.breakdown else contextlib.nullcontext() as parts:
        serial, serial_tasks, window = run_phase(max(4, args.tasks // args.concurrency), 1, args.latency)
    llm_ideal = 60 * args.concurrency / (CALLS_PER_TASK * args.latency)
    scaling_ideal = 60 * args.concurrency * len(serial_tasks) / serial
    print(f"tasks={args.tasks} concurrency={args.concurrency} latency={args.latency}s (bwrap sandboxes)")
    print(
        f"ideal A, LLM latency only ({CALLS_PER_TASK} x {args.latency}s a task): {llm_ideal:.1f} tasks/min; "
        f"ideal B, {args.concurrency} x the measured serial rate ({serial / len(serial_tasks):.2f} s/task at "
        f"concurrency 1, sandboxes and evaluation included): {scaling_ideal:.1f} tasks/min"
    )
    if parts is not None:
        print_breakdown(parts, window, serial_tasks, args.latency, "serial")
    rates = {}
    for name, executor in [("threads", None)] + ([("ray", on_ray)] if on_ray is not None else []):
        timing = timed_parts() if args.breakdown and executor is None else contextlib.nullcontext()
        with timing as parts:
            phase, per_task, window = run_phase(args.tasks, args.concurrency, args.latency, executor)
        rates[name] = rate = 60 * args.tasks / phase
        p50 = statistics.median(per_task)
        print(
            f"{name:>7}: {rate:.1f} tasks/min (phase {phase:.2f} s; task p50 {p50:.2f} s)"
            f" -> ratio to ideal A {rate / llm_ideal:.3f}, to ideal B {rate / scaling_ideal:.3f}"
        )
        if parts is not None:
            print_breakdown(parts, window, per_task, args.latency, f"concurrency {args.concurrency}")
    if on_ray is not None:
        print(f"ray / threads: {rates['ray'] / rates['threads']:.3f}")


if __name__ == "__main__":
    main()
