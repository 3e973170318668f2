"""Prometheus exposition text read back in tests, with prometheus_client's own parser.

The exporter and the service render the text format themselves; tests read it back with the
reference parser rather than with regexes, so a line the parser would reject fails the test.
"""

from __future__ import annotations

import re

from prometheus_client.parser import text_string_to_metric_families

#: One sample: its name as written (``_total``, ``_bucket`` included), its labels, its value.
Sample = tuple[str, dict[str, str], float]
#: A series as a dictionary key: the sample name and its labels, sorted.
Key = tuple[str, tuple[tuple[str, str], ...]]


_COUNTER_TYPE = re.compile(r"^(# TYPE \S+) counter$", re.MULTILINE)


def _text(text: str | bytes) -> str:
    """The text with counters typed ``untyped``: the parser appends ``_total`` to the samples of a
    counter whose name lacks it (DCGM's counters do), and tests must see the names as written."""
    return _COUNTER_TYPE.sub(r"\1 untyped", text.decode() if isinstance(text, bytes) else text)


def samples(text: str | bytes) -> list[Sample]:
    """Every sample of an exposition, in the order it was written."""
    return [
        (s.name, dict(s.labels), s.value)
        for family in text_string_to_metric_families(_text(text))
        for s in family.samples
    ]


def series(text: str | bytes) -> dict[Key, float]:
    """``{(name, sorted labels): value}``; fails on a series written twice."""
    out: dict[Key, float] = {}
    for name, labels, v in samples(text):
        key = (name, tuple(sorted(labels.items())))
        assert key not in out, f"series written twice: {key}"
        out[key] = v
    return out


def matching(text: str | bytes, name: str, **labels: str) -> list[Sample]:
    """The samples called ``name`` whose labels include ``labels``."""
    want = labels.items()
    return [s for s in samples(text) if s[0] == name and want <= s[1].items()]


def value(text: str | bytes, name: str, **labels: str) -> float:
    """The value of the one sample called ``name`` whose labels include ``labels``."""
    found = matching(text, name, **labels)
    assert len(found) == 1, f"{name}{labels}: expected one sample, got {found}"
    return found[0][2]
