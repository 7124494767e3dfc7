"""`recreate ui` on a large home: page load times with one evolve run of 10,000 trajectories.

Builds (or reuses) a home holding one evolve run: 10k schema-v1 trajectories of 5 steps each in the
experience store (catalog + files; not embedded, as search is the store's own cost) and in the run's
folder, a result.json with 20 rounds of 500 per-task results and the gate's 21 decisions, and one
reflection file per trajectory. Then serves the app with uvicorn on 127.0.0.1 and times each page over
HTTP (httpx, sequential requests, after one warm-up request each).

    python benchmarks/ui.py [--trajectories 10000] [--home DIR] [--repeats 20]

Prints p50 / p95 / max milliseconds per page; the target is < 300 ms for every page.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from rich.console import Console
from rich.table import Table

from recreate.experience.schema import Evaluation, Observation, Outcome, ScaffoldRef, Step, Trajectory, Usage
from recreate.experience.store import ExperienceStore
from recreate.ui import create_app

RUN_ID = "evolve-bench"
ROUNDS = 20
HASH = "0123456789abcdef" * 4
TARGET_MS = 300.0


def _trajectory(i: int) -> Trajectory:
    version = f"v{1 + i * ROUNDS // max(1, _trajectory.total)}"
    passed = i % 3 == 0
    steps = [
        Step(
            index=k,
            action={"tool": "bash", "args": {"command": f"python solve.py --case {i} --step {k}"}},
            observation=Observation(
                stdout=f"line {k}\n" * 40, stderr="" if k else "warning: x", exit_code=k % 2
            ),
            usage=Usage(prompt_tokens=900 + k, completion_tokens=40, cost_usd=0.0004),
        )
        for k in range(5)
    ]
    return Trajectory(
        trajectory_id=f"t-{i:016x}",
        task_id=f"task-{i % 500}",
        run_id=RUN_ID,
        domain="bench",
        scaffold=ScaffoldRef(name="bench", version=version, hash=HASH),
        messages=[{"role": "user", "content": f"Solve case {i}."}]
        + [{"role": "assistant", "content": f"step {k}"} for k in range(5)],
        steps=steps,
        outcome=Outcome(exit_status="submitted", submission=str(i)),
        evaluation=Evaluation(
            score=float(passed), passed=passed, feedback="expected 42" if not passed else "ok"
        ),
    )


_trajectory.total = 10_000  # type: ignore[attr-defined]


def build_home(home: Path, n: int) -> None:
    _trajectory.total = n  # type: ignore[attr-defined]
    run = home / "runs" / RUN_ID
    (run / "trajectories").mkdir(parents=True)
    (run / "proposals").mkdir()
    config = {
        "run_id": RUN_ID,
        "seed_ref": "bench@v1",
        "domain": "bench",
        "agent_model": "m",
        "optimizer_model": "m",
    }
    (run / "config.json").write_text(json.dumps(config))
    store = ExperienceStore(home / "experience", embedding="hash", index=False)
    trajectories = [_trajectory(i) for i in range(n)]
    store.ingest(trajectories, index=False)
    store.close()
    results = []
    for i, traj in enumerate(trajectories):
        traj.save(run / "trajectories" / f"{traj.trajectory_id}.json")
        proposal = {
            "source": traj.task_id,
            "cause": "knowledge_gap",
            "diagnosis": "d",
            "ops": [],
            "status": "ok",
        }
        (run / "proposals" / f"reflect-{HASH[:16]}-{traj.trajectory_id}.json").write_text(
            json.dumps(proposal)
        )
        results.append(
            {
                "round": i * ROUNDS // n,
                "task_id": traj.task_id,
                "trajectory_id": traj.trajectory_id,
                "score": traj.evaluation.score,
                "proposal_status": "ok",
                "cause": "knowledge_gap",
                "n_ops": 1,
            }
        )
    history = [
        {"ref": "bench@v1", "parent": None, "accepted": True, "round": 0, "reason": "seed", "val": {"a": 0.2}}
    ]
    for r in range(1, ROUNDS + 1):
        gate = {"improvement": 0.01 * r, "low": -0.1, "high": 0.2, "n": 50, "tasks": 50, "parent_mean": 0.2}
        parent = next(h["ref"] for h in reversed(history) if h["accepted"])
        history.append(
            {"ref": f"bench@v{r + 1}", "parent": parent, "accepted": r % 3 == 0, "round": r, "reason": "gate",
             "val": {"a": 0.2 + 0.01 * r}, "gate": gate, "ops": [{"op": "add_rule"}] * 2}
        )  # fmt: skip
    usage = {role: {"calls": 1000, "prompt_tokens": 10**6, "completion_tokens": 10**4, "cost_usd": 1.5}
             for role in ("agent", "optimizer", "synthesis")}  # fmt: skip
    result = {"run_id": RUN_ID, "final": "bench@v19", "history": history, "results": results, "usage": usage}
    (run / "result.json").write_text(json.dumps(result))


def serve(home: Path) -> tuple[str, uvicorn.Server, threading.Thread]:
    server = uvicorn.Server(uvicorn.Config(create_app(home), host="127.0.0.1", port=0, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    while not server.started:
        time.sleep(0.05)
    return f"http://127.0.0.1:{server.servers[0].sockets[0].getsockname()[1]}", server, thread


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--trajectories", type=int, default=10_000)
    parser.add_argument("--home", type=Path, help="build here (reused when it already holds the run)")
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args()
    home = args.home or Path(tempfile.mkdtemp(prefix="recreate-ui-bench-")) / "home"
    if not (home / "runs" / RUN_ID / "result.json").is_file():
        started = time.perf_counter()
        build_home(home, args.trajectories)
        print(f"built {home} with {args.trajectories} trajectories in {time.perf_counter() - started:.0f} s")
    last = f"t-{args.trajectories - 1:016x}"
    pages = {
        "runs": "/",
        "run (first page)": f"/runs/{RUN_ID}",
        "run (last page)": f"/runs/{RUN_ID}?offset={args.trajectories - 50}",
        "experience": "/experience",
        "experience filtered, deep page": "/experience?outcome=failed&offset=5000",
        "trajectory": f"/trajectories/{last}",
        "compare": f"/compare?a={last}&b=t-{0:016x}",
    }
    url, server, thread = serve(home)
    table = Table(title=f"recreate ui, one run of {args.trajectories} trajectories (ms over HTTP)")
    for column in ("page", "p50", "p95", "max", f"< {TARGET_MS:.0f} ms"):
        table.add_column(column)
    ok = True
    with httpx.Client(base_url=url, timeout=60) as client:
        for name, path in pages.items():
            assert client.get(path).status_code == 200, path
            times = []
            for _ in range(args.repeats):
                t = time.perf_counter()
                client.get(path).raise_for_status()
                times.append((time.perf_counter() - t) * 1000)
            times.sort()
            p95 = times[min(len(times) - 1, round(0.95 * (len(times) - 1)))]
            ok &= p95 < TARGET_MS
            row = [f"{statistics.median(times):.0f}", f"{p95:.0f}", f"{times[-1]:.0f}"]
            table.add_row(name, *row, "yes" if p95 < TARGET_MS else "NO")
    server.should_exit = True
    thread.join(timeout=10)
    Console().print(table)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
