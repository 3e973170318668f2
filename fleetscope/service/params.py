"""The shapes the query and path parameters must have; FastAPI checks them before a handler runs."""

from __future__ import annotations

import re
from datetime import UTC, datetime
from typing import Annotated

from pydantic import BeforeValidator

NODE_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,252}$"
JOB_PATTERN = r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,127}$"
KIND_PATTERN = r"^[a-z][a-z0-9_]{0,63}$"

_RFC3339 = re.compile(r"^\d{4}-\d{2}-\d{2}[Tt ]\d{2}:\d{2}(:\d{2}(\.\d{1,9})?)?([Zz]|[+-]\d{2}:\d{2})?$")


def _rfc3339_only(value: object) -> object:
    """Pydantic would also take Unix seconds for a datetime; the schema says RFC 3339, so hold to it."""
    if not isinstance(value, str) or not _RFC3339.match(value):
        raise ValueError("expected an RFC 3339 time such as 2026-11-30T10:00:00Z")
    return value


RFC3339Time = Annotated[datetime, BeforeValidator(_rfc3339_only)]


def since_seconds(since: datetime | None) -> float | None:
    """Unix seconds of a parsed ``since`` (a time without a zone is UTC)."""
    if since is None:
        return None
    if since.tzinfo is None:
        since = since.replace(tzinfo=UTC)
    return since.timestamp()
