"""`ReCreateOptimizer` on a run being resumed whose files were damaged (truncated, emptied, overwritten):
one `BrokenRun` line naming the file and the fix, before anything runs, and no file of the run changed."""

from __future__ import annotations

from pathlib import Path

import pytest

from recreate.domains import get_domain
from recreate.experience.store import ExperienceStore
from recreate.optimizer import EvolveConfig, EvolveError, ReCreateOptimizer
from recreate.runs import BrokenRun
from tests.optimizer.script import EVALUATOR, WORDS
from tests.optimizer.test_evolve import SEED


def optimizer(home: Path, url: str, **options) -> ReCreateOptimizer:
    return ReCreateOptimizer(
        optimizer_model=f"m@{url}",
        agent_model=f"m@{url}",
        home=home,
        sandbox="local",
        experience=ExperienceStore(home / "experience", embedding="hash"),
        config=EvolveConfig(rounds=1, batch_size=2),
        **options,
    )


def build(home: Path, url: str) -> None:
    """What `evolve --resume r1` builds before the loop runs (a new run the first time)."""
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    graph = optimizer(home, url).build(
        seed=SEED, domain=domain, trainset=domain.tasks("train"), valset=domain.tasks("val"), run_id="r1"
    )[0]
    graph.checkpointer.conn.close()


def files(run_dir: Path) -> dict[Path, bytes]:
    return {p: p.read_bytes() for p in run_dir.rglob("*") if p.is_file()}


DAMAGED = [
    ("config.json", b""),  # was "error: Expecting value: line 1 column 1 (char 0)"
    ("config.json", b'{"run_id": "r1", "seed_ref": "minimal@'),
    ("config.json", b"[1, 2]"),  # was "'list' object has no attribute 'get'"
    ("config.json", b"\xff\xfe\x00{}"),
    ("spent.json", b""),
    ("spent.json", b'{"rollouts": 3, "wall'),
    ("spent.json", b"[]"),
    ("spent.json", b'{"rollouts": -2, "wall_s": 1.0}'),
    ("spent.json", b'{"rollouts": 2, "wall_s": "long"}'),
    ("checkpoints.sqlite", b"not a database at all" * 200),  # was "file is not a database"
    ("checkpoints.sqlite", b"SQLite format 3\x00" + b"\x07" * 4000),
]


@pytest.mark.parametrize(("name", "data"), DAMAGED, ids=[f"{n}-{i}" for i, (n, _) in enumerate(DAMAGED)])
def test_a_damaged_file_on_resume_is_one_line_naming_it_and_the_run_keeps_its_files(
    recreate_home: Path, openai_server, name: str, data: bytes
) -> None:
    build(recreate_home, openai_server.url)
    run_dir = recreate_home / "runs" / "r1"
    (run_dir / "spent.json").write_text('{"rollouts": 2, "wall_s": 1.5}')
    (run_dir / name).write_bytes(data)
    before = files(run_dir)
    with pytest.raises(BrokenRun) as caught:
        build(recreate_home, openai_server.url)
    message = str(caught.value)
    assert message.startswith(f"{run_dir / name} ") and "\n" not in message
    assert message.endswith("restore it from a backup, or start a new run")
    after = files(run_dir)
    assert {p: after.get(p) for p in before} == before
    assert not openai_server.requests


def test_the_intact_run_resumes(recreate_home: Path, openai_server) -> None:
    build(recreate_home, openai_server.url)
    (recreate_home / "runs" / "r1" / "spent.json").write_text('{"rollouts": 2, "wall_s": 1.5}')
    build(recreate_home, openai_server.url)


def test_a_concurrency_the_loop_cannot_run_with_is_refused_naming_it(recreate_home: Path) -> None:
    with pytest.raises(EvolveError, match=r"^max_concurrency is 0; pass a whole number of at least 1$"):
        optimizer(recreate_home, "http://127.0.0.1:9/v1", max_concurrency=0)


def test_a_password_in_the_model_url_is_not_kept_in_the_runs_config(recreate_home: Path, openai_server):
    url = openai_server.url.replace("http://", "http://user:sekretpass999@")
    build(recreate_home, url)
    config = (recreate_home / "runs" / "r1" / "config.json").read_text()
    assert "sekretpass999" not in config and "user:***@" in config
