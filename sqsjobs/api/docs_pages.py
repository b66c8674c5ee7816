"""The API's own documentation: ``/openapi.json``, Swagger UI at ``/docs`` and ReDoc at ``/redoc``.

FastAPI's built-in pages load Swagger UI and ReDoc from a public CDN and start them with an inline
script: the docs then break offline and in locked-down networks, a CDN compromise runs script with
the operator's session, and no Content-Security-Policy without ``'unsafe-inline'`` can allow them.
Here both are served from the package (``static/swagger-ui``, ``static/redoc``: the upstream
bundles, swagger-ui-dist 5.35.0 and redoc 2.5.4, with their licences; ReDoc's one outside image is
taken out, ``static/redoc/PATCHES.md``) and started by a script file
of ours, so the pages run under a policy that allows script from this server only. Styles stay
loosened (``'unsafe-inline'``): both inject ``<style>`` elements at run time. Everything here sits
behind the same guard as the rest of the API.
"""

from __future__ import annotations

from importlib import resources
from typing import TYPE_CHECKING, Any

from fastapi import APIRouter, HTTPException
from fastapi.responses import HTMLResponse, JSONResponse, Response

if TYPE_CHECKING:
    from fastapi import FastAPI

#: The policy of the two docs pages: as every page's, but inline styles and data: images allowed.
DOCS_POLICY = (
    "default-src 'none'; script-src 'self'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; "
    "font-src 'self' data:; connect-src 'self'; worker-src 'self' blob:; form-action 'self'; "
    "frame-ancestors 'none'; base-uri 'none'"
)
#: The files served under ``/docs/static/``, with their media types.
ASSETS = {
    "swagger-ui/swagger-ui-bundle.js": "text/javascript; charset=utf-8",
    "swagger-ui/swagger-ui.css": "text/css; charset=utf-8",
    "redoc/redoc.standalone.js": "text/javascript; charset=utf-8",
    "docs.js": "text/javascript; charset=utf-8",
}
_PAGE = """<!doctype html><html lang=en><head><meta charset=utf-8>
<meta name=viewport content="width=device-width, initial-scale=1"><title>{title}</title>{head}</head>
<body data-openapi="/openapi.json" data-viewer="{viewer}"><div id="{viewer}"></div>
{scripts}</body></html>"""


def _page(title: str, viewer: str, head: str, scripts: list[str]) -> HTMLResponse:
    tags = "".join(f'<script src="/docs/static/{s}"></script>' for s in scripts)
    body = _PAGE.format(title=title, viewer=viewer, head=head, scripts=tags)
    return HTMLResponse(body, headers={"Content-Security-Policy": DOCS_POLICY, "Cache-Control": "no-store"})


def docs_router(api: FastAPI, guard: list[Any]) -> APIRouter:
    """The document and the two pages of ``api``, behind ``guard``."""
    router = APIRouter(include_in_schema=False, dependencies=guard)
    title = f"{api.title} docs"

    @router.get("/openapi.json")
    async def openapi() -> JSONResponse:
        return JSONResponse(api.openapi())

    @router.get("/docs")
    async def swagger() -> HTMLResponse:
        css = '<link rel="stylesheet" href="/docs/static/swagger-ui/swagger-ui.css">'
        return _page(title, "swagger-ui", css, ["swagger-ui/swagger-ui-bundle.js", "docs.js"])

    @router.get("/redoc")
    async def redoc() -> HTMLResponse:
        return _page(title, "redoc", "", ["redoc/redoc.standalone.js", "docs.js"])

    @router.get("/docs/static/{name:path}")
    async def asset(name: str) -> Response:
        media_type = ASSETS.get(name)
        if media_type is None:
            raise HTTPException(404, f"no docs asset {name!r}")
        data = resources.files("sqsjobs.api").joinpath("static", *name.split("/")).read_bytes()
        # Immutable for a day: the file changes only with the package.
        return Response(data, media_type=media_type, headers={"Cache-Control": "public, max-age=86400"})

    return router
