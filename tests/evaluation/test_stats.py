"""The gate's stated rule: a paired bootstrap of the mean improvement, accept when its 95% lower bound is
above --min-improvement; a tie goes to the smaller scaffold."""

from recreate.evaluation.stats import paired_gate


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
