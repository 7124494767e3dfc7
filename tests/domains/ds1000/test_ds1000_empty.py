"""DS-1000: an answer with no elements never passes where the expected answer has some (numpy's
comparisons broadcast a size-0 array against anything; a `zip` over an empty result checks nothing)."""

import copy
import importlib
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest
import scipy.sparse
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from recreate.domains import get_domain
from recreate.domains.ds1000.domain import EMPTY_ANSWERS, empty_answer
from recreate.domains.ds1000.judge import CHECKS_DIR

DEV = Path(__file__).resolve().parents[4] / "shared" / "data" / "ds1000" / "ds1000_dev.jsonl"
EMPTIES = (
    np.array([]),
    np.empty((0, 3)),
    np.zeros((2, 0)),
    [],
    (),
    {},
    set(),
    "",
    b"",
    scipy.sparse.csr_matrix((0, 0)),
    range(0),
)


@pytest.fixture(scope="module")
def check(tmp_path_factory):
    """checks/ds1000_check.py, imported as the checker sandbox imports it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(CHECKS_DIR))
        yield importlib.import_module("ds1000_check")


numbers = st.one_of(st.integers(), st.floats(), st.booleans(), st.complex_numbers())
non_empty = st.recursive(
    st.one_of(
        numbers,
        st.text(min_size=1),
        hnp.arrays(hnp.scalar_dtypes(), hnp.array_shapes(min_dims=0, min_side=1)),
    ),
    lambda inner: st.one_of(
        st.lists(inner, min_size=1, max_size=3),
        st.lists(inner, min_size=1, max_size=3).map(tuple),
        st.dictionaries(st.text(max_size=2), inner, min_size=1, max_size=3),
    ),
    max_leaves=6,
)


@settings(max_examples=150, deadline=None, derandomize=True, database=None)
@given(non_empty, st.sampled_from(EMPTIES))
def test_an_empty_answer_fails_where_the_expected_one_is_not(check, expected, empty):
    assert check.empty_where_expected(empty, expected) == "result"
    assert check.empty_where_expected(copy.deepcopy(expected), expected) is None  # a reference passes
    assert check.empty_where_expected(empty, empty) is None  # an empty answer that is right passes


@settings(max_examples=100, deadline=None, derandomize=True, database=None)
@given(st.lists(non_empty, min_size=1, max_size=4), st.data())
def test_an_empty_item_fails_where_the_expected_item_is_not(check, expected, data):
    at = data.draw(st.integers(0, len(expected) - 1))
    got = [copy.deepcopy(x) for x in expected]
    got[at] = data.draw(st.sampled_from(EMPTIES))
    assert check.empty_where_expected(got, expected) == f"result[{at}]"
    assert check.empty_where_expected({"k": got}, {"k": expected}) == f"result['k'][{at}]"


def test_what_has_no_size_is_left_to_the_problems_check(check):
    class Model:  # neither a container nor a number: no size to compare
        pass

    for unknown in (None, Model(), object()):
        assert check.empty_where_expected([], unknown) is None
        assert check.empty_where_expected(unknown, [1]) is None


def test_the_selftest_probes_every_kind_of_empty_answer_across_a_dataset(tmp_path):
    rows = [
        f'{{"prompt": "p", "reference_code": "result = 1", "metadata": {{"problem_id": {n}, '
        f'"library": "Numpy"}}, "code_context": "x = 1\\n[insert]\\n"}}'
        for n in range(60)
    ]
    (tmp_path / "p.jsonl").write_text("\n".join(rows) + "\n")
    domain = get_domain("ds1000", data=tmp_path / "p.jsonl", env=tmp_path / "env")
    probed = {tuple(domain.wrong_submissions(t))[-1] for t in domain.tasks()}
    assert {f"{'import ' + m + chr(10) if m else ''}result = {v}" for m, v in EMPTY_ANSWERS} == probed
    assert all(len(domain.wrong_submissions(t)) == 1 for t in domain.tasks())


@pytest.mark.slow
@pytest.mark.bwrap
@pytest.mark.shared_data
def test_empty_answers_fail_the_dev_problems_they_passed(ds1000_env, bwrap):
    """294 zips over the result (every kind of empty answer tried); 309 and its function-body twin 313
    compare with numpy's broadcast, 715 is a SciPy one. The references still pass."""
    if not DEV.is_file():
        pytest.skip("../shared/data is absent")
    domain = get_domain("ds1000", data=DEV, env=ds1000_env)
    tasks = {t.id: t for t in domain.tasks()}
    kinds = {"ds1000-294": range(len(EMPTY_ANSWERS)), "ds1000-309": (0, 8), "ds1000-313": (0, 3)}
    kinds["ds1000-715"] = (1, 7)
    jobs = [(tasks[i], tasks[i].reference) for i in kinds]
    for task_id, chosen in kinds.items():
        body = task_id == "ds1000-313"
        jobs += [(tasks[task_id], empty_answer(kind, body)) for kind in chosen]
    with ThreadPoolExecutor(2) as pool:
        verdicts = list(pool.map(lambda job: domain.evaluate(job[0], job[1], bwrap), jobs))
    results = {(task.id, code): verdict for (task, code), verdict in zip(jobs, verdicts, strict=True)}
    assert [k for k, v in results.items() if v.passed != (k[1] == tasks[k[0]].reference)] == []
    feedback = results["ds1000-294", empty_answer(2, False)].feedback
    assert "result is empty where the expected answer is not" in feedback
