"""`recreate ui`: a read-only Starlette app over a RECREATE_HOME.

Every page is a Jinja2 template with autoescaping on for all of it: trajectories hold model output, which
is untrusted. The only markup not escaped by Jinja is the SVG of `recreate.ui.charts` (numbers and
escaped labels). The only routes are GETs; a Content-Security-Policy allows scripts from this server
only (no inline script), so even markup that slipped through could not run."""

from __future__ import annotations

import contextlib
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, urlencode

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from recreate.ui.pages import Pages

HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
STATIC = Path(__file__).with_name("static")


def _environment() -> Environment:
    env = Environment(
        loader=PackageLoader("recreate.ui", "templates"),
        autoescape=select_autoescape(default=True, default_for_string=True),
    )
    env.filters["q"] = lambda value: quote(str(value), safe="@")
    env.filters["when"] = lambda t: time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(t)) if t else "-"
    env.filters["num"] = lambda v, digits=3: "-" if v is None else f"{v:.{digits}f}"
    env.globals["urlencode"] = urlencode
    return env


def create_app(home: str | Path, *, embedding: str = "hash", chroma_url: str | None = None) -> Starlette:
    """The app over `home`; `embedding`/`chroma_url` must be those the home's store was built with
    (the settings' values), for the experience search."""
    pages = Pages(Path(home), embedding=embedding, chroma_url=chroma_url)
    env = _environment()

    def page(template: str, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            context = await run_in_threadpool(handler, request)
            html = env.get_template(template).render(request=request, home=pages.home, **context)
            return HTMLResponse(html, headers=HEADERS)

        return endpoint

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = exc.detail if isinstance(exc, HTTPException) else "internal error"
        html = env.get_template("error.html").render(
            request=request, status=status, detail=detail, home=pages.home
        )
        return HTMLResponse(html, status_code=status, headers=HEADERS)

    routes = [
        Route("/", page("runs.html", pages.runs)),
        Route("/runs-table", page("_runs_table.html", pages.runs)),
        Route("/runs/{run_id}", page("run.html", pages.run)),
        Route("/evals/{run_id}", page("eval.html", pages.eval_run)),
        Route("/versions/{ref}", page("version.html", pages.version)),
        Route("/trajectories/{trajectory_id}", page("trajectory.html", pages.trajectory)),
        Route("/compare", page("compare.html", pages.compare)),
        Route("/experience", page("experience.html", pages.experience)),
        Route("/training", page("training.html", pages.training)),
        Route("/training/{path:path}", page("training_run.html", pages.training_run)),
        Mount("/static", StaticFiles(directory=STATIC), name="static"),
    ]

    @contextlib.asynccontextmanager
    async def lifespan(app: Starlette) -> AsyncIterator[None]:
        yield
        pages.trajectories.close()

    return Starlette(
        routes=routes, exception_handlers={HTTPException: not_found, Exception: not_found}, lifespan=lifespan
    )


def serve(home: str | Path, *, host: str = "127.0.0.1", port: int = 8765, **options: Any) -> None:
    import uvicorn

    uvicorn.run(create_app(home, **options), host=host, port=port, log_level="warning")
