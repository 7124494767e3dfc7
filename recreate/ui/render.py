"""The templates' environment, for the app and for the static export of a run page (report.html).

Autoescaping is on for everything: trajectories hold model output, which is untrusted. A static page
has no server behind it: `link` writes plain text instead of a link, the stylesheet is inlined and no
script is loaded; its own Content-Security-Policy (a meta tag: a file opened from disk has no headers)
allows no script at all, so even markup that slipped through could not run."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from recreate.evaluation.stats import ALPHA, interval_label
from recreate.text import clip_middle
from recreate.ui.edits import component_of, op_content

STATIC = Path(__file__).with_name("static")


def environment(*, static: bool = False) -> Environment:
    env = Environment(
        loader=PackageLoader("recreate.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["q"] = lambda value: quote(str(value), safe="@")
    env.filters["qpath"] = lambda value: quote(str(value), safe="@/")  # a path of segments: runs/x/train
    env.filters["when"] = _when
    env.filters["num"] = lambda v, digits=3: _number(v, f".{digits}f")
    env.filters["signed"] = lambda v: _number(v, "+.3f")
    env.filters["level"] = _interval_level
    env.filters["clip"] = lambda text: clip_middle(str(text), CLIP_CHARS)  # the file keeps it all
    env.globals |= {"urlencode": urlencode, "op_content": op_content, "component_of": component_of}
    env.globals["static"] = static
    env.globals["link"] = _text if static else _link
    env.globals["css"] = Markup((STATIC / "style.css").read_text(encoding="utf-8")) if static else ""
    return env


CLIP_CHARS = 20_000  # of one text on a page: an imported trajectory's 5 MB message would stall the browser


def _interval_level(gate: Any) -> str:
    """A gate's interval by its level ('95% CI'); a gate stored before levels were kept: the default."""
    alpha = gate.get("alpha") if isinstance(gate, dict) else None
    valid = isinstance(alpha, int | float) and not isinstance(alpha, bool) and 0 < alpha < 0.5
    return interval_label(alpha if valid else ALPHA)


def _when(t: float | None) -> str:
    """A local time; "-" for none and for one no calendar reaches (a file's mtime can be anything)."""
    try:
        return time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"
    except (OverflowError, OSError, ValueError):
        return "-"


def _number(value: Any, spec: str) -> str:
    """A number as `spec` formats it; "-" for None and the text of anything else (a hand-edited file
    may hold a string where a score should be: the page shows it rather than failing)."""
    if value is None:
        return "-"
    if isinstance(value, int | float) and not isinstance(value, bool):
        return format(value, spec)
    return str(value)


def _link(href: str, text: Any, cls: str = "") -> Markup:
    attr = Markup(' class="{}"').format(cls) if cls else ""
    return Markup('<a href="{}"{}>{}</a>').format(href, attr, text)


def _text(href: str, text: Any, cls: str = "") -> Markup:
    return escape(text)


def render_run(view: Any, **context: Any) -> str:
    """The run page of `view` (a `RunView`) as one self-contained HTML file."""
    return environment(static=True).get_template("run.html").render(view=view, run=view.run, **context)
