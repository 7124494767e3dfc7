"""The evolve report: scores per version with the gate's decision (improvement, its 95% interval, n),
errors per round (endpoint errors, failed reflections), cost per role, edits per component, lineage with
evidence."""

from __future__ import annotations

import html
from collections import Counter
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

from recreate.text import clip_middle  # noqa: E402

COMPONENT = {
    "add_rule": "rules",
    "update_rule": "rules",
    "remove_rule": "rules",
    "add_tool": "tools",
    "update_tool": "tools",
    "remove_tool": "tools",
    "add_memory": "memory",
    "remove_memory": "memory",
    "vote": "counters",
    "add_example": "examples",
    "remove_example": "examples",
}


def component_of(op: dict[str, Any]) -> str:
    if op["op"] in COMPONENT:
        return COMPONENT[op["op"]]
    return str(op.get("field", "field")).split(".")[0]


def _mean(scores: dict[str, float] | None) -> float | None:
    return sum(scores.values()) / len(scores) if scores else None


def version_grid(
    history: list[dict[str, Any]], models: list[dict[str, Any]]
) -> dict[tuple[str, str], tuple[float, int]]:
    """(mean validation score, runs) of each (scaffold version, model version) pair that a gate
    measured, over all its measurements (each gate scores on its own fresh seeds)."""
    measured: dict[tuple[str, str], list[float]] = {}

    def add(scaffold: str | None, model: str | None, scores: dict[str, float] | None) -> None:
        if scaffold and model and scores:
            measured.setdefault((scaffold, model), []).extend(scores.values())

    for h in history:
        add(h.get("ref"), h.get("model"), h.get("val"))
        add(h.get("parent"), h.get("model"), h.get("parent_val"))
    for m in models:
        add(m.get("scaffold"), m.get("parent"), m.get("parent_val"))
        add(m.get("scaffold"), m.get("model"), m.get("val"))
    return {pair: (sum(v) / len(v), len(v)) for pair, v in measured.items()}


def _bar(path: Path, labels: list[str], values: list[float], title: str, ylabel: str) -> None:
    fig, ax = plt.subplots(figsize=(6, 3.2))
    ax.bar(labels or ["(none)"], values or [0])
    ax.set_title(title)
    ax.set_ylabel(ylabel)
    ax.tick_params(axis="x", rotation=30)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_report(result: Any, out_dir: Path) -> Path:
    """Write report.html and its PNG plots into `out_dir`; returns the HTML path."""
    out_dir.mkdir(parents=True, exist_ok=True)
    history = result.history
    versions = [h for h in history if h.get("val")]
    fig, ax = plt.subplots(figsize=(6, 3.2))
    xs = [h.get("ref", "?").split("@")[-1] for h in versions]
    ys = [_mean(h["val"]) or 0.0 for h in versions]
    ax.plot(xs, ys, marker="o", color="gray", alpha=0.4)
    for x, y, h in zip(xs, ys, versions, strict=True):
        ax.scatter([x], [y], color="tab:green" if h["accepted"] else "tab:red", zorder=3)
    ax.set_title("validation score per version (green: accepted, red: rejected)")
    ax.set_ylabel("mean score")
    if all(0.0 <= y <= 1.0 for y in ys):  # scores are fractions: show the whole scale, not a zoom on noise
        ax.set_ylim(-0.03, 1.03)
    fig.tight_layout()
    fig.savefig(out_dir / "scores.png", dpi=110)
    plt.close(fig)

    roles = result.usage or {}
    if any(r["cost_usd"] for r in roles.values()):
        _bar(out_dir / "spend_per_role.png", list(roles), [r["cost_usd"] for r in roles.values()],
             "cost per role", "USD")  # fmt: skip
    else:  # local models cost nothing: their tokens show the work
        tokens = [r["prompt_tokens"] + r["completion_tokens"] for r in roles.values()]
        _bar(out_dir / "spend_per_role.png", list(roles), tokens, "tokens per role (no cost)", "tokens")
    edits = Counter(component_of(op) for h in history if h.get("accepted") for op in h.get("ops", []))
    plots = ["scores.png", "spend_per_role.png"]
    if edits:
        _bar(out_dir / "edits_per_component.png", list(edits), list(edits.values()),
             "accepted edits per component", "ops")  # fmt: skip
        plots.append("edits_per_component.png")

    rows = "".join(
        f"<tr><td>{html.escape(str(h.get('ref', '—')))}</td><td>{h.get('round')}</td>"
        f"<td>{html.escape(str(h.get('parent') or ''))}</td><td>{'✔' if h.get('accepted') else '✘'}</td>"
        f"<td>{_fmt(_mean(h.get('val')))}</td>{_gate_cells(h.get('gate'))}"
        f"<td>{html.escape(h.get('reason', 'seed'))}</td><td>{_errors_cell(h.get('errors') or [])}</td></tr>"
        for h in history
    )
    cost_rows = "".join(
        f"<tr><td>{html.escape(role)}</td><td>{r['calls']}</td><td>{r['prompt_tokens']}</td>"
        f"<td>{r['completion_tokens']}</td><td>${r['cost_usd']:.4f}</td><td>{r['unpriced_calls']}</td></tr>"
        for role, r in roles.items()
    )
    lineage = "".join(_edit_html(h) for h in history if h.get("ops"))
    finetuning = _models_html(history, getattr(result, "models", []))
    status = f"stopped early: {html.escape(result.stopped)}" if result.stopped else "finished"
    model = getattr(result, "final_model", None)
    final_model = f", final model: <b>{html.escape(model)}</b>" if model else ""
    page = f"""<!doctype html><html><head><meta charset="utf-8"><title>recreate evolve {result.run_id}</title>
<style>body{{font-family:sans-serif;max-width:1100px;margin:2em auto}}table{{border-collapse:collapse}}
td,th{{border:1px solid #ccc;padding:4px 8px;font-size:14px}}
</style></head><body>
<h1>recreate evolve — {html.escape(result.run_id)}</h1>
<p>Final scaffold: <b>{html.escape(str(result.final))}</b>{final_model} ({status})</p>
{" ".join(f'<img src="{name}">' for name in plots)}
<h2>Versions</h2><table><tr><th>version</th><th>round</th><th>parent</th><th>accepted</th><th>val mean</th>
<th>improvement</th><th>95% CI</th><th>n</th><th>gate</th><th>errors</th></tr>{rows}</table>
{finetuning}
<h2>Cost per role</h2><table><tr><th>role</th><th>calls</th><th>prompt tok</th><th>completion tok</th>
<th>cost</th><th>unpriced calls</th></tr>{cost_rows}</table>
{_test_html(getattr(result, "test", None))}
<h2>Edits with rationale and evidence</h2>{lineage or "<p>(no edits)</p>"}
{_reflections_html(getattr(result, "proposals", []))}
</body></html>"""
    path = out_dir / "report.html"
    path.write_text(page, encoding="utf-8")
    return path


def _grid_cell(cell: tuple[float, int] | None) -> str:
    return "—" if cell is None else f"{cell[0]:.3f} <small>({cell[1]} runs)</small>"


def _models_html(history: list[dict[str, Any]], models: list[dict[str, Any]]) -> str:
    """The fine-tuning steps and the scaffold version × model version grid ('' without fine-tuning)."""
    if not models:
        return ""
    grid = version_grid(history, models)
    scaffolds = list(dict.fromkeys(s for s, _ in grid))
    names = list(dict.fromkeys(m for _, m in grid))
    head = "".join(f"<th>{html.escape(m)}</th>" for m in names)
    cells = "".join(
        f"<tr><td>{html.escape(s)}</td>"
        + "".join(f"<td>{_grid_cell(grid.get((s, m)))}</td>" for m in names)
        + "</tr>"
        for s in scaffolds
    )
    steps = "".join(
        f"<tr><td>{m['round']}</td><td>{html.escape(m['scaffold'])}</td><td>{html.escape(m['parent'])}</td>"
        f"<td>{html.escape(m.get('model', '—'))}</td><td>{m.get('trajectories', 0)}</td>"
        f"<td>{_fmt(m.get('reward_mean'))}</td><td>{'✔' if m.get('accepted') else '✘'}</td>"
        f"{_gate_cells(m.get('gate'))}<td>{html.escape(m.get('reason', ''))}</td></tr>"
        for m in models
    )
    return (
        "<h2>Scaffold version × model version</h2><p>Mean validation score of each pair a gate measured, "
        "over all the runs that measured it (each gate runs its own fresh seeds; — not measured).</p>"
        f"<table><tr><th>scaffold</th>{head}</tr>{cells}</table>"
        "<h2>Fine-tuning steps</h2><table><tr><th>after round</th><th>scaffold</th><th>model</th>"
        "<th>candidate</th><th>runs</th><th>reward mean</th><th>accepted</th><th>improvement</th>"
        f"<th>95% CI</th><th>n</th><th>gate</th></tr>{steps}</table>"
    )


def _fmt(x: float | None) -> str:
    return "—" if x is None else f"{x:.3f}"


def _gate_cells(gate: dict[str, Any] | None) -> str:
    if not gate:
        return "<td>—</td><td>—</td><td>—</td>"
    return (
        f"<td>{gate['improvement']:+.3f}</td><td>[{gate['low']:+.3f}, {gate['high']:+.3f}]</td>"
        f"<td>{gate['n']} ({gate['tasks']} tasks)</td>"
    )


def _errors_cell(errors: list[str]) -> str:
    if not errors:
        return "0"
    items = "".join(f"<li>{html.escape(e[:300])}</li>" for e in errors)
    return f"<details><summary>{len(errors)}</summary><ul>{items}</ul></details>"


def op_content(op: dict[str, Any]) -> str:
    """What an edit op changes, in one clipped line (the rationale says why)."""
    if op["op"] == "replace_text":
        return f"{op['field']}: {clip_middle(op['old'], 120)!r} -> {clip_middle(op['new'], 300)!r}"
    if op["op"] == "set_field":
        return f"{op['field']} = {clip_middle(str(op['value']), 300)}"
    if op["op"] == "add_example":
        steps = " ; ".join(str(x.get("command") or x.get("submit") or "") for x in op.get("steps", []))
        return f"{clip_middle(op['task'], 200)} => {clip_middle(steps, 300)}"
    keys = ("id", "name", "title", "text", "description", "content", "index")
    return " · ".join(clip_middle(str(op[k]), 300) for k in keys if op.get(k))


def _edit_html(h: dict[str, Any]) -> str:
    head = (
        f"<h3>{html.escape(str(h.get('ref', 'rejected candidate')))} (round {h.get('round')}, "
        f"{'accepted' if h.get('accepted') else 'rejected'})</h3>"
    )
    items = "".join(
        f"<li><b>{html.escape(op['op'])}</b> [{html.escape(component_of(op))}] "
        f"<code>{html.escape(op_content(op))}</code><br>{html.escape(op.get('rationale', ''))}"
        "<br><small>evidence: "
        f"{html.escape(', '.join(op.get('evidence', [])) or '—')}</small></li>"
        for op in h["ops"]
    )
    return f"{head}<ul>{items}</ul>"


def _test_html(test: dict[str, Any] | None) -> str:
    if not test:
        why = "the run stopped before its end, the domain has no test split, or --test-seeds 0"
        return f"<h2>Final test</h2><p>(not run: {why})</p>"
    rows = "".join(
        f"<tr><td>{name}</td><td>{html.escape(str(side['scaffold']))}</td>"
        f"<td>{html.escape(str(side['model'] or '—'))}</td><td>{side['mean']:.3f}</td>"
        f"<td>[{side['low']:.3f}, {side['high']:.3f}]</td><td>{side['n']}</td></tr>"
        for name, side in (("seed pair", test["seed"]), ("final pair", test["final"]))
    )
    d = test["difference"]
    return (
        f"<h2>Final test</h2><p>{test['tasks']} test tasks × {test['seeds']} seeds, never seen by the "
        "optimizer, the gate or the trainer; the same seeds for both pairs.</p><table><tr><th>pair</th>"
        f"<th>scaffold</th><th>model</th><th>pass@1</th><th>95% CI</th><th>n</th></tr>{rows}</table>"
        f"<p>Paired difference (final − seed): <b>{d['mean']:+.3f}</b>, 95% CI [{d['low']:+.3f}, "
        f"{d['high']:+.3f}], {d['better']} better, {d['worse']} worse of {d['n']}.</p>"
    )


def _reflections_html(proposals: list[dict[str, Any]]) -> str:
    """Every reflection with what it ended in, its errors and the meta-agent's messages: the answer to
    "why did the optimizer do nothing?"."""
    if not proposals:
        return ""
    items = []
    for p in proposals:
        ops = "".join(
            f"<li><code>{html.escape(op['op'])}: {html.escape(op_content(op))}</code></li>"
            for op in p.get("ops", [])
        )
        errors = "".join(f"<li>{html.escape(e)}</li>" for e in p.get("errors", []))
        messages = "".join(_message_html(m) for m in p.get("transcript", []))
        usage = p.get("usage") or {}
        items.append(
            f"<li>round {p.get('round', '?')} · task {html.escape(str(p.get('source')))} · "
            f"<b>{html.escape(p.get('status', '?'))}</b> ({html.escape(p.get('protocol') or '?')}, "
            f"{usage.get('input_tokens', 0)} in / {usage.get('output_tokens', 0)} out tokens) — "
            f"{html.escape(p.get('diagnosis', ''))}<ul>{ops}</ul>"
            + (f"<p>errors:</p><ul>{errors}</ul>" if errors else "")
            + (
                f"<details><summary>the meta-agent's messages</summary>{messages}</details>"
                if messages
                else ""
            )
            + "</li>"
        )
    return f"<h2>Reflections</h2><ol>{''.join(items)}</ol>"


def _message_html(m: dict[str, Any]) -> str:
    tokens = f" {m['tokens']}" if m.get("tokens") else ""
    calls = "\n".join(f"{c['name']} {c['args']}" for c in m.get("tool_calls", []))
    text = html.escape(m.get("content", "") + ("\n" + calls if calls else ""))
    role = html.escape(m["role"] + tokens)
    return f"<p><b>{role}</b><pre style='white-space:pre-wrap'>{text}</pre></p>"
