"""``/metrics``: the verdicts as Prometheus series, for Prometheus to scrape back."""

from __future__ import annotations

from fastapi import APIRouter, Request
from fastapi.responses import Response
from prometheus_client import CONTENT_TYPE_LATEST

from fleetscope.service.views import Live

router = APIRouter()


@router.get(
    "/metrics",
    tags=["metrics"],
    response_class=Response,
    responses={200: {"content": {"text/plain": {}}}},
)
async def metrics(request: Request) -> Response:
    """The verdict series of the contract, in the Prometheus text format (rendered once per state)."""
    live: Live = request.app.state.live
    return Response(live.metrics(), media_type=CONTENT_TYPE_LATEST)
