"""Times and durations: the one set of rules for every command line, file and API of fleetscope.

* Written times are RFC 3339 in UTC with whole seconds: ``2026-11-30T10:42:15Z`` (:func:`rfc3339`).
* Read times (:func:`parse_rfc3339`) are RFC 3339 *with* a zone (``Z`` or an offset such as
  ``+02:00``), optional fractional seconds, ``T`` or a space between date and time. A time without a
  zone is refused: guessing the machine's local zone silently shifts every finding by hours.
* Command-line times (:func:`parse_time`) are those, Unix seconds, ``now``, or relative to now:
  ``-6h``, ``now-90m``, ``-1h30m``.
* Durations (:func:`parse_duration`) are Prometheus durations (``90s``, ``5m``, ``1h30m``, ``2d``,
  ``1w``, ``500ms``: whole numbers, units from largest to smallest, each at most once) or plain
  seconds (``600``, ``1.5``).

Bad input raises :class:`fleetscope.errors.FleetscopeError` with one line naming the accepted forms.
Standard library only: the node agent and the training library may import it.
"""

from __future__ import annotations

import math
import re
import time
from datetime import UTC, datetime, timedelta, timezone
from typing import overload

from fleetscope.errors import FleetscopeError

#: Seconds per Prometheus duration unit, largest first (the order a duration must use them in).
DURATION_UNITS: dict[str, float] = {
    "y": 365 * 86400.0,
    "w": 7 * 86400.0,
    "d": 86400.0,
    "h": 3600.0,
    "m": 60.0,
    "s": 1.0,
    "ms": 0.001,
}

DURATION_FORMS = "a Prometheus duration like 90s, 5m, 1h30m or 2d, or plain seconds like 600 or 1.5"
RFC3339_FORMS = "RFC 3339 with a zone, like 2026-11-30T10:00:00Z or 2026-11-30T12:00:00+02:00"
TIME_FORMS = f"{RFC3339_FORMS}; Unix seconds; now; or relative like -6h or now-90m"

_SECONDS = re.compile(r"\d+(?:\.\d*)?|\.\d+")
# Prometheus' duration grammar: each unit at most once, largest first ("ms" before "m" and "s").
_PROM_DURATION = re.compile("".join(f"(?:(?P<{u}>\\d+){u})?" for u in DURATION_UNITS))
_RFC3339 = re.compile(
    r"(?P<date>\d{4}-\d{2}-\d{2})[Tt ](?P<h>\d{2}):(?P<mi>\d{2}):(?P<s>\d{2})(?P<frac>\.\d+)?"
    r"(?P<zone>[Zz]|[+-]\d{2}:\d{2})?"
)


@overload
def rfc3339(ts: None) -> None: ...
@overload
def rfc3339(ts: float | datetime) -> str: ...
def rfc3339(ts: float | datetime | None) -> str | None:
    """Unix seconds or a datetime -> ``2026-11-30T10:42:15Z`` (UTC, whole seconds, truncated).

    None stays None (an open end). A datetime without a zone is refused like a string without one.
    """
    if ts is None:
        return None
    if isinstance(ts, datetime):
        if ts.tzinfo is None:
            raise FleetscopeError(f"time {ts.isoformat()!r} has no time zone: give the datetime a tzinfo")
        dt = ts
    else:
        dt = datetime.fromtimestamp(float(ts), tz=UTC)
    return dt.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _no_zone(text: str) -> FleetscopeError:
    return FleetscopeError(
        f'time {text!r} has no time zone: add "Z" for UTC or an offset like +02:00 (e.g. {text}Z)'
    )


@overload
def parse_rfc3339(text: None) -> None: ...
@overload
def parse_rfc3339(text: str) -> float: ...
def parse_rfc3339(text: str | None) -> float | None:
    """An RFC 3339 time with a zone -> Unix seconds (fractions kept). None stays None."""
    if text is None:
        return None
    t = str(text).strip()
    m = _RFC3339.fullmatch(t)
    if m is None:
        raise FleetscopeError(f"not a time: {text!r} (use {RFC3339_FORMS})")
    if m["zone"] is None:
        raise _no_zone(t)
    if m["zone"] in "Zz":
        tz = UTC
    else:
        sign = -1 if m["zone"][0] == "-" else 1
        hours, minutes = int(m["zone"][1:3]), int(m["zone"][4:6])
        if hours > 23 or minutes > 59:
            raise FleetscopeError(f"not a time: {text!r} (the zone offset {m['zone']} is out of range)")
        tz = timezone(sign * timedelta(hours=hours, minutes=minutes))
    second = int(m["s"])
    leap = second == 60  # RFC 3339 allows a leap second; POSIX time folds it into the next one
    try:
        y, mo, d = (int(p) for p in m["date"].split("-"))
        dt = datetime(y, mo, d, int(m["h"]), int(m["mi"]), 59 if leap else second, tzinfo=tz)
    except ValueError as exc:
        raise FleetscopeError(f"not a time: {text!r} ({exc})") from None
    return dt.timestamp() + (1.0 if leap else 0.0) + (float(m["frac"]) if m["frac"] else 0.0)


def parse_duration(text: str | float) -> float:
    """A Prometheus duration or plain seconds -> seconds (>= 0). A number passes through."""
    if isinstance(text, int | float) and not isinstance(text, bool):
        if not text >= 0 or text == float("inf"):
            raise FleetscopeError(f"not a duration: {text!r} (use {DURATION_FORMS})")
        return float(text)
    t = str(text).strip()
    if _SECONDS.fullmatch(t):
        return float(t)
    m = _PROM_DURATION.fullmatch(t)
    if not t or m is None:
        raise FleetscopeError(f"not a duration: {text!r} (use {DURATION_FORMS})")
    return sum(int(v) * DURATION_UNITS[u] for u, v in m.groupdict().items() if v is not None)


def parse_time(text: str | float, now: float | None = None) -> float:
    """A command-line time -> Unix seconds.

    Accepts RFC 3339 with a zone, Unix seconds (a number or a numeric string), ``now``, and a time
    relative to ``now`` (default: the current time): ``-`` or ``now-`` and a duration, such as
    ``-6h``, ``now-90m``, ``-1h30m`` or ``-600`` (600 seconds ago, not a time before 1970).
    """
    if isinstance(text, int | float) and not isinstance(text, bool):
        return float(text)
    t = str(text).strip()
    current = time.time() if now is None else float(now)
    if t == "now":
        return current
    rel = t[3:].lstrip() if t.startswith("now") else t
    if rel.startswith("-"):
        try:
            return current - parse_duration(rel[1:].strip())
        except FleetscopeError:
            raise FleetscopeError(f"not a time: {text!r} (use {TIME_FORMS})") from None
    if _SECONDS.fullmatch(t):
        return float(t)
    m = _RFC3339.fullmatch(t)
    if m is not None and m["zone"] is None:
        raise _no_zone(t)
    if m is None:
        raise FleetscopeError(f"not a time: {text!r} (use {TIME_FORMS})")
    return parse_rfc3339(t)


def human_duration(seconds: float | None) -> str:
    """``0.45 s``, ``45 s``, ``6.3 min``, ``6.1 h``, ``2.5 days``: a duration a person reads at once
    ("" for None or a non-finite number)."""
    if seconds is None or not math.isfinite(seconds):
        return ""
    s = float(seconds)
    if s < 10:
        return f"{s:.2f} s"
    if s < 120:
        return f"{s:.0f} s"
    if s < 7200:
        return f"{s / 60:.1f} min"
    if s < 172800:
        return f"{s / 3600:.1f} h"
    return f"{s / 86400:.1f} days"
