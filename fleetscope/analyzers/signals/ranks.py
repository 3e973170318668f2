"""Per-rank signals read by more than the straggler detector: rank identities and slowness scores."""

from __future__ import annotations

import warnings

import numpy as np

from fleetscope.analyzers.features import Features
from fleetscope.analyzers.signals.slowness import Slowness
from fleetscope.window.frames import rolling_sum


def rank_ids(feat: Features) -> list[tuple[str, ...]]:
    """Each rank column's (job_id, rank, Hostname, gpu) as strings, read from the keys."""
    keys = feat.ranks.keys
    return (
        [tuple(str(v) for v in row) for row in keys.itertuples(index=False, name=None)] if len(keys) else []
    )


def rank_scores(feat: Features, sl: Slowness) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(compute seconds per step, slowness score against the peer group, modified z) per rank and time.

    The score is :meth:`Slowness.score`: 1 + the largest view of slowness (1.0 = like its peers).
    """
    r = feat.ranks
    T = len(feat.times)
    if not r.steps.size:
        z = np.zeros((T, 0))
        return z, z, z
    steps = rolling_sum(r.steps, feat.rate_window_steps)
    comp = rolling_sum(r.compute, feat.rate_window_steps)
    with np.errstate(all="ignore"):
        per_step = np.where(steps >= 2, comp / steps, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        zmax = np.nanmax(np.stack(list(sl.z.values())), axis=0) if sl.z else per_step * np.nan
    return per_step, sl.score(), zmax
