from recreate.optimizer.gate import paired_gate


def test_accepts_equal_or_better_and_rejects_worse():
    parent = {"a": 1.0, "b": 0.0, "c": 0.0}
    better = paired_gate(parent, {"a": 1.0, "b": 1.0, "c": 0.0})
    assert better.accepted and (better.wins, better.losses, better.ties) == (1, 0, 2)
    assert paired_gate(parent, dict(parent)).accepted
    worse = paired_gate(parent, {"a": 0.0, "b": 0.0, "c": 0.0})
    assert not worse.accepted and "rejected" in worse.reason and worse.losses == 1


def test_tolerance_and_pairing():
    parent = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 1.0}
    slightly_worse = {"a": 1.0, "b": 1.0, "c": 1.0, "d": 0.0}
    assert not paired_gate(parent, slightly_worse).accepted
    assert paired_gate(parent, slightly_worse, tolerance=0.25).accepted
    only_shared = paired_gate({"a": 1.0, "x": 0.0}, {"a": 1.0, "y": 1.0})  # unpaired tasks do not count
    assert only_shared.n == 1 and only_shared.accepted
    assert not paired_gate({}, {"a": 1.0}).accepted
