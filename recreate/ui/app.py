"""`recreate ui`: a read-only Starlette app over a RECREATE_HOME.

Every page is a Jinja2 template with autoescaping on for all of it: trajectories hold model output, which
is untrusted. The only markup not escaped by Jinja is the image tags of `recreate.ui.charts` (SVG as a
data: URI, which runs no script). The only routes are GETs; a Content-Security-Policy allows scripts
from this server only (no inline script), so even markup that slipped through could not run.

A request whose Host header is not this server's (the bound host, localhost, 127.0.0.1 or [::1], with its
port) gets 421: a web page that rebinds its own DNS name to 127.0.0.1 reaches the socket but not the data.
A request another site's page makes in the background (Fetch Metadata: `Sec-Fetch-Site` cross-site or
same-site, not a navigation) gets 403: nothing here changes state, but such a page could keep the
server busy with searches; following a link to it still works.
Error pages never show the home's absolute path. Everything shown is read from files that a hand edit or
an import may have given any shape: such a file is an error for its own page (a 500 naming the page and
the problem), and a list shows such a run as one "unreadable" row; every other page still shows."""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Iterable
from pathlib import Path
from typing import Any

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import HTMLResponse, PlainTextResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles
from starlette.types import ASGIApp, Receive, Scope, Send

from recreate.ui.pages import Pages
from recreate.ui.render import STATIC, environment
from recreate.ui.tokens import PROBABILITY_FLOORS, token_heat

HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; style-src 'self'; "
    "img-src 'self' data:; object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
}
LOOPBACK = ("localhost", "127.0.0.1", "[::1]")
MAX_REASON_CHARS = 500
log = logging.getLogger(__name__)
_LOOPBACK_HOST = re.compile(r"(localhost|127\.0\.0\.1|\[::1\])(:\d{1,5})?")


def allowed_hosts(host: str, port: int, extra: Iterable[str] = ()) -> frozenset[str]:
    """The Host headers this server answers: the bound host and the loopback names, with the port (and
    without it on port 80, as browsers send it)."""
    bound = f"[{host}]" if ":" in host and not host.startswith("[") else host
    names = {bound.lower(), *LOOPBACK, *(name.lower() for name in extra)}
    return frozenset({f"{name}:{port}" for name in names} | (names if port == 80 else set()))


class HostCheck:
    """Refuse a request whose Host header is not one of `hosts` (421; None: any loopback name, any
    port), and one another site's page made in the background (403)."""

    def __init__(self, app: ASGIApp, hosts: frozenset[str] | None) -> None:
        self.app, self.hosts = app, hosts

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        reply = self._refusal(scope) if scope["type"] in ("http", "websocket") else None
        if reply is not None:
            await reply(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _refusal(self, scope: Scope) -> PlainTextResponse | None:
        if not self._allowed(_header(scope, b"host")):
            return PlainTextResponse("misdirected request: unknown Host header", status_code=421)
        site, mode = _header(scope, b"sec-fetch-site"), _header(scope, b"sec-fetch-mode")
        if site in ("cross-site", "same-site") and mode != "navigate":
            return PlainTextResponse("forbidden: a request another site's page made", status_code=403)
        return None

    def _allowed(self, host: str) -> bool:
        return host in self.hosts if self.hosts is not None else bool(_LOOPBACK_HOST.fullmatch(host))


def _header(scope: Scope, name: bytes) -> str:
    """The header's value, lower case; "" when it is missing or sent more than once."""
    values = [v for k, v in scope.get("headers", []) if k == name]
    return values[0].decode("latin-1").strip().lower() if len(values) == 1 else ""


def create_app(
    home: str | Path,
    *,
    embedding: str = "hash",
    chroma_url: str | None = None,
    hosts: frozenset[str] | None = None,
) -> Starlette:
    """The app over `home`; `embedding`/`chroma_url` must be those the home's store was built with
    (the settings' values), for the experience search. `hosts`: the Host headers it answers
    (`allowed_hosts`); None: loopback names on any port."""
    pages = Pages(Path(home), embedding=embedding, chroma_url=chroma_url)
    shown_home = {str(pages.home), str(pages.home.absolute()), str(pages.home.resolve())}
    env = environment()
    env.globals |= {
        "split_of": pages.split_of,
        "run_href": pages.run_href,
        "token_heat": token_heat,
        "tokenizer_for": pages.tokenizers.for_trajectory,
        "floors": PROBABILITY_FLOORS,
    }

    def page(template: str, handler: Any) -> Any:
        async def endpoint(request: Request) -> Response:
            try:
                context = await run_in_threadpool(handler, request)
                html = env.get_template(template).render(request=request, home=pages.home, **context)
            except HTTPException:
                raise
            except Exception as exc:  # a file of the home that is not what it should be: this page says so
                raise _unshowable(request, exc) from exc
            return HTMLResponse(html, headers=HEADERS)

        return endpoint

    async def not_found(request: Request, exc: Exception) -> Response:
        status = exc.status_code if isinstance(exc, HTTPException) else 500
        detail = str(exc.detail) if isinstance(exc, HTTPException) else "internal error"
        for path in sorted(shown_home, key=len, reverse=True):  # longest first: no half-replaced path
            detail = detail.replace(path, "<home>")
        html = env.get_template("error.html").render(
            request=request, status=status, detail=detail, home="<home>"
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

    app = Starlette(
        routes=routes, exception_handlers={HTTPException: not_found, Exception: not_found}, lifespan=lifespan
    )
    app.add_middleware(HostCheck, hosts=hosts)
    return app


def _unshowable(request: Request, exc: Exception) -> HTTPException:
    """A 500 that names the page and what went wrong (one item of the home that does not read; every
    other page still shows), logged with its traceback."""
    log.warning("%s could not be shown", request.url.path, exc_info=exc)
    reason = f"{type(exc).__name__}: {exc}"[:MAX_REASON_CHARS]
    return HTTPException(500, f"{request.url.path} could not be shown: {reason}")


def serve(
    home: str | Path,
    *,
    host: str = "127.0.0.1",
    port: int = 8765,
    allow_hosts: Iterable[str] = (),
    **options: Any,
) -> None:
    import uvicorn

    app = create_app(home, hosts=allowed_hosts(host, port, allow_hosts), **options)
    uvicorn.run(app, host=host, port=port, log_level="warning")
