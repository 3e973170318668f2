"""The FastAPI app of the live service: JSON API, web page, ``/metrics``, health and readiness.

``create_app(settings, analyze=...)`` takes the analysis as a function ``analyze(start, end) ->
Report`` so tests (and the demo) can drive it with real :class:`~fleetscope.analyzers.report.Report`
objects and no Prometheus. The API is read-only (GET only); every input is validated by FastAPI
before a handler sees it, and no input reaches a file name or a shell: the page's three files are
read once at start from the package and served from memory by fixed routes.

This module only wires the parts together: the handlers are in :mod:`.routes_page`,
:mod:`.routes_health`, :mod:`.routes_api` and :mod:`.routes_metrics`, what they serve in
:mod:`.views`, and what wraps every request in :mod:`.middleware`.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from fastapi import Depends, FastAPI

from fleetscope import __version__
from fleetscope.service import routes_api, routes_health, routes_metrics, routes_page
from fleetscope.service.middleware import add_middleware, reject_unknown_query
from fleetscope.service.runner import AnalysisRunner, AnalyzeFn
from fleetscope.service.settings import ServiceSettings
from fleetscope.service.state import VerdictStore
from fleetscope.service.views import Live

__all__ = ["ServiceSettings", "create_app"]


@asynccontextmanager
async def _lifespan(app: FastAPI) -> AsyncIterator[None]:
    runner: AnalysisRunner = app.state.runner
    if app.state.settings.run_analysis:
        runner.start()
    try:
        yield
    finally:
        runner.stop()


def create_app(settings: ServiceSettings, analyze: AnalyzeFn, store: VerdictStore | None = None) -> FastAPI:
    store = store or VerdictStore(settings.staleness_limit)
    app = FastAPI(
        title="fleetscope",
        version=__version__,
        description="Live verdicts of the fleetscope analyzers (read-only).",
        docs_url=None,  # Swagger UI loads from a CDN; the service must work offline.
        redoc_url=None,
        lifespan=_lifespan,
        dependencies=[Depends(reject_unknown_query)],
    )
    app.state.store = store
    app.state.runner = AnalysisRunner(store, analyze, settings.interval, settings.window)
    app.state.settings = settings
    app.state.live = Live(store, settings)
    app.state.static = routes_page.load_static()
    # This order is the order of the paths in the OpenAPI document.
    for module in (routes_page, routes_health, routes_api, routes_metrics):
        app.include_router(module.router)
    add_middleware(app, settings.token)
    return app
