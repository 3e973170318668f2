"""Per-job signals: which rank columns are a job's, when it steps, when it stalls, where it runs.

Read by the failing-node, hang and MFU-drop detectors, the job MFU signal, the goodput account,
streaming and the service's job view. Moved from ``features.py`` unchanged.
"""

from __future__ import annotations

import warnings

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features
from fleetscope.window.frames import iter_runs


def job_columns(feat: Features, job: str | None) -> np.ndarray:
    """Boolean mask of the rank columns of ``job`` (all ranks when None)."""
    r = feat.ranks
    if job is None or not len(r.keys):
        return np.ones(r.steps.shape[1] if r.steps.size else 0, dtype=bool)
    return r.keys["job_id"].to_numpy().astype(str) == job


def stepping(feat: Features, job: str | None = None) -> np.ndarray:
    """Per grid time: did any rank of ``job`` (of any job when None) complete a step in it."""
    r = feat.ranks
    cols = job_columns(feat, job)
    if not r.steps.size or not cols.any():
        return np.zeros(len(feat.times), dtype=bool)
    return np.nansum(np.where(np.isnan(r.steps[:, cols]), 0, r.steps[:, cols]), axis=1) > 0


def job_stalls(feat: Features, job: str | None = None, min_s: float | None = None) -> list[tuple[int, int]]:
    """(first, last) grid indices of periods where ranks of ``job`` report but none completes a step.

    ``job`` None: no rank of any job steps. ``min_s``: shortest period kept (default ``stall_s``).
    """
    r = feat.ranks
    if not r.steps.size:
        return []
    cols = job_columns(feat, job)
    if not cols.any():
        return []
    present = r.present[:, cols].any(axis=1)
    need = max(1, round((feat.config.stall_s if min_s is None else min_s) / feat.step))
    return [(a, b) for a, b in iter_runs(present & ~stepping(feat, job)) if b - a + 1 >= need]


def job_nodes(feat: Features, job: str) -> set[str]:
    """The nodes the ranks of ``job`` ran on in the window."""
    r = feat.ranks
    return {str(n) for n in r.keys[c.NODE_LABEL].to_numpy()[job_columns(feat, job)]}


def gpu_busy(feat: Features, nodes: set[str], a: int, b: int) -> float | None:
    """Median GPU utilisation (percent) of the job's nodes over [a, b]; None without GPU data."""
    gs = feat.gpus
    if not gs.util.size:
        return None
    cols = np.isin(gs.keys[c.NODE_LABEL].to_numpy().astype(str), list(nodes))
    v = gs.util[a : b + 1][:, cols]
    if not np.isfinite(v).any():
        return None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(np.nanmedian(v))
