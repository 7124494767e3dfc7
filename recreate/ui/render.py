"""The templates' environment, for the app and for the static export of a run page (report.html).

Autoescaping is on for everything: trajectories hold model output, which is untrusted. A static page
has no server behind it: `link` writes plain text instead of a link, the stylesheet is inlined and no
script is loaded."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from markupsafe import Markup, escape

from recreate.ui.edits import component_of, op_content

STATIC = Path(__file__).with_name("static")


def environment(*, static: bool = False) -> Environment:
    env = Environment(
        loader=PackageLoader("recreate.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["q"] = lambda value: quote(str(value), safe="@")
    env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"
    env.filters["num"] = lambda v, digits=3: "-" if v is None else f"{v:.{digits}f}"
    env.filters["signed"] = lambda v: "-" if v is None else f"{v:+.3f}"
    env.globals |= {"urlencode": urlencode, "op_content": op_content, "component_of": component_of}
    env.globals["static"] = static
    env.globals["link"] = _text if static else _link
    env.globals["css"] = Markup((STATIC / "style.css").read_text(encoding="utf-8")) if static else ""
    return env


def _link(href: str, text: Any, cls: str = "") -> Markup:
    attr = Markup(' class="{}"').format(cls) if cls else ""
    return Markup('<a href="{}"{}>{}</a>').format(href, attr, text)


def _text(href: str, text: Any, cls: str = "") -> Markup:
    return escape(text)


def render_run(view: Any, **context: Any) -> str:
    """The run page of `view` (a `RunView`) as one self-contained HTML file."""
    return environment(static=True).get_template("run.html").render(view=view, run=view.run, **context)
