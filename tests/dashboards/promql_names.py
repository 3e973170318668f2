"""Which series names a PromQL expression reads, without a PromQL parser.

Good enough for the expressions fleetscope generates: strip strings (after collecting ``__name__``
matchers), label matchers, grouping clauses, ranges and numbers; what is left that is an identifier
not followed by ``(`` and not a keyword is a series name. Prometheus parses each expression for real
in the live test; this only answers "which names".
"""

from __future__ import annotations

import re

KEYWORDS = {
    "and",
    "or",
    "unless",
    "offset",
    "bool",
    "by",
    "without",
    "on",
    "ignoring",
    "group_left",
    "group_right",
    "inf",
    "nan",
    "atan2",
}

_NAME_MATCHER = re.compile(r'__name__\s*(=~|=)\s*"([^"]*)"')
_STRING = re.compile(r'"(?:[^"\\]|\\.)*"')
_BRACES = re.compile(r"\{[^}]*\}")
_GROUPING = re.compile(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)")
_RANGE = re.compile(r"\[[^\]]*\]")
_NUMBER = re.compile(r"(?<![A-Za-z0-9_:])\d[\d.]*(?:[eE][+-]?\d+)?[smhdwy]?")
_IDENT = re.compile(r"[A-Za-z_:][A-Za-z0-9_:]*")


def series_names(expr: str) -> set[str]:
    names = set()
    for op, value in _NAME_MATCHER.findall(expr):
        names.update(value.split("|") if op == "=~" else [value])
    rest = _STRING.sub('""', expr)
    rest = _BRACES.sub(" ", rest)
    rest = _GROUPING.sub(" ", rest)
    rest = _RANGE.sub(" ", rest)
    rest = _NUMBER.sub(" ", rest)
    for match in _IDENT.finditer(rest):
        word = match.group(0)
        follows = rest[match.end() :].lstrip()
        if word.lower() in KEYWORDS or follows.startswith("("):
            continue
        names.add(word)
    return names


def test_series_names() -> None:
    expr = (
        'sum by (job_id) (rate(training_tokens_total{job_id=~"1"}[5m])) / on (Hostname) group_left () '
        'max_over_time(up[1d:5m] offset 1h) > 1e6 and {__name__=~"a_total|b_total"} or vector(2) '
        'unless label_replace(x:y:z, "d", "e", "", "") * -0.5'
    )
    assert series_names(expr) == {"training_tokens_total", "up", "a_total", "b_total", "x:y:z"}
