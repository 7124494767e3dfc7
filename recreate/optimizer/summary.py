"""What `recreate evolve` prints at the end: the versions and their gates, the scaffold × model grid and
the fine-tuning steps (runs that fine-tune), and where the results are."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from rich.console import Console
from rich.table import Table


def print_summary(
    console: Console, result: Any, report: Path, weights: tuple[Path, Path] | None = None
) -> None:
    """`weights`: (HF folder, GGUF file) of the final model, when it is one the run fine-tuned."""
    table = Table(title=f"run {result.run_id}")
    for col in ("version", "accepted", "val mean", "gate"):
        table.add_column(col)
    for h in result.history:
        val = h.get("val")
        mean = f"{sum(val.values()) / len(val):.3f}" if val else "—"
        errors = h.get("errors") or []
        note = f" [{len(errors)} error(s), see the report: {errors[0][:120]}]" if errors else ""
        table.add_row(
            str(h.get("ref", "—")), "✔" if h.get("accepted") else "✘", mean, h.get("reason", "seed") + note
        )
    console.print(table)
    if result.models:
        print_grid(console, result)
        print_finetune_steps(console, result.models)
    print_reflections(console, result)
    if result.test:
        from recreate.progress import test_line

        console.print(
            f"final test ({result.test['tasks']} test tasks x {result.test['seeds']} seeds, pass@1, 95% CI): "
            + test_line(result.test)
        )
    model = f"  model: [bold]{result.final_model}[/]" if result.final_model else ""
    console.print(
        f"final: [bold]{result.final}[/]{model}  scaffold: {result.run_dir / 'scaffold'}  report: {report}"
    )
    if weights is not None:
        hf_dir, gguf = weights
        console.print(f"model weights: {hf_dir} (HF); serve them: recreate model serve --model {gguf}")


def print_grid(console: Console, result: Any) -> None:
    from recreate.ui.pairs import version_grid

    grid = version_grid(result.history, result.models)
    names = list(dict.fromkeys(m for _, m in grid))
    table = Table(title="val mean (runs): scaffold version × model version")
    table.add_column("scaffold")
    for name in names:  # folded, not cut: the versions differ only at the end of their names
        table.add_column(name, overflow="fold")
    for scaffold in dict.fromkeys(s for s, _ in grid):
        cells = (_mean_runs(*grid[(scaffold, m)]) if (scaffold, m) in grid else "—" for m in names)
        table.add_row(scaffold, *cells)
    console.print(table)


def print_finetune_steps(console: Console, models: list[dict[str, Any]]) -> None:
    table = Table(title="fine-tuning steps")
    for col in ("after round", "runs", "reward mean", "candidate", "accepted", "gate"):
        table.add_column(col, overflow="fold")
    for m in models:
        reward = m.get("reward_mean")
        table.add_row(
            str(m.get("round", "—")),
            str(m.get("trajectories", 0)),
            "—" if reward is None else f"{reward:.3f}",
            m.get("model", "—"),
            "✔" if m.get("accepted") else "✘",
            m.get("reason", ""),
        )
    console.print(table)


def _mean_runs(mean: float, runs: int) -> str:
    return f"{mean:.3f} ({runs})"


def print_reflections(console: Console, result: Any) -> None:
    """How the reflections ended: ops proposed, stated "no change", dropped or failed."""
    proposals = getattr(result, "proposals", [])
    if not proposals:
        return
    ended = {"ok": 0, "empty": 0, "dropped": 0, "failed": 0}
    for p in proposals:
        ended[p.get("status", "failed")] = ended.get(p.get("status", "failed"), 0) + 1
    ops = sum(len(p.get("ops", [])) for p in proposals)
    gated = [h for h in result.history if h.get("ops") and h.get("gate")]
    accepted = [h for h in gated if h.get("accepted")]
    console.print(
        f"reflections: {len(proposals)} ({ended['ok']} with edits, {ops} ops; {ended['empty']} no change; "
        f"{ended['dropped']} dropped; {ended['failed']} failed); scaffold candidates gated: {len(gated)}, "
        f"accepted: {len(accepted)}"
    )
