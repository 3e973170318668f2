"""Per-job signals: which rank columns are a job's, when it steps, when it stalls, where it runs.

Read by the failing-node, hang and MFU-drop detectors, the job MFU signal, the goodput account,
streaming and the service's job view -- always through the cached members of
:class:`~fleetscope.analyzers.signals.window_signals.Signals`, which call these functions once per
job (or per question) and analysis. Each takes what it builds on (a job's columns, its stepping
mask) as arguments, so nothing here computes another signal a second time.
"""

from __future__ import annotations

import warnings
from collections.abc import Set

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


def stepping(feat: Features, cols: np.ndarray) -> np.ndarray:
    """Per grid time: did any rank of the columns ``cols`` (a job's) complete a step in it."""
    r = feat.ranks
    if not r.steps.size or not cols.any():
        return np.zeros(len(feat.times), dtype=bool)
    return np.nansum(np.where(np.isnan(r.steps[:, cols]), 0, r.steps[:, cols]), axis=1) > 0


def job_stalls(feat: Features, cols: np.ndarray, steps: np.ndarray, min_s: float) -> list[tuple[int, int]]:
    """(first, last) grid indices of periods, ``min_s`` long at least, where ranks of the columns
    ``cols`` report but none completes a step (``steps``: their :func:`stepping` mask)."""
    r = feat.ranks
    if not r.steps.size or not cols.any():
        return []
    present = r.present[:, cols].any(axis=1)
    need = max(1, round(min_s / feat.step))
    return [(a, b) for a, b in iter_runs(present & ~steps) if b - a + 1 >= need]


def job_nodes(feat: Features, cols: np.ndarray) -> frozenset[str]:
    """The nodes the ranks of the columns ``cols`` (a job's) ran on in the window."""
    r = feat.ranks
    return frozenset(str(n) for n in r.keys[c.NODE_LABEL].to_numpy()[cols])


def gpu_busy(feat: Features, nodes: Set[str], a: int, b: int) -> float | None:
    """Median GPU utilisation (percent) of the nodes' GPUs over [a, b]; None without GPU data."""
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
