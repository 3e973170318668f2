"""Parse Lustre's lprocfs ``stats`` text format (llite, osc, mdc, ldlm ``stats``, ``read_ahead_stats``).

The kernel (``lprocfs_stats_seq_show`` and ``lprocfs_stats_header`` in
``lustre/obdclass/lprocfs_status.c``) prints::

    snapshot_time             1710759783.271040288 secs.nsecs
    start_time                1715767600.564021089 secs.nsecs      (2.14+, optional)
    elapsed_time              528136.727422941 secs.nsecs          (2.14+, optional)
    NAME                      COUNT samples [UNIT] [MIN MAX SUM [SUMSQ]]

What varies between versions and files, and is accepted here:

* the header lines may carry a colon (``snapshot_time:``) and the units ``secs.nsecs``,
  ``(secs.nsecs)`` or ``(secs.usecs)``, or none;
* NAME may contain spaces (``read_ahead_stats`` before 2.14: ``hit max r-a issue``);
* UNIT is free text (``regs`` up to 2.12, ``reqs`` later, ``usec``/``usecs``, ``bytes``, ``pages``);
* 0, 3 or 4 numbers follow the unit; SUMSQ may exceed 2**63 (Python ints hold it);
* counters with 0 samples are omitted by the kernel, so a name may be absent.

The kernel prints the count and SUMSQ as ``%llu`` and MIN, MAX and SUM as ``%lld``; a number outside
those ranges (400 digits, say) cannot come from it, and its line is reported ``out_of_range``
rather than exported (a value that large would also fail the exposition).

A line that fits none of these is *reported*, not fatal: the result keeps every good line and lists
the bad ones in :attr:`Stats.problems` so the caller can count them. A last line without its
newline is a truncated read (seq_file output always ends with ``\\n``) and is reported, never used:
a number cut short would otherwise pass as a smaller, valid value.

This module is pure (text in, values out) and imports only the standard library.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass, field

__all__ = ["TIME_UNITS_PER_SECOND", "Counter", "Problem", "Stats", "parse_stats", "units_per_second"]

_COUNTER = re.compile(
    r"^(?P<name>\S(?:.*?\S)?)\s+(?P<samples>\d+)\s+samples\s+\[(?P<unit>[^\]]*)\]"
    r"(?:\s+(?P<min>-?\d+)\s+(?P<max>-?\d+)\s+(?P<sum>-?\d+)(?:\s+(?P<sumsq>\d+))?)?\s*$"
)
_HEADER = re.compile(
    r"^(?P<key>snapshot_time|start_time|elapsed_time):?\s+(?P<value>\d+(?:\.\d+)?)"
    r"(?:\s+(?:secs\.nsecs|\(secs\.nsecs\)|secs\.usecs|\(secs\.usecs\)))?\s*$"
)

#: Units that measure time, and how many of them make a second. Lustre writes ``usec`` in 2.10
#: osc/mdc stats and ``usecs`` in 2.14+ llite stats; both are microseconds.
TIME_UNITS_PER_SECOND: dict[str, int] = {"usec": 10**6, "usecs": 10**6, "nsec": 10**9, "nsecs": 10**9}
_U64_MAX = 2**64 - 1
_S64_MIN, _S64_MAX = -(2**63), 2**63 - 1
#: Digits (and a sign) of the longest number the kernel prints: longer text is never parsed as int
#: (Python refuses int() of over 4,300 digits, and would spend time on a long one).
_MAX_NUMBER_CHARS = 21


def units_per_second(unit: str) -> int | None:
    """How many of a time unit make a second (``usecs`` -> 10**6); ``None`` if it is not time.

    Dividing a sum by this (rather than multiplying by 1e-6) keeps values such as 3200 usecs an
    exact-looking 0.0032 s in the exposition.
    """
    return TIME_UNITS_PER_SECOND.get(unit)


@dataclass(frozen=True, slots=True)
class Counter:
    """One counter line. ``min``/``max``/``sum`` are present together or not at all."""

    name: str
    samples: int
    unit: str
    min: int | None = None
    max: int | None = None
    sum: int | None = None
    sumsq: int | None = None


@dataclass(frozen=True, slots=True)
class Problem:
    """A line that was not used: ``malformed``, ``truncated``, ``duplicate``, ``out_of_range`` or
    ``empty``."""

    line_no: int
    line: str
    reason: str


@dataclass(slots=True)
class Stats:
    """A parsed stats file. Header times are seconds (float); absent headers are ``None``."""

    snapshot_time: float | None = None
    start_time: float | None = None
    elapsed_time: float | None = None
    counters: dict[str, Counter] = field(default_factory=dict)
    problems: list[Problem] = field(default_factory=list)

    def get(self, name: str) -> Counter | None:
        return self.counters.get(name)


def parse_stats(text: str) -> Stats:
    """Parse the text of one lprocfs stats file; never raises on bad content (see module doc)."""
    stats = Stats()
    if not text:
        stats.problems.append(Problem(0, "", "empty"))
        return stats
    lines = text.split("\n")
    complete = text.endswith("\n")
    if complete:
        lines.pop()  # the empty string after the final newline
    last = len(lines)
    for line_no, raw in enumerate(lines, start=1):
        if not complete and line_no == last:
            stats.problems.append(Problem(line_no, raw, "truncated"))
            break
        line = raw.strip()
        if not line:
            continue
        m = _COUNTER.match(line)
        if m is not None:
            name = m["name"]
            if name in stats.counters:
                stats.problems.append(Problem(line_no, raw, "duplicate"))
                continue
            counter = _counter(m)
            if counter is None:
                stats.problems.append(Problem(line_no, raw, "out_of_range"))
                continue
            stats.counters[name] = counter
            continue
        h = _HEADER.match(line)
        if h is not None:
            value = float(h["value"]) if len(h["value"]) <= 64 else math.inf
            if not math.isfinite(value):
                stats.problems.append(Problem(line_no, raw, "out_of_range"))
                continue
            setattr(stats, h["key"], value)
            continue
        stats.problems.append(Problem(line_no, raw, "malformed"))
    return stats


def _int(text: str | None, low: int, high: int) -> int | None:
    if text is None or len(text) > _MAX_NUMBER_CHARS:
        return None
    value = int(text)
    return value if low <= value <= high else None


def _counter(m: re.Match[str]) -> Counter | None:
    """The counter of a matched line; ``None`` if a number is outside what the kernel can print."""
    samples = _int(m["samples"], 0, _U64_MAX)
    if samples is None:
        return None
    if m["sum"] is None:
        return Counter(name=m["name"], samples=samples, unit=m["unit"].strip())
    lo, hi = (_int(m[k], _S64_MIN, _S64_MAX) for k in ("min", "max"))
    total = _int(m["sum"], 0, _S64_MAX)  # a sum is exported as a counter: never negative
    sumsq = _int(m["sumsq"], 0, _U64_MAX) if m["sumsq"] is not None else None
    if lo is None or hi is None or total is None or (m["sumsq"] is not None and sumsq is None):
        return None
    return Counter(m["name"], samples, m["unit"].strip(), lo, hi, total, sumsq)
