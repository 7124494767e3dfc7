"""Ingest trajectories into a store from a separate process (used by the concurrency and kill tests).

python -m tests.experience.ingest_worker ROOT PREFIX COUNT [--shared N] [--report FILE] [--bulk]
Stores PREFIX-0..COUNT-1, interleaved with shared-0..N-1 (which other writers store too), one call per
trajectory (or one bulk `ingest` call with --bulk), printing "stored K" after each so a test can kill
the process mid-ingest.
"""

from __future__ import annotations

import argparse
import json

from recreate.experience.store import ExperienceStore
from tests.experience.factory import make_trajectory


def ids_to_store(prefix: str, count: int, shared: int) -> list[str]:
    own = [f"{prefix}-{n}" for n in range(count)]
    for n in range(shared):
        own.insert(min(n * 3, len(own)), f"shared-{n}")
    return own


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("prefix")
    parser.add_argument("count", type=int)
    parser.add_argument("--shared", type=int, default=0)
    parser.add_argument("--report")
    parser.add_argument("--bulk", action="store_true")
    args = parser.parse_args()
    store = ExperienceStore(args.root, embedding="hash")
    ids = ids_to_store(args.prefix, args.count, args.shared)
    if args.bulk:
        stored = iter(range(1, len(ids) + 1))
        store.ingest(
            (make_trajectory(i) for i in ids), progress=lambda _: print(f"stored {next(stored)}", flush=True)
        )
        return
    added, duplicates = [], []
    for number, trajectory_id in enumerate(ids, start=1):
        report = store.ingest([make_trajectory(trajectory_id)])
        added += report.added
        duplicates += report.duplicates
        print(f"stored {number}", flush=True)
    if args.report:
        with open(args.report, "w", encoding="utf-8") as fh:
            json.dump({"added": added, "duplicates": duplicates}, fh)


if __name__ == "__main__":
    main()
