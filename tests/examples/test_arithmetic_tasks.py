"""The main job's task file is what its generator writes, and every answer is the sum its wording asks for."""

from __future__ import annotations

import importlib.util
import json
import re
from pathlib import Path

from recreate.domains import get_domain

ARITHMETIC = Path(__file__).resolve().parents[2] / "examples" / "arithmetic"


def _generator():
    spec = importlib.util.spec_from_file_location("phrasings", ARITHMETIC / "phrasings.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_phrased_sums_file_is_the_generators_output():
    rows = [json.loads(line) for line in (ARITHMETIC / "phrased_sums.jsonl").read_text().splitlines()]
    assert rows == _generator().phrased_sums()
    assert len({r["id"] for r in rows}) == len(rows) == 64


def test_each_wording_appears_and_every_answer_is_the_sum():
    generator = _generator()
    rows = generator.phrased_sums()
    used = {int(r["id"].split("-")[1][1:]) for r in rows}
    assert used == set(range(len(generator.WORDINGS)))
    for row in rows:
        numbers = [int(n) for n in re.findall(r"\d+", row["problem"])]
        assert len(numbers) == 3 and int(row["answer"]) == sum(numbers)


def test_math_domain_splits_the_file_without_overlap():
    domain = get_domain("math", data=ARITHMETIC / "phrased_sums.jsonl")
    splits = {name: {t.id for t in domain.tasks(name)} for name in ("train", "val", "test")}
    assert all(splits.values())
    train, val, test = splits["train"], splits["val"], splits["test"]
    assert not (train & val or train & test or val & test)
