"""The structured protocol on the embedded model: how often a reflection ends in a schema-valid proposal.

Runs `--n` structured reflections (the ReCreate-Agent's instance level) of SmolLM2-135M, served by
llama.cpp on this machine, over stored runs: the training-task trajectories of an evolve run (`--run
DIR`, e.g. the main job's `.recreate/runs/loop-1`), or, without one, runs of the arithmetic example made
here by the embedded agent. Prints, per reflection, its status, ops and seconds; then the rate of
schema-valid replies (decoded under the schema, so this is the protocol's soundness, not the model's
judgement), how reflections ended, the ops they proposed, and the time per reflection.

    python benchmarks/structured_proposals.py --n 24
    python benchmarks/structured_proposals.py --run .recreate/runs/loop-1 --n 24
"""

from __future__ import annotations

import argparse
import collections
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import jsonschema

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from recreate.domains import get_domain  # noqa: E402
from recreate.evaluation import Rollouts  # noqa: E402
from recreate.experience.schema import Trajectory  # noqa: E402
from recreate.local import local_agent_options, local_chat_model, start_server  # noqa: E402
from recreate.optimizer.structured import Digest, proposal_schema, reflect_structured  # noqa: E402
from recreate.scaffold import load_scaffold  # noqa: E402

DATA = REPO / "examples" / "arithmetic" / "tasks.jsonl"
SEED = REPO / "examples" / "arithmetic" / "scaffold"


def stored_runs(run_dir: Path, train: set[str]) -> list[Trajectory]:
    runs = [
        Trajectory.model_validate_json(p.read_text())
        for p in sorted((run_dir / "trajectories").glob("*.json"))
    ]
    return [t for t in runs if t.task_id in train and t.evaluation is not None]


def fresh_runs(home: Path, info, domain, n: int) -> list[Trajectory]:
    runner = Rollouts(
        load_scaffold(SEED), domain, model=info.spec, sandbox="bwrap", **local_agent_options(info)
    )
    tasks = domain.tasks("train")
    return [runner.run(tasks[i % len(tasks)], seed=i) for i in range(n)]


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--n", type=int, default=24, help="reflections (at least 20 for the rate)")
    parser.add_argument("--run", type=Path, help="an evolve run's folder: reflect on its training runs")
    args = parser.parse_args()
    domain = get_domain("math", data=DATA)
    scaffold = load_scaffold(SEED)
    with tempfile.TemporaryDirectory() as tmp:
        server = start_server(Path(tmp), engine="llamacpp", parallel=2)
        try:
            info = server.info
            print(f"model: {info.model} (llama.cpp, {info.base_url}); seed scaffold {SEED.relative_to(REPO)}")
            if args.run:
                runs = stored_runs(args.run, {t.id for t in domain.tasks("train")})[: args.n]
                print(f"{len(runs)} stored training runs from {args.run}")
            else:
                runs = fresh_runs(Path(tmp), info, domain, args.n)
                print(f"{len(runs)} runs of the seed scaffold made here")
            model = local_chat_model(info, "optimizer")
            prompts = {t.id: t.prompt for t in domain.tasks("train")}
            valid, ended, ops, seconds = 0, collections.Counter(), collections.Counter(), []
            for n, traj in enumerate(runs, start=1):
                digest = Digest(
                    traj,
                    scaffold=scaffold,
                    experience=None,
                    hidden_tasks=(),
                    with_eval=True,
                    with_steps=True,
                    prompts=prompts,
                )
                schema = proposal_schema(scaffold, list(digest.candidates))
                began = time.perf_counter()
                proposal = reflect_structured(
                    traj, scaffold=scaffold, domain_text=domain.describe(), model=model, experience=None,
                    sandbox="bwrap", hidden_tasks=(), prompts=prompts,
                )  # fmt: skip
                seconds.append(time.perf_counter() - began)
                replies = [m["content"] for m in proposal.transcript if m["role"] == "ai"]
                ok = bool(replies)
                for reply in replies:
                    try:
                        jsonschema.validate(json.loads(reply), schema)
                    except (ValueError, jsonschema.ValidationError):
                        ok = False
                valid += ok
                ended[proposal.status] += 1
                ops.update(op["op"] for op in proposal.ops)
                said = "; ".join(
                    f"{op['op']}: {str(op.get('text') or op.get('task') or op.get('title'))[:60]}"
                    for op in proposal.ops
                )
                score = traj.evaluation.score if traj.evaluation else None
                line = said or proposal.diagnosis[:70]
                print(f"{n:3d} run score {score} -> {proposal.status:7s} {seconds[-1]:5.1f} s  {line}")
        finally:
            server.stop()
    total = len(seconds)
    print(f"\nschema-valid replies: {valid}/{total} reflections ({valid / max(total, 1):.0%})")
    print(
        "ended: "
        + ", ".join(f"{k} {v}" for k, v in sorted(ended.items()))
        + "  (empty = a stated 'no change')"
    )
    print("ops proposed: " + (", ".join(f"{k} {v}" for k, v in ops.most_common()) or "none"))
    if seconds:
        print(f"seconds per reflection: median {statistics.median(seconds):.1f}, max {max(seconds):.1f}")


if __name__ == "__main__":
    main()
