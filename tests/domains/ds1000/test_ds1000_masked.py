"""DS-1000: a masked array never passes where the expected answer masks nothing. numpy's testing
asserts skip masked elements, so `np.ma.masked_all(shape)` passed `assert_array_equal` and
`assert_allclose` against any expected array, and the codec sends masked arrays as they are."""

import importlib

import numpy as np
import pytest

from recreate.domains.ds1000.judge import CHECKS_DIR


@pytest.fixture(scope="module")
def check():
    """checks/ds1000_check.py, imported as the checker sandbox imports it."""
    with pytest.MonkeyPatch.context() as patch:
        patch.syspath_prepend(str(CHECKS_DIR))
        yield importlib.import_module("ds1000_check")


EXPECTED = np.array([3, 10, 24, 45, 73, 108])


@pytest.mark.parametrize(
    ("result", "expected", "where"),
    [
        (np.ma.masked_all(6), EXPECTED, "result"),
        (np.ma.array(np.zeros(6), mask=[0, 0, 0, 0, 0, 1]), EXPECTED, "result"),
        (np.ma.masked_all(1), EXPECTED, "result"),
        (np.ma.masked_all(4), EXPECTED, "result"),  # shapes that do not broadcast
        (np.ma.masked_all(6), 5, "result"),
        ([1, np.ma.masked_all(6)], [1, EXPECTED], "result[1]"),
        ({"a": np.ma.masked_all(6)}, {"a": EXPECTED}, "result['a']"),
        (np.ma.masked_all(6), np.ma.array(EXPECTED, mask=[1, 0, 0, 0, 0, 0]), "result"),
    ],
)
def test_masked_where_the_expected_answer_is_not(check, result, expected, where):
    assert check.masked_where_expected(result, expected) == where


@pytest.mark.parametrize(
    ("result", "expected"),
    [
        (np.ma.array(EXPECTED), EXPECTED),  # a masked array that masks nothing
        (np.ma.array(EXPECTED, mask=[1, 0, 0, 0, 0, 0]), np.ma.array(EXPECTED, mask=[1, 0, 0, 0, 0, 0])),
        (np.ma.array(EXPECTED, mask=[1, 0, 0, 0, 0, 0]), np.ma.array(EXPECTED, mask=[1, 1, 0, 0, 0, 0])),
        (EXPECTED, EXPECTED),
        ([np.ma.array(EXPECTED)], [EXPECTED]),
        ("text", EXPECTED),
    ],
)
def test_a_mask_the_expected_answer_shares_is_left_to_the_problems_check(check, result, expected):
    assert check.masked_where_expected(result, expected) is None


def test_the_gap_is_real(check):
    """Why the guard exists: numpy's own asserts pass a fully masked array against anything."""
    np.testing.assert_array_equal(np.ma.masked_all(6), EXPECTED)
    np.testing.assert_allclose(np.ma.masked_all(6), EXPECTED)
