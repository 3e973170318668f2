"""The shapes the query and path parameters must have; FastAPI checks them before a handler runs."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Annotated

from pydantic import BeforeValidator

from fleetscope.errors import FleetscopeError
from fleetscope.times import parse_rfc3339

NODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$"
#: A job id as the exporter serves it (fleetscope.labels: any label value, cut to 256 characters):
#: ``team/llama 7b`` included, control characters not. In a path, ``/`` may be sent as is or as %2F.
JOB_PATTERN = r"^[^\x00-\x1f\x7f]{1,256}$"
KIND_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"


def _rfc3339_only(value: object) -> datetime:
    """fleetscope's one rule for read times (:func:`fleetscope.times.parse_rfc3339`): RFC 3339 with a
    zone. Pydantic alone would also take Unix seconds, and a time without a zone."""
    if not isinstance(value, str):
        raise ValueError("expected an RFC 3339 time such as 2026-11-30T10:00:00Z")
    try:
        return datetime.fromtimestamp(parse_rfc3339(value), tz=UTC)
    except FleetscopeError as exc:
        raise ValueError(str(exc)) from None


RFC3339Time = Annotated[datetime, BeforeValidator(_rfc3339_only)]


def since_seconds(since: datetime | None) -> float | None:
    """Unix seconds of a parsed ``since`` (it has a zone: :data:`RFC3339Time` refuses one without)."""
    return None if since is None else since.timestamp()
