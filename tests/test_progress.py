"""The evolve loop's progress lines: one readable line per stage, whatever the stage ended in."""

from __future__ import annotations

import logging

import pytest

from recreate import progress
from recreate.experience.schema import Evaluation, Outcome, Trajectory


@pytest.fixture
def log(caplog: pytest.LogCaptureFixture) -> pytest.LogCaptureFixture:
    caplog.set_level(logging.INFO, logger="recreate.progress")
    return caplog


def test_a_gate_decision_says_its_verdict_once_and_counts_the_rounds_errors(
    log: pytest.LogCaptureFixture,
) -> None:
    accepted = {"ref": "m@v2", "accepted": True, "reason": "accepted: improvement +0.5", "errors": []}
    progress.decided(0, accepted)
    progress.decided(1, {"accepted": False, "reason": "no usable proposal this round: nothing to change",
                         "errors": ["alpha: the reflection failed: ValueError: x"]})  # fmt: skip
    progress.decided(2, {"ref": "m@v3", "accepted": True, "reason": "counter votes only"})
    assert log.messages == [
        "round 1: m@v2 accepted: improvement +0.5",
        "round 2: no candidate: no usable proposal this round: nothing to change (1 errors this round: "
        "failed reflections or runs, see the report)",
        "round 3: m@v3 accepted: counter votes only",
    ]


def test_a_fine_tuning_step_says_what_it_trained_and_which_model_stays(log: pytest.LogCaptureFixture) -> None:
    base = {"round": 2, "parent": "base", "trajectories": 8, "accepted": False}
    progress.finetuned(2, base | {"reason": "every group had equal rewards: nothing to learn"})
    progress.finetuned(2, base | {"reward_mean": 0.5, "model": "base+ft1", "reason": "rejected: -0.1"})
    progress.finetuned(2, base | {"reward_mean": 0.5, "model": "base+ft1", "accepted": True,
                                  "reason": "accepted: +0.27"})  # fmt: skip
    assert log.messages == [
        "round 2: fine-tuning (8 runs): nothing trained, base stays: every group had equal rewards: nothing "
        "to learn",
        "round 2: fine-tuning (8 runs, mean reward 0.5): base+ft1 rejected: -0.1 (base stays)",
        "round 2: fine-tuning (8 runs, mean reward 0.5): base+ft1 accepted: +0.27",
    ]


def test_a_fine_tuning_step_says_which_rounds_it_samples_and_what_it_trains(
    log: pytest.LogCaptureFixture,
) -> None:
    progress.finetuning(2, "base", every=2)
    progress.finetune_sampling(2, tasks=8, group=4)
    progress.finetune_training(2, "tapo", steps=8, runs=24)
    progress.finetuning(3, "base+ft1", every=1)
    assert log.messages == [
        "round 2: fine-tuning base on the training tasks of rounds 1-2",
        "round 2: fine-tuning: 32 runs to train on (8 tasks × 4)",
        "round 2: fine-tuning: training tapo for 8 steps on 24 runs",
        "round 3: fine-tuning base+ft1 on the training tasks of round 3",
    ]


def test_a_task_line_holds_with_and_without_a_score(log: pytest.LogCaptureFixture) -> None:
    run = Trajectory(task_id="alpha", domain="d", outcome=Outcome(exit_status="context_exceeded"))
    progress.task_done(0, run, {"status": "failed", "ops": []})
    scored = run.model_copy(update={"evaluation": Evaluation(score=1.0, passed=True)})
    progress.task_done(0, scored, {"status": "ok", "ops": [{}, {}]})
    progress.validated("m@v1", {}, ["alpha: APIConnectionError"], 3.2)
    assert log.messages == [
        "round 1: task alpha: no score (context_exceeded, 0 steps); proposal failed",
        "round 1: task alpha: score 1 (context_exceeded, 0 steps); proposal ok, 2 ops",
        "m@v1: validation mean n/a over 0 runs, 1 endpoint errors (no score) (3 s)",
    ]
