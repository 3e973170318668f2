"""The two pieces of the Prometheus text format that several writers need (standard library only).

The exporter's ``/metrics``, the training library's rank files, the simulator's recordings and live
endpoints, and the demo's fallback recorder all write the text format by hand for speed; they share
these so an escaping rule is written once.
"""

from __future__ import annotations

import re

_ESCAPE = re.compile(r"\\(.)", re.DOTALL)
_UNESCAPED = {"n": "\n", "\\": "\\", '"': '"'}


def escape_label_value(value: str) -> str:
    """Escape a label value: backslash, newline and double quote, as the text format requires."""
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def unescape_label_value(value: str) -> str:
    """The inverse of :func:`escape_label_value`, in one pass, so ``\\\\n`` (an escaped backslash,
    then ``n``) stays a backslash and an ``n``; an unknown escape is kept as written."""
    if "\\" not in value:
        return value
    return _ESCAPE.sub(lambda m: _UNESCAPED.get(m[1], m[0]), value)


def format_number(x: float) -> str:
    """A sample value or timestamp: integral values without a fraction, others as ``repr``."""
    if x.is_integer() and abs(x) < 1e15:
        return str(int(x))
    return repr(x)
