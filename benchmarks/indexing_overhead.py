"""Indexing overhead: the evolve loop's wall time with experience indexing on and off, side by side.

The loop is `recreate evolve`'s (ReCreateOptimizer.optimize: rollouts in bubblewrap, evaluation,
reflection, synthesis, the gate) against the scripted OpenAI-compatible endpoint at a fixed model
latency, with the embedding users get (`minilm`: all-MiniLM-L6-v2 through ONNX Runtime, exported once
under RECREATE_HOME/models before timing). The ReCreate-Agent searches the experience first in every
reflection, as a real one does. "off" stores every trajectory (files + catalog) but embeds nothing;
its searches still embed their query. Each run is a fresh process (the model loads in it) on a fresh
home, same seeds; on and off alternate so load on the machine hits both alike. A run's wall time
includes closing the store, i.e. draining whatever indexing is still pending.

    .venv/bin/python benchmarks/indexing_overhead.py [--repeats 3] [--rounds 3] [--tasks 8]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks.evolve_throughput import make_domain  # noqa: E402
from recreate.testing import Reply, ScriptedOpenAIServer, tool_call  # noqa: E402
from tests.optimizer import script  # noqa: E402


def searching_responder(body: dict[str, Any]) -> Reply:
    """The scripted episode of tests/optimizer/script.py, with a search of the experience as the
    ReCreate-Agent's first action."""
    messages = body["messages"]
    first = messages[0] if messages else {}
    if first.get("role") == "system" and "ReCreate-Agent" in str(first.get("content")):
        turn = sum(m["role"] == "assistant" for m in messages)
        if turn == 0:
            return tool_call("search_experience", {"query": "answer in the wrong case", "scope": "steps"})
        return script._reflect(messages, turn - 1)
    return script.responder(body)


def one_run(mode: str, url: str, args: argparse.Namespace) -> dict[str, Any]:
    """Wall time of one evolve run (from the optimizer's start to the store's close)."""
    from recreate.config import load_settings
    from recreate.experience.store import ExperienceStore
    from recreate.optimizer import EvolveConfig, ReCreateOptimizer

    with tempfile.TemporaryDirectory(dir=os.environ["RECREATE_HOME"]) as tmp:
        root = Path(tmp)
        root.chmod(0o755)  # the evaluator folder is bound into the sandbox, whose user must reach it
        domain, train, val = make_domain(root, args.tasks)
        home = root / "home"
        settings = load_settings(home=home)
        began = time.perf_counter()
        store = ExperienceStore(home / "experience", embedding=settings.embedding, index=mode == "on")
        opt = ReCreateOptimizer(
            optimizer_model=f"scripted@{url}",
            agent_model=f"scripted@{url}",
            sandbox="bwrap",
            max_concurrency=args.concurrency,
            home=home,
            experience=store,
            config=EvolveConfig(rounds=args.rounds, batch_size=args.tasks, seed=0, test_seeds=0),
        )
        seed = REPO / "scaffolds" / "minimal"
        result = opt.optimize(run_id="bench", seed=seed, domain=domain, trainset=train, valset=val[:4])
        store.close()
        wall = time.perf_counter() - began
        stored = len(store.list())
        drift = store.verify() if mode == "on" else None
        store.close()
    assert result.stopped is None, f"the run stopped early: {result.stopped}"  # a cut run is no figure
    assert not drift or not any(vars(drift).values()), f"the index missed runs: {drift}"
    used = [resource.getrusage(who) for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN)]
    cpu = sum(u.ru_utime + u.ru_stime for u in used)  # this process and its sandboxes, whole lifetime
    return {"mode": mode, "wall_s": wall, "cpu_s": cpu, "stored": stored}


def warm_model(home: Path) -> None:
    """Export the ONNX graph once (a one-time cost users pay on first use, not per run)."""
    code = "from recreate.experience.embeddings import make_embedding; make_embedding('minilm')(['warm'])"
    subprocess.run([sys.executable, "-c", code], check=True, env={**os.environ, "RECREATE_HOME": str(home)})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tasks", type=int, default=8, help="training tasks a round (the batch)")
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--latency", type=float, default=0.5)
    ap.add_argument("--home", type=Path, default=Path(tempfile.gettempdir()) / "recreate-indexing-bench")
    ap.add_argument("--one", choices=("on", "off"), help=argparse.SUPPRESS)
    ap.add_argument("--url", help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.one:
        print(json.dumps(one_run(args.one, args.url, args)))
        return
    args.home.mkdir(parents=True, exist_ok=True)
    warm_model(args.home)
    env = {**os.environ, "RECREATE_HOME": str(args.home), "OMP_NUM_THREADS": "1"}
    walls: dict[str, list[float]] = {"on": [], "off": []}
    cpus: dict[str, list[float]] = {"on": [], "off": []}
    # served by this process; each run is a process of its own, as against any real endpoint
    with ScriptedOpenAIServer(searching_responder, latency_s=args.latency) as server:
        url = server.url
        for repeat in range(args.repeats):
            for mode in ("on", "off") if repeat % 2 == 0 else ("off", "on"):
                cmd = [sys.executable, __file__, "--one", mode, "--url", url]
                cmd += [f"--{k}={getattr(args, k)}" for k in ("rounds", "tasks", "concurrency")]
                done = subprocess.run(cmd, env=env, capture_output=True, text=True)
                if done.returncode:
                    sys.exit(f"the {mode} run failed:\n{done.stderr[-3000:]}")
                run = json.loads(done.stdout.strip().splitlines()[-1])
                walls[mode].append(run["wall_s"])
                cpus[mode].append(run["cpu_s"])
                print(
                    f"repeat {repeat} {mode:>3}: {run['wall_s']:.2f} s wall, {run['cpu_s']:.1f} s CPU "
                    f"({run['stored']} runs stored)",
                    flush=True,
                )
    on, off = statistics.median(walls["on"]), statistics.median(walls["off"])
    print(
        f"rounds={args.rounds} tasks={args.tasks} concurrency={args.concurrency} latency={args.latency}s "
        f"embedding=minilm (bwrap sandboxes)"
    )
    print(f"indexing on:  median {on:.2f} s  {[round(w, 2) for w in walls['on']]}")
    print(f"indexing off: median {off:.2f} s  {[round(w, 2) for w in walls['off']]}")
    print(f"ratio on/off: {on / off:.3f} (wall, medians)")
    cpu_on, cpu_off = statistics.median(cpus["on"]), statistics.median(cpus["off"])
    cpu_ratio = cpu_on / cpu_off
    print(f"CPU a run (process + sandboxes): on {cpu_on:.1f} s, off {cpu_off:.1f} s, ratio {cpu_ratio:.3f}")


if __name__ == "__main__":
    main()
