"""Liveness and readiness probes."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response

from fleetscope.service import schemas
from fleetscope.service.views import Live, json_response

router = APIRouter()


@router.get("/healthz", response_model=schemas.Health, tags=["health"])
async def healthz() -> Response:
    """Liveness: the process answers. Open even when a token is configured."""
    return json_response({"status": "ok"})


@router.get(
    "/readyz",
    response_model=schemas.Freshness,
    responses={503: {"model": schemas.Freshness, "description": "not ready"}},
    tags=["health"],
)
async def readyz(request: Request) -> Response:
    """Ready after the first successful analysis, and not while the verdicts are stale."""
    live: Live = request.app.state.live
    snap = live.store.snapshot()
    return json_response(snap.status(), status=200 if snap.ready else 503)
