"""The end of `recreate evolve`: versions, the scaffold × model grid, the fine-tuning steps, and where
the final model's weights are."""

from __future__ import annotations

from pathlib import Path

from recreate.console import make_console
from recreate.optimizer.optimizer import EvolveResult
from recreate.optimizer.summary import print_summary

BASE, TUNED = "smollm2-135m-instruct", "smollm2-135m-instruct+ft1-5b4a9963"


def _run(tmp_path: Path, final_model: str) -> EvolveResult:
    history = [{"ref": "arithmetic@v1", "model": BASE, "val": {"a": 1.0, "b": 0.0}, "accepted": True}]
    step = {
        "round": 2, "scaffold": "arithmetic@v1", "parent": BASE, "model": TUNED, "trajectories": 32,
        "reward_mean": 0.65625, "parent_val": {"a": 0.0, "b": 0.0}, "val": {"a": 1.0, "b": 1.0},
        "accepted": True, "reason": "accepted: improvement +1.000",
    }  # fmt: skip
    return EvolveResult(
        run_id="r", run_dir=tmp_path, final="arithmetic@v1", history=history, models=[step],
        final_model=final_model,
    )  # fmt: skip


def _printed(result: EvolveResult, weights: tuple[Path, Path] | None) -> str:
    console = make_console()
    console.width = 240
    with console.capture() as captured:
        print_summary(console, result, result.run_dir / "report" / "report.html", weights)
    return captured.get()


def test_the_summary_shows_the_steps_and_where_the_final_model_is(tmp_path: Path) -> None:
    weights = (tmp_path / "policy" / "v1", tmp_path / "policy" / "v1.gguf")
    text = _printed(_run(tmp_path, TUNED), weights)
    assert "fine-tuning steps" in text and "0.656" in text and "accepted: improvement +1.000" in text
    assert f"model weights: {tmp_path / 'policy' / 'v1'} (HF)" in text
    assert f"recreate model serve --model {tmp_path / 'policy' / 'v1.gguf'}" in text


def test_the_base_model_has_no_weights_line(tmp_path: Path) -> None:
    text = _printed(_run(tmp_path, BASE), None)  # the embedded model: nothing of the run's to serve
    assert f"model: {BASE}" in text and "model weights" not in text
