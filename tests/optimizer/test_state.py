"""`EvolveConfig` refuses, when it is made, a setting the loop cannot run with: one line naming the field
to a Python caller and the option on the command line."""

from __future__ import annotations

import math
from pathlib import Path

import pytest

import recreate
from recreate.domains import get_domain
from recreate.optimizer import EvolveConfig, EvolveError, SizeBudget
from tests.optimizer.script import EVALUATOR, WORDS
from tests.optimizer.test_evolve import SEED


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("min_improvement", math.nan),  # was taken: every candidate was then rejected
        ("min_improvement", math.inf),
        ("gate_alpha", 0.0),  # a level no candidate passes
        ("gate_alpha", 1e-4),  # finer than the random flips resolve
        ("gate_alpha", 0.5),  # a 0% interval: any lucky difference
        ("gate_alpha", math.nan),
        ("gate_alpha", "0.05"),
        ("rounds", -1),
        ("rounds", 0),
        ("rounds", 2.5),
        ("rounds", True),
        ("batch_size", 0),
        ("max_concurrency", 0),
        ("val_seeds", 0),
        ("test_seeds", -1),
        ("reflect_steps", 0),
        ("max_rollouts", 0),
        ("max_wall_s", 0.0),
        ("max_wall_s", math.nan),
        ("max_wall_s", math.inf),
        ("seed", 1.5),
        ("optimizer_protocol", "telepathy"),
        ("bootstrap", "yes"),
        ("size_budget", SizeBudget(max_chars=0)),
        ("size_budget", SizeBudget(min_fraction=1.5)),
    ],
)
def test_a_setting_the_loop_cannot_run_with_is_one_line_naming_the_field(field: str, value: object) -> None:
    with pytest.raises(EvolveError) as caught:
        EvolveConfig(**{field: value})
    message = str(caught.value)
    assert message.startswith(f"{field} is {value!r}; pass ") and "\n" not in message


def test_the_command_line_hears_its_own_option() -> None:
    with pytest.raises(EvolveError) as caught:
        EvolveConfig(rounds=-1, batch_size=0)
    assert caught.value.for_cli() == "--rounds is -1; pass a whole number of at least 1"
    with pytest.raises(EvolveError) as caught:
        EvolveConfig(max_concurrency=0)
    assert caught.value.for_cli().startswith("--concurrency is 0; ")
    with pytest.raises(EvolveError) as caught:
        EvolveConfig(min_improvement=math.nan)
    assert caught.value.for_cli() == "--min-improvement is nan; pass a finite number (e.g. 0.0)"


def test_a_field_set_after_the_config_was_made_is_checked_again(recreate_home: Path) -> None:
    config = EvolveConfig()
    config.batch_size = 0
    with pytest.raises(EvolveError, match="^batch_size is 0; "):
        config.check()
    domain = get_domain("jsonl", data=WORDS / "tasks.jsonl", evaluator=EVALUATOR)
    with pytest.raises(EvolveError, match="^batch_size is 0; "):  # before any server or store opens
        recreate.optimize(SEED, domain, model="m@http://127.0.0.1:9/v1", config=config, run_id="r1")
    assert not (recreate_home / "runs" / "r1").exists()


def test_the_edges_of_what_is_allowed_are_taken() -> None:
    config = EvolveConfig(
        rounds=1, batch_size=1, max_concurrency=1, test_seeds=0, min_improvement=-0.25, seed=-7,
        max_rollouts=1, max_wall_s=0.5, size_budget=SizeBudget(max_chars=1, min_fraction=0.0),
    )  # fmt: skip
    assert (config.test_seeds, config.min_improvement, config.max_wall_s) == (0, -0.25, 0.5)
    assert EvolveConfig().max_rollouts is None and EvolveConfig().max_wall_s is None
