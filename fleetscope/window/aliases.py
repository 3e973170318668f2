"""Older exporters' names of a series, read as the new name (``contract.METRIC_ALIASES``).

A loader asks for the older names beside the new ones (:func:`with_aliases`) and files what it
found under an older name under the new one (:func:`fold_aliases`): a fleet whose nodes run an old
dcgm-exporter has its clock-event reasons where the analyzers look, and a fleet halfway through an
upgrade has both kinds of node in one frame. The detectors never see the older names.
"""

from __future__ import annotations

from collections.abc import Collection

import numpy as np
import pandas as pd

from fleetscope import contract as c
from fleetscope.window.frames import Frames, MetricFrame


def with_aliases(metrics: Collection[str] | None) -> tuple[str, ...] | None:
    """``metrics`` with the older names of each (None, every metric, stays None)."""
    if metrics is None:
        return None
    out = dict.fromkeys(metrics)
    for name in list(out):
        out.update(dict.fromkeys(c.METRIC_ALIASES.get(name, ())))
    return tuple(out)


def fold_aliases(frames: Frames) -> Frames:
    """``frames`` with every older name's series filed under its new name (beside any the new name
    has: a series under both names keeps the new name's); the older names are gone. In place."""
    for new, olds in c.METRIC_ALIASES.items():
        for old in olds:
            frame = frames.metrics.pop(old, None)
            if frame is None or not len(frame):
                continue
            have = frames.metrics.get(new)
            if have is None or not len(have):
                frames.metrics[new] = frame
                continue
            frames.metrics[new] = _union(have, frame)
    return frames


def _union(new: MetricFrame, old: MetricFrame) -> MetricFrame:
    """The new name's series, then the older name's whose labels the new name has not."""
    keys = [k for k in (*new.labels.columns, *old.labels.columns) if k]
    keys = list(dict.fromkeys(keys))
    a = new.labels.reindex(columns=keys, fill_value="")
    b = old.labels.reindex(columns=keys, fill_value="")
    seen = set(map(tuple, a.to_numpy().tolist()))
    keep = np.array([tuple(r) not in seen for r in b.to_numpy().tolist()], dtype=bool)
    labels = pd.concat([a, b[keep]], ignore_index=True)
    return MetricFrame(labels, np.hstack([new.values, old.values[:, keep]]))
