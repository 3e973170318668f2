"""Label values from outside, checked once where they enter (docs/robustness.md).

An index label (a rank, a NeuronCore, a Neuron device) is ASCII digits within a sane bound;
``str.isdigit()`` alone accepts ``²``, ``٣`` or 400 nines, which ``int()`` then refuses or turns
into a number nothing can allocate. Any other label value is cut to :data:`MAX_LABEL_CHARS`
characters, never copied whole: a 128 KiB tag in every series took a whole scrape down.

Standard library only: the node agent imports this.
"""

from __future__ import annotations

import logging

log = logging.getLogger(__name__)

#: Longest label value kept; a longer one is cut to this many characters (and the cut counted).
MAX_LABEL_CHARS = 256
#: Bounds of the index labels: ranks of one job, NeuronCores and Neuron devices of one node.
MAX_RANK = 1 << 20
#: XIDs are three-digit NVIDIA driver codes; the bound leaves room for new ones.
MAX_XID = 1 << 16
MAX_NEURONCORE = 4096
MAX_NEURON_DEVICE = 1024
#: Neuron devices of one node and NeuronCores of one device that a report may claim.
MAX_NEURON_DEVICES = 128
MAX_CORES_PER_DEVICE = 64


def parse_index(value: object, bound: int) -> int | None:
    """``value`` as an index in ``[0, bound)`` when it is one written in ASCII digits, else None."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int):
        return value if 0 <= value < bound else None
    if not isinstance(value, str) or not value or len(value) > len(str(bound)):
        return None
    if not (value.isascii() and value.isdigit()):
        return None
    index = int(value)
    return index if index < bound else None


def label_index(value: object, bound: int, what: str) -> int | None:
    """An index label of one series as an int; None when it is empty, or, with one warning, when it
    is not ASCII digits below ``bound`` (the analyzers then skip that series, never the cycle)."""
    text = "" if value is None else str(value)
    if not text:
        return None
    index = parse_index(text, bound)
    if index is None:
        log.warning(
            "skipped a series whose %s label %r is not an ASCII integer below %d", what, text[:40], bound
        )
    return index


def cap(value: str, limit: int = MAX_LABEL_CHARS) -> tuple[str, bool]:
    """(``value`` cut to ``limit`` characters, whether it was cut)."""
    if len(value) <= limit:
        return value, False
    return value[:limit], True
