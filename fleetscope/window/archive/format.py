"""The Parquet archive's format: its columns, metadata key, version and time blocks, shared by its
writer (:mod:`.write`) and its reader (:mod:`.read`); the layout is described in :mod:`.write`.

pyarrow is imported only through :func:`pyarrow_modules` (extra ``archive``), never by the node agent.
"""

from __future__ import annotations

from collections.abc import Collection
from pathlib import Path
from typing import Any

from fleetscope.errors import FleetscopeError

#: Key of the archive's metadata in the Parquet file.
META_KEY = b"fleetscope.archive"
#: Version of the layout above; a reader refuses a newer one.
FORMAT_VERSION = 2
#: Fixed columns; label columns are named after their label (label names never start with ``__``,
#: and a label called ``timestamp`` or ``value`` is stored as ``__label_<name>``).
NAME_COL, TIME_COL, VALUE_COL = "__name__", "timestamp", "value"
#: Format 2: the series' place in its metric, and its labels that have no column of their own.
SERIES_COL, EXTRA_COL = "__series__", "__labels__"
#: With --input and --start: samples kept before the start, so the first grid times still see their
#: last sample (the lookback is two steps: this covers scrape intervals up to 5 minutes).
LOOKBACK_MARGIN_S = 600.0
#: Rows per row group at most (a block with more is cut; a group never holds two metrics).
ROW_GROUP_ROWS = 4_000_000
#: Time blocks (seconds, from the epoch): the unit a time-sliced read skips by.
BLOCK_S = 900.0
#: Adjacent blocks of one metric are merged into one row group until it holds this many rows (a
#: metric of a few series would otherwise make thousands of tiny groups and a large footer) or
#: spans :data:`GROUP_BLOCKS_MAX` blocks (so a slice of an hour never reads more than about two).
GROUP_ROWS_MIN = 50_000
GROUP_BLOCKS_MAX = 2
#: ``record --prometheus``: the window is exported in pieces of this many seconds (``--chunk``).
DEFAULT_PIECE_S = 3600.0
#: The first bytes (and the last) of every Parquet file.
MAGIC = b"PAR1"


def pyarrow_modules() -> tuple[Any, Any]:
    """(pyarrow, pyarrow.parquet), or one clear error naming the extra that provides them."""
    try:
        import pyarrow as pa
        import pyarrow.parquet as pq
    except ModuleNotFoundError:
        raise FleetscopeError("Parquet archives need pyarrow: pip install 'fleetscope[archive]'") from None
    from fleetscope.window.memory import archive_memory_pool

    archive_memory_pool(pa)  # freed pages go back at once (fleetscope.window.memory)
    return pa, pq


def label_column(label: str) -> str:
    return f"__label_{label}" if label in (TIME_COL, VALUE_COL) else label


def contract_label_keys(metrics: Collection[str] | None) -> list[str]:
    """The label keys the contract declares for ``metrics`` (every metric when None), with the
    MIG, attribution and scrape labels that may follow them."""
    from fleetscope import contract
    from fleetscope.window.frames import SCRAPE_LABELS

    known = contract.METRICS
    names = known if metrics is None else [m for m in metrics if m in known]
    keys = {k for m in names for k in known[m].labels}
    keys |= {*contract.GPU_MIG_LABELS, *contract.GPU_ATTRIBUTION_LABELS, *SCRAPE_LABELS}
    return sorted(keys)


def is_parquet(path: str | Path) -> bool:
    """Whether ``path`` is a Parquet file (by its magic bytes; by its suffix when it cannot be read)."""
    try:
        with open(path, "rb") as fh:
            return fh.read(4) == MAGIC
    except OSError:
        return str(path).endswith(".parquet")


# ---------------------------------------------------------------------- what an archive may hold
#: Latest sample time an archive holds (9999-12-31T23:59:59Z: what a datetime holds); earlier than
#: the epoch or later than this, a stamp is no sample any exporter wrote (``1e300`` used to be
#: written as the smallest int64, and made its archive unreadable).
MAX_STAMP_S = 253402300799.0
#: Most rows one read of an archive takes (the window's cell limit: an archive holds about one row
#: per grid cell), and most series: checked from the footer before any row is read.
MAX_READ_ROWS = 100_000_000
MAX_READ_SERIES = 1_000_000


def plausible_span(t0: Any, t1: Any, rows: Any) -> tuple[float, float]:
    """(first, last) sample time of row groups of [``t0``, ``t1``] holding ``rows`` rows, leaving
    out groups of stray stamps far from the bulk: the rule of ``frames.drop_bad_samples`` (a
    recording's), at row-group resolution (the 1st to 99th percentile of the rows, with
    ``PLAUSIBLE_MARGIN_S`` either side). The writer stores it; the reader uses it for a footer
    that lacks it."""
    import numpy as np

    from fleetscope.window.frames import PLAUSIBLE_MARGIN_S

    t0, t1 = np.asarray(t0, dtype=float), np.asarray(t1, dtype=float)
    rows = np.maximum(np.asarray(rows, dtype=float), 1.0)
    mid = (t0 + t1) / 2
    o = np.argsort(mid)
    cum = np.cumsum(rows[o]) / rows.sum()
    lo = mid[o][min(np.searchsorted(cum, 0.01), len(o) - 1)] - PLAUSIBLE_MARGIN_S
    hi = mid[o][min(np.searchsorted(cum, 0.99), len(o) - 1)] + PLAUSIBLE_MARGIN_S
    ok = (t1 >= lo) & (t0 <= hi)
    return float(t0[ok].min()), float(t1[ok].max())
