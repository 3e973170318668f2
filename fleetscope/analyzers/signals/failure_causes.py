"""A failing node's causes, most specific first, and a cause's family.

Moved verbatim from ``detectors/failing_node.py``: the failing-node detector names the first cause a
node has, and streaming (:mod:`fleetscope.analyzers.stream`) keeps the most specific cause when it
merges one incident's findings across chunks; neither imports the other.
"""

from __future__ import annotations

#: A failing node's causes, most specific first (the finding names the first it has).
CAUSE_PRIORITY = (
    "gpu_lost",
    "ecc_uncorrectable",
    "row_remap_failure",
    "xid",
    "recovery_action",
    "node_down",
    "ranks_stopped",
    "pcie_width_drop",
)


def base_cause(cause: str) -> str:
    """The cause's family: ``xid_31`` -> ``xid``."""
    return "xid" if cause.startswith("xid_") else cause
