"""The web page: ``/`` and its script and style sheet, served from memory.

The page's three files and the runbooks (docs/runbooks.md, rendered by ``fleetscope generate``:
fleetscope/runbooks.py) are read from the package once, when the app is made (:func:`load_static`), and
served by fixed routes, so no input ever reaches a file name.
"""

from __future__ import annotations

from importlib import resources
from typing import Annotated

from fastapi import APIRouter, Query, Request
from fastapi.responses import Response

from fleetscope.service.params import JOB_PATTERN

STATIC = {
    "index.html": "text/html; charset=utf-8",
    "app.js": "text/javascript; charset=utf-8",
    "style.css": "text/css; charset=utf-8",
    "runbooks.html": "text/html; charset=utf-8",
}

router = APIRouter()


def load_static() -> dict[str, bytes]:
    base = resources.files("fleetscope.service") / "static"
    return {name: (base / name).read_bytes() for name in STATIC}


def _static(request: Request, name: str) -> Response:
    return Response(request.app.state.static[name], media_type=STATIC[name])


# Handlers are ``async``: they only read memory, and a sync handler would cost a thread hop.
@router.get("/", include_in_schema=False)
async def index(request: Request, job: Annotated[str | None, Query(pattern=JOB_PATTERN)] = None) -> Response:
    """The page; ``?job=`` (read by the page's script) chooses the job of the straggler chart."""
    return _static(request, "index.html")


@router.get("/static/app.js", include_in_schema=False)
async def app_js(request: Request) -> Response:
    return _static(request, "app.js")


@router.get("/static/style.css", include_in_schema=False)
async def style_css(request: Request) -> Response:
    return _static(request, "style.css")


#: Where the service serves the runbooks (the page's finding links and /api/v1/status say it).
RUNBOOKS_PATH = "/runbooks"


@router.get(RUNBOOKS_PATH, include_in_schema=False)
async def runbooks(request: Request) -> Response:
    """docs/runbooks.md, served by the service itself (no outside address: clusters are often
    air-gapped); every alert's ``runbook_url`` and the page's finding links point at its anchors."""
    return _static(request, "runbooks.html")
