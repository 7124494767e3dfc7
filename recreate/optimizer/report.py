"""The evolve report: `report.html`, a static export of the run's page in `recreate ui` (the same
templates, the same numbers): both axes of the evolution (scaffold versions and model versions with their
gates' improvement, interval at the gate's level and n), the scaffold × model grid, the fine-tuning
steps, the final test, cost per role, edits with their evidence, and every reflection with its errors and
messages."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any

__all__ = ["write_report"]


def write_report(result: Any, out_dir: Path) -> Path:
    """Write `out_dir`/report.html, one self-contained file (charts inline); returns its path."""
    from recreate.ui.evolution import run_view
    from recreate.ui.render import render_run
    from recreate.ui.runs import EvolveRun

    doc = json.loads(json.dumps(dataclasses.asdict(result), default=str))
    out_dir.mkdir(parents=True, exist_ok=True)
    path = out_dir / "report.html"
    path.write_text(render_run(run_view(EvolveRun.of_result(Path(result.run_dir), doc))), encoding="utf-8")
    return path
