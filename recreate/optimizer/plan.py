"""`recreate evolve --dry-run`: the run's upper bound in calls, tokens and USD, before any call."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from rich.console import Console
from rich.table import Table

if TYPE_CHECKING:
    from recreate.optimizer.state import EvolveConfig


def projected_cost(
    cfg: EvolveConfig,
    *,
    n_val: int,
    scaffold_chars: int,
    max_steps: int,
    agent: str,
    optimizer: str,
    prices: dict | None = None,
    finetune_every: int | None = None,
    finetune_group_size: int = 4,
    base_url: str | None = None,
) -> list[tuple[str, int, int, float | None]]:
    """Upper-bound preview: (role, calls, tokens, USD or None when the price is unknown); a model
    served locally (`local`, or on a local `base_url`) is priced $0, as the run prices it."""
    from recreate.models import price_call

    rollouts = n_val * cfg.val_seeds * (1 + 2 * cfg.rounds) + cfg.batch_size * cfg.rounds  # parent re-scored
    if finetune_every:  # each step: runs to train on, then both model versions on the validation tasks
        per_step = cfg.batch_size * finetune_every * finetune_group_size + 2 * n_val * cfg.val_seeds
        rollouts += cfg.rounds // finetune_every * per_step
    prompt = scaffold_chars // 4 + 1500  # scaffold + task + a few observations, in tokens
    rows = [
        ("agent", rollouts * max_steps, rollouts * max_steps * (prompt + 400), agent),
        (
            "optimizer",
            cfg.batch_size * cfg.rounds * cfg.reflect_steps,
            cfg.batch_size * cfg.rounds * cfg.reflect_steps * 9000,
            optimizer,
        ),
        ("synthesis", cfg.rounds * 3, cfg.rounds * 3 * 16000, optimizer),
    ]
    out = []
    for role, calls, tokens, model in rows:
        completion = calls * 400
        out.append(
            (
                role,
                calls,
                tokens,
                price_call(model, tokens - completion, 0, completion, prices, base_url=base_url),
            )
        )
    return out


def print_plan(
    console: Console,
    cfg: EvolveConfig,
    seed: Any,
    *,
    n_train: int,
    n_val: int,
    agent: str,
    optimizer: str,
    prices: dict,
    budget_usd: float | None,
    finetune_every: int | None,
    finetune_group_size: int,
    base_url: str | None = None,
) -> list[tuple[str, int, int, float | None]]:
    from recreate.evaluation.stats import gate_cannot_improve
    from recreate.optimizer.synthesis import scaffold_size

    steps = cfg.rounds // finetune_every if finetune_every else 0
    tuning = f", {steps} fine-tuning step(s) (agent runs included)" if finetune_every else ""
    per_round = min(cfg.batch_size, n_train)
    plan = f"{cfg.rounds} rounds × {per_round} tasks{tuning}; {n_train} train, {n_val} val"
    table = Table(title=f"evolve plan: {plan}")
    for col in ("role", "calls (max)", "tokens (max)", "USD (max)"):
        table.add_column(col)
    rows = projected_cost(
        dataclasses.replace(cfg, batch_size=per_round),
        n_val=n_val,
        scaffold_chars=scaffold_size(seed),
        max_steps=seed.limits.max_steps,
        agent=agent,
        optimizer=optimizer,
        prices=prices,
        finetune_every=finetune_every,
        finetune_group_size=finetune_group_size,
        base_url=base_url,
    )
    for role, calls, tokens, usd in rows:
        table.add_row(role, str(calls), f"{tokens:,}", "unknown price" if usd is None else f"${usd:.2f}")
    console.print(table)
    if why := gate_cannot_improve(n_val, cfg.gate_alpha):
        console.print(f"warning: {why}")
    costs = [usd for *_, usd in rows]
    if budget_usd is not None and None not in costs and sum(costs) > budget_usd:  # type: ignore[arg-type]
        console.print(
            f"the plan's maximum (${sum(costs):.2f}) is above --budget-usd {budget_usd:g}: the run stops "
            "there, resumably (--resume with a higher --budget-usd)"
        )
    return rows
