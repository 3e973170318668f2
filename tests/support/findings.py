"""Comparing two findings documents (``fleetscope analyze --format json``) as streamed and one-shot
analysis must agree: the same findings by subject and severity, starts and ends within the rate
window (the resolution of a finding), the same open/closed state (docs/analyzers.md#streaming)."""

from __future__ import annotations

from typing import Any

from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.stream import subject


def _index(doc: dict[str, Any]) -> dict[tuple, Finding]:
    out = {}
    for d in doc["findings"]:
        f = Finding.from_dict(d)
        out[(subject(f), f.severity)] = f
    return out


def assert_same_findings(
    one: dict[str, Any], streamed: dict[str, Any], resolution: float = DEFAULT.rate_window_s
):
    a, b = _index(one), _index(streamed)
    assert len(a) == len(one["findings"]) and len(b) == len(streamed["findings"])
    assert a.keys() == b.keys()
    for k, fa in a.items():
        fb = b[k]
        assert abs(fa.start - fb.start) <= resolution, k
        assert (fa.end is None) == (fb.end is None), k
        if fa.end is not None and fb.end is not None:
            assert abs(fa.end - fb.end) <= resolution, k
