"""Strict JSON: what fleetscope writes or serves never holds ``NaN`` or ``Infinity``.

Python's ``json.dumps`` writes them by default, and no strict parser (a browser's ``JSON.parse``,
Go's ``encoding/json``, ``jq``) reads them; with ``allow_nan=False`` it raises instead, which made
the service answer 500 for one rank's huge counters. :func:`dumps` writes a non-finite number as
``null`` and says so in a ``notes`` list beside it (at the top of the document, when the document
is an object), so a reader can tell a missing value from a value that could not be a number.

Standard library only: any layer may use it.
"""

from __future__ import annotations

import json
import math
from typing import Any

#: The member of a top-level object that carries the note.
NOTES = "notes"


def finite(obj: Any) -> tuple[Any, int]:
    """``obj`` with every non-finite float (at any depth of dicts, lists and tuples) replaced by
    None, and how many were replaced. Objects without one are returned as they are."""
    if isinstance(obj, float):
        return (obj, 0) if math.isfinite(obj) else (None, 1)
    if isinstance(obj, dict):
        count = 0
        out = {}
        for k, v in obj.items():
            out[k], n = finite(v)
            count += n
        return (out, count) if count else (obj, 0)
    if isinstance(obj, (list, tuple)):
        count = 0
        items = []
        for v in obj:
            item, n = finite(v)
            items.append(item)
            count += n
        return (items, count) if count else (obj, 0)
    return obj, 0


def note(count: int) -> str:
    return f"{count} value(s) were not finite numbers (NaN or infinite) and are written as null"


def dumps(obj: Any, **kwargs: Any) -> str:
    """``json.dumps(obj, **kwargs)`` that never writes ``NaN``/``Infinity`` (see the module)."""
    try:
        return json.dumps(obj, allow_nan=False, **kwargs)
    except ValueError:
        clean, count = finite(obj)
        if count and isinstance(clean, dict):
            clean = {**clean, NOTES: [*clean.get(NOTES, []), note(count)]}
        return json.dumps(clean, allow_nan=False, **kwargs)
