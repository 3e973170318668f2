"""fleetscope.times: the one set of rules for times and durations, and its error messages."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta, timezone

import pytest

from fleetscope.errors import FleetscopeError
from fleetscope.times import parse_duration, parse_rfc3339, parse_time, rfc3339

T = 1796035335.0  # 2026-11-30T10:42:15Z
NOW = 1_800_000_000.0


def _error(fn, *args) -> str:
    with pytest.raises(FleetscopeError) as exc:
        fn(*args)
    msg = str(exc.value)
    assert "\n" not in msg
    return msg


def test_rfc3339_writes_utc_whole_seconds() -> None:
    assert rfc3339(T) == "2026-11-30T10:42:15Z"
    assert rfc3339(T + 0.9) == "2026-11-30T10:42:15Z"
    assert rfc3339(int(T)) == "2026-11-30T10:42:15Z"
    assert rfc3339(datetime(2026, 11, 30, 12, 42, 15, tzinfo=timezone(timedelta(hours=2)))) == (
        "2026-11-30T10:42:15Z"
    )
    assert rfc3339(datetime(2026, 11, 30, 10, 42, 15, tzinfo=UTC)) == "2026-11-30T10:42:15Z"
    assert rfc3339(None) is None


def test_rfc3339_refuses_a_datetime_without_zone() -> None:
    assert "no time zone" in _error(rfc3339, datetime(2026, 11, 30, 10, 42, 15))


def test_parse_rfc3339_forms() -> None:
    assert parse_rfc3339("2026-11-30T10:42:15Z") == T
    assert parse_rfc3339("2026-11-30t10:42:15z") == T
    assert parse_rfc3339("2026-11-30 10:42:15Z") == T
    assert parse_rfc3339("2026-11-30T12:42:15+02:00") == T
    assert parse_rfc3339("2026-11-30T05:12:15-05:30") == T
    assert parse_rfc3339("2026-11-30T10:42:15.25Z") == T + 0.25
    # Prometheus writes nanoseconds; more digits than datetime keeps must not be refused.
    assert parse_rfc3339("2026-11-30T10:42:15.123456789Z") == pytest.approx(T + 0.123456789)
    assert parse_rfc3339("  2026-11-30T10:42:15Z ") == T
    assert parse_rfc3339(None) is None
    assert parse_rfc3339(rfc3339(T)) == T


def test_parse_rfc3339_leap_second_is_the_next_second() -> None:
    assert parse_rfc3339("2016-12-31T23:59:60Z") == parse_rfc3339("2017-01-01T00:00:00Z")


def test_a_time_without_zone_is_refused_with_one_clear_message() -> None:
    for fn in (parse_rfc3339, parse_time):
        msg = _error(fn, "2026-11-30T10:00:00")
        assert msg == (
            "time '2026-11-30T10:00:00' has no time zone: add \"Z\" for UTC or an offset like +02:00 "
            "(e.g. 2026-11-30T10:00:00Z)"
        )


def test_parse_rfc3339_garbage_and_out_of_range() -> None:
    for bad in ("yesterday", "2026-11-30", "2026-11-30T10:00Z", "1796035335", "", "20261130T104215Z"):
        msg = _error(parse_rfc3339, bad)
        assert msg.startswith(f"not a time: {bad!r}") and "2026-11-30T10:00:00Z" in msg and "+02:00" in msg
    assert "month must be in 1..12" in _error(parse_rfc3339, "2026-13-01T00:00:00Z")
    assert "day is out of range" in _error(parse_rfc3339, "2026-02-30T00:00:00Z")
    assert "hour must be in 0..23" in _error(parse_rfc3339, "2026-11-30T24:00:00Z")
    assert "zone offset +24:00 is out of range" in _error(parse_rfc3339, "2026-11-30T10:00:00+24:00")


def test_parse_time_absolute() -> None:
    assert parse_time("2026-11-30T10:42:15Z", now=NOW) == T
    assert parse_time("2026-11-30T11:42:15+01:00") == T
    assert parse_time("1796035335") == T
    assert parse_time("1796035335.5") == T + 0.5
    assert parse_time(T) == T
    assert parse_time(int(T)) == T


def test_parse_time_now_and_relative() -> None:
    assert parse_time("now", now=NOW) == NOW
    assert parse_time(" now ", now=NOW) == NOW
    assert parse_time("-6h", now=NOW) == NOW - 6 * 3600
    assert parse_time("now-90m", now=NOW) == NOW - 90 * 60
    assert parse_time("now - 90m", now=NOW) == NOW - 90 * 60
    assert parse_time("-1h30m", now=NOW) == NOW - 5400
    assert parse_time("-2d", now=NOW) == NOW - 2 * 86400
    assert parse_time("-600", now=NOW) == NOW - 600
    assert parse_time("now-1.5", now=NOW) == NOW - 1.5
    # Without ``now`` given, relative times count from the current clock.
    assert abs(parse_time("-1h") - (datetime.now(UTC).timestamp() - 3600)) < 60


def test_parse_time_garbage_names_every_accepted_form() -> None:
    for bad in ("yesterday", "", "now+5m", "-", "now-", "-1.5h", "-6 hours", "1.7e9", "nan"):
        msg = _error(parse_time, bad, NOW)
        assert msg == (
            f"not a time: {bad!r} (use RFC 3339 with a zone, like 2026-11-30T10:00:00Z or "
            "2026-11-30T12:00:00+02:00; Unix seconds; now; or relative like -6h or now-90m)"
        )


def test_parse_duration_prometheus_forms() -> None:
    assert parse_duration("90s") == 90
    assert parse_duration("5m") == 300
    assert parse_duration("1h30m") == 5400
    assert parse_duration("2d") == 2 * 86400
    assert parse_duration("1w") == 7 * 86400
    assert parse_duration("1y") == 365 * 86400
    assert parse_duration("500ms") == 0.5
    assert parse_duration("1m30s500ms") == 90.5
    assert parse_duration("1d2h3m4s") == 86400 + 7200 + 180 + 4
    assert parse_duration("0s") == 0


def test_parse_duration_plain_seconds() -> None:
    assert parse_duration("600") == 600
    assert parse_duration("1.5") == 1.5
    assert parse_duration(".5") == 0.5
    assert parse_duration(" 30 ") == 30
    assert parse_duration(45) == 45.0
    assert parse_duration(2.5) == 2.5


def test_parse_duration_garbage() -> None:
    # Prometheus refuses fractions with a unit, units out of order or repeated, signs and spaces.
    for bad in ("", "1.5h", "30m1h", "5m5m", "-5m", "5 m", "5min", "m", "1e3", "inf", "nan", "yesterday"):
        msg = _error(parse_duration, bad)
        assert msg == (
            f"not a duration: {bad!r} (use a Prometheus duration like 90s, 5m, 1h30m or 2d, "
            "or plain seconds like 600 or 1.5)"
        )
    for bad_number in (-1, float("inf"), float("nan")):
        assert _error(parse_duration, bad_number).startswith("not a duration:")
