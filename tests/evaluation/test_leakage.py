"""Which tasks a version was evolved on: from its lineage's gate scores and the runs that made it, a
run killed before it wrote result.json included."""

from __future__ import annotations

import json

from recreate.evaluation.leakage import evolved_task_ids
from recreate.scaffold import ScaffoldStore, load_scaffold
from tests.evaluation.conftest import MINIMAL


def _run(home, name, seed_ref, train, val, result=None):
    folder = home / "runs" / name
    folder.mkdir(parents=True)
    (folder / "config.json").write_text(json.dumps({"seed_ref": seed_ref, "train": train, "val": val}))
    if result is not None:
        (folder / "result.json").write_text(json.dumps(result))


def test_a_killed_runs_training_tasks_count_by_the_gate_scores_it_left(tmp_path):
    home = tmp_path / "home"
    store = ScaffoldStore(home / "scaffolds")
    seed = store.commit(load_scaffold(MINIMAL))
    store.attach_scores(seed.ref, {"v0": 1.0}, label="val", run="killed")  # its v0: no version of its own
    changed = load_scaffold(MINIMAL).model_copy(update={"description": "evolved"})
    child = store.commit(changed, parent=seed.ref)
    store.attach_scores(child.ref, {"v0": 1.0}, label="val", run="killed")
    _run(home, "killed", seed.ref, train=["t1", "t2"], val=["v0"])  # no result.json: killed mid-run
    _run(home, "other", seed.ref, train=["x1"], val=["x0"])  # started from the same seed, made nothing here
    evolved = store.resolve(child.ref)
    assert evolved_task_ids(child.ref, store.load(evolved.ref), home) == {"t1", "t2", "v0"}
    assert evolved_task_ids(seed.ref, store.load(seed.ref), home) == set()  # the seed: evolved on nothing
