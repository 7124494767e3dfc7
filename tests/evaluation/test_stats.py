"""The gate's stated rule: a paired bootstrap of the mean improvement and a sign-flip test, accept when
its 95% lower bound is above --min-improvement and the test rejects "no improvement" at 2.5%; a tie goes
to the smaller scaffold."""

import math
from itertools import product

import numpy as np
import pytest

from recreate.evaluation.stats import (
    ALPHA,
    FLIPS,
    LEAST_ALPHA,
    interval_label,
    min_tasks_to_accept,
    paired_gate,
    sign_flip_p,
)


def test_a_reliable_improvement_is_accepted_with_its_interval_and_n():
    parent = {t: 0.0 for t in "abcdefgh"}
    better = paired_gate(parent, {t: 1.0 for t in "abcdefgh"})
    assert better.accepted and (better.low, better.high, better.n) == (1.0, 1.0, 8)
    assert "CI [+1.000, +1.000], n=8" in better.reason


def test_a_lucky_difference_is_not_an_improvement():
    parent = {t: 0.0 for t in "abcd"}
    one_win = paired_gate(parent, {"a": 1.0, "b": 0.0, "c": 0.0, "d": 0.0})
    assert not one_win.accepted and one_win.low <= 0.0 < one_win.improvement  # mean > parent, bound is not
    assert one_win.wins == 1 and "rejected" in one_win.reason


def test_ties_no_longer_pass_unless_the_candidate_is_smaller():
    parent = {"a": 1.0, "b": 0.0, "c": 0.0}
    assert not paired_gate(parent, dict(parent)).accepted  # used to pass: mean >= parent mean
    assert not paired_gate(parent, dict(parent), parent_size=100, candidate_size=120).accepted
    smaller = paired_gate(parent, dict(parent), parent_size=100, candidate_size=80)
    assert smaller.accepted and "smaller" in smaller.reason


def test_a_tie_of_wins_and_losses_goes_to_the_smaller_scaffold_and_nothing_below_a_tie_does():
    """The stated compression rule alone: a mean improvement of exactly 0 (here 2 tasks better, 2 worse)
    keeps the parent unless the candidate is smaller; a smaller candidate that is worse on average by one
    task in ten is rejected, whatever its size."""
    parent = {t: float(t in "abcd") for t in "abcdefghij"}
    mixed = parent | {"a": 0.0, "b": 0.0, "e": 1.0, "f": 1.0}
    tie = paired_gate(parent, mixed, parent_size=100, candidate_size=99, min_improvement=0.0)
    assert tie.accepted and (tie.wins, tie.losses, tie.improvement) == (2, 2, 0.0)
    assert tie.reason.endswith("a tie, and the candidate is the smaller scaffold")
    same_size = paired_gate(parent, mixed, parent_size=100, candidate_size=100)
    assert not same_size.accepted and same_size.reason.endswith("a tie, and the parent is not larger")
    worse = paired_gate(parent, mixed | {"g": 0.0, "e": 0.0}, parent_size=100, candidate_size=10)
    assert worse.improvement == -0.1 and not worse.accepted


def test_min_improvement_and_pairing():
    parent = {t: 0.0 for t in "abcdefgh"}
    half = {t: (1.0 if t in "abcd" else 0.5) for t in "abcdefgh"}  # +0.75 on average, at least +0.5
    assert paired_gate(parent, half).accepted
    assert not paired_gate(parent, half, min_improvement=0.6).accepted
    assert paired_gate(parent, half, min_improvement=-0.1).accepted
    only_shared = paired_gate({"a": 0.0, "x": 0.0}, {"a": 1.0, "y": 1.0})  # unpaired tasks do not count
    assert only_shared.n == 1 and only_shared.tasks == 1
    assert not paired_gate({}, {"a": 1.0}).accepted


def test_seeds_of_one_task_are_resampled_together():
    parent = {f"{t}#{s}": 0.0 for t in "ab" for s in range(3)}
    candidate = {f"a#{s}": 1.0 for s in range(3)} | {f"b#{s}": 0.0 for s in range(3)}
    verdict = paired_gate(parent, candidate)
    assert (verdict.n, verdict.tasks) == (6, 2) and not verdict.accepted  # 2 tasks, not 6 pairs
    assert verdict == paired_gate(parent, candidate)  # a fixed resampling seed: the same decision


def test_a_tie_between_versions_of_unknown_size_keeps_the_parent_and_says_so() -> None:
    verdict = paired_gate({"a": 1.0, "b": 0.0}, {"a": 1.0, "b": 0.0})  # e.g. two model versions
    assert not verdict.accepted and verdict.reason.endswith("a tie keeps the parent")


def test_few_tasks_that_all_improve_are_no_evidence_at_the_stated_level():
    """Under no effect each task's sign is a coin flip: k tasks all improving happens 2^-k of the time.
    The bootstrap alone accepted two such tasks (every resample of two +1s is +1)."""
    for k in range(2, 6):
        verdict = paired_gate({f"t{i}": 0.0 for i in range(k)}, {f"t{i}": 1.0 for i in range(k)})
        assert not verdict.accepted and verdict.low == 1.0  # the interval alone would have accepted
        assert f"p={2.0**-k:.3f}" in verdict.reason and "fewer than 6 tasks never do" in verdict.reason
        stated = paired_gate(
            {f"t{i}": 0.0 for i in range(k)}, {f"t{i}": 1.0 for i in range(k)}, alpha=2.0**-k
        )
        assert stated.accepted and interval_label(2.0**-k) in stated.reason
    assert min_tasks_to_accept() == 6 and min_tasks_to_accept(0.05) == 5 and min_tasks_to_accept(0.25) == 2
    six = paired_gate({f"t{i}": 0.0 for i in range(6)}, {f"t{i}": 1.0 for i in range(6)})
    assert six.accepted and six.p_value == 2.0**-6


def test_the_gate_accepts_no_more_often_than_its_level_when_nothing_changed():
    """The stated decision holds: candidate and parent drawn alike (pass/fail at one rate, several seeds
    per task), the gate accepts at most `ALPHA` of the time, on few tasks as on many."""
    rng = np.random.default_rng(0)
    for tasks, seeds, trials in ((2, 1, 300), (3, 2, 300), (6, 1, 300), (12, 2, 200)):
        accepted = 0
        for _ in range(trials):
            keys = [f"t{t}#{s}" for t in range(tasks) for s in range(seeds)]
            parent = dict(zip(keys, rng.integers(0, 2, len(keys)).astype(float), strict=True))
            candidate = dict(zip(keys, rng.integers(0, 2, len(keys)).astype(float), strict=True))
            accepted += paired_gate(parent, candidate).accepted
        assert accepted / trials <= ALPHA + 2 * math.sqrt(ALPHA / trials), (tasks, seeds, accepted)


def test_the_sign_flip_p_value_is_the_share_of_flips_at_least_as_extreme():
    rng = np.random.default_rng(1)
    for n in range(1, 9):
        diffs = rng.choice([-1.0, -0.5, 0.0, 0.5, 1.0], size=n)
        flips = [
            sum(s * abs(d) for s, d in zip(signs, diffs, strict=True)) for signs in product((-1, 1), repeat=n)
        ]
        assert sign_flip_p(diffs) == sum(f >= diffs.sum() - 1e-12 for f in flips) / 2**n
    assert sign_flip_p(np.array([0.1] * 3 + [0.2] * 3)) == 2.0**-6  # float sums: 0.1*3 + 0.2*3 ties itself
    assert sign_flip_p(np.zeros(5)) == 1.0 and sign_flip_p(np.array([])) == 1.0
    many = rng.normal(0.3, 1.0, size=24)  # above EXACT_UP_TO: random flips, the observed one counted
    p = sign_flip_p(many)
    assert 0 < p <= 1 and p == sign_flip_p(many)  # a fixed seed
    assert sign_flip_p(np.ones(30)) == 1 / (1 + FLIPS)


def test_a_looser_margin_never_turns_away_what_a_stricter_one_takes():
    tied = {f"t{i}": 0.5 for i in range(3)}
    for margin in (0.0, -0.05):
        verdict = paired_gate(tied, dict(tied), parent_size=10, candidate_size=9, min_improvement=margin)
        assert verdict.accepted and "smaller" in verdict.reason


def test_float_noise_is_a_tie_not_a_loss():
    verdict = paired_gate(
        {"a": 0.1 + 0.2, "b": 0.5, "c": 0.5}, {"a": 0.3, "b": 0.5, "c": 0.5}, parent_size=10, candidate_size=9
    )
    assert verdict.accepted and verdict.improvement == 0.0 and (verdict.wins, verdict.losses) == (0, 0)


@pytest.mark.parametrize("bad", [math.nan, -math.inf, math.inf])
def test_a_score_that_is_no_number_is_refused_not_tested(bad):
    with pytest.raises(ValueError, match="the parent's score of 'a' is"):
        paired_gate({"a": bad, "b": 0.1}, {"a": 0.0, "b": 0.2})


def test_a_small_stated_level_is_reachable_above_the_exact_range_and_labelled_as_it_is():
    n = 17  # random flips: the least p is 1 / (1 + FLIPS), finer than the least level taken
    verdict = paired_gate(
        {f"t{i}": 0.0 for i in range(n)}, {f"t{i}": 1.0 for i in range(n)}, alpha=LEAST_ALPHA
    )
    assert verdict.accepted and verdict.p_value == 1 / (1 + FLIPS) and "99.8% CI" in verdict.reason
    assert verdict.alpha == LEAST_ALPHA and verdict.to_dict()["alpha"] == LEAST_ALPHA
    assert interval_label() == "95% CI" and interval_label(0.0125) == "97.5% CI"
