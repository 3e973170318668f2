"""A job's MFU (or tokens/s where FLOPs are unknown) while it trains, and its training mask.

Read by the MFU-drop detector, the job summaries of every report, the HTML report's MFU chart and
the service's job view, through :meth:`Signals.job_mfu
<fleetscope.analyzers.signals.window_signals.Signals.job_mfu>`. Each function takes the job's rank
columns and stepping mask (:mod:`~fleetscope.analyzers.signals.jobs`) as computed once there.
"""

from __future__ import annotations

import warnings

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import Features
from fleetscope.window.frames import iter_runs, rolling_sum


def training_mask(feat: Features, cols: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Per grid time: the job was training (not paused, stalled or hung) through this grid step.

    Grid steps in which no rank of the job completed a step are pauses (evaluation, a blocking
    checkpoint, a hang, a restart), and so are the grid steps on either side of one (partly
    paused) and any grid step that counted evaluation or checkpoint time
    (docs/design.md#pauses-that-are-not-faults). MFU drops measure lost throughput while training:
    the hang and failure detectors report the rest.
    """
    r = feat.ranks
    paused = _quiet(feat, cols, steps)
    for ph in c.PAUSE_PHASES:
        if ph in r.phases:
            paused |= np.nansum(np.nan_to_num(r.phases[ph][:, cols]), axis=1) > 0
    edge = paused.copy()
    edge[1:] |= paused[:-1]
    edge[:-1] |= paused[1:]
    # Some of the job's ranks unseen (a monitoring gap) or just back (their first increment carries
    # the whole gap): the job's sums are not its throughput there. A job that shrank for good is
    # whole again one rate window later.
    present = r.present[:, cols]
    if present.size:
        n = present.sum(axis=1).astype(float)
        edge |= n < _rolling_max(n, feat.rate_window_steps)
        edge[1:] |= (present[1:] & ~present[:-1]).any(axis=1)
    return ~edge


def typical_step_s(feat: Features, cols: np.ndarray) -> float:
    """The job's median wall time per step: from its step-time counter, else its step rate.

    Without ``training_step_seconds_total`` the median rank's time in the window over its steps
    (pauses included, so an upper bound: the pause rule then errs towards "still training").
    """
    r = feat.ranks
    per_rank = np.nansum(np.nan_to_num(r.steps[:, cols]), axis=0)
    good = per_rank > 0
    if not good.any():
        return float("nan")
    secs = np.nansum(np.nan_to_num(r.step_seconds[:, cols]), axis=0)
    if (secs[good] > 0).all():
        return float(np.median(secs[good] / per_rank[good]))
    span = r.present[:, cols].sum(axis=0) * feat.step
    return float(np.median(span[good] / per_rank[good]))


def _quiet(feat: Features, cols: np.ndarray, steps: np.ndarray) -> np.ndarray:
    """Grid steps inside a run without steps longer than the job's own step rhythm allows.

    A job whose step takes longer than the grid step completes none in some grid steps while it
    trains at full speed; only a run of silence longer than twice its typical step is a pause.
    """
    quiet = ~steps
    typical = typical_step_s(feat, cols)
    need = max(1, int(np.ceil(2 * typical / feat.step))) if np.isfinite(typical) else 1
    out = np.zeros_like(quiet)
    for a, b in iter_runs(quiet):
        if b - a + 1 >= need:
            out[a : b + 1] = True
    return out


def job_mfu(
    feat: Features, cols: np.ndarray, steps: np.ndarray, train: np.ndarray
) -> tuple[np.ndarray, str, np.ndarray]:
    """(MFU or tokens/s per grid time, unit, pause mask) of one job, over ``rate_window_s`` of training.

    Numerator and denominator count only grid steps in which the job was training (``train``, its
    :func:`training_mask`); a rate window with less than half of its time training is no level.
    """
    r = feat.ranks
    w = feat.rate_window_steps
    present = r.present[:, cols]
    active_s = rolling_sum(np.where(train, feat.step, 0.0)[:, None], w)[:, 0]
    enough = active_s >= 0.5 * w * feat.step
    flops = np.where(train, np.nansum(np.nan_to_num(r.flops[:, cols]), axis=1), 0.0)
    peak = _peaks(feat, cols)
    with np.errstate(all="ignore"):
        if np.isfinite(peak).any() and flops.sum() > 0:
            num = rolling_sum(flops[:, None], w)[:, 0] / active_s
            # Peak of the GPUs whose ranks were in the job during the window.
            pk = np.where(present, peak[None, :], 0.0).sum(axis=1)
            pk = _rolling_max(pk, w)
            series = np.where((pk > 0) & enough, num / pk, np.nan)
            unit = "MFU"
        else:
            # Per rank seen, times the job's usual size: ranks missing from the monitoring (or a
            # job that restarted smaller) do not read as lost throughput, as for MFU's peak.
            tok = np.where(train, np.nansum(np.nan_to_num(r.tokens[:, cols]), axis=1), 0.0)
            n = present.sum(axis=1).astype(float)
            rank_s = rolling_sum(np.where(train, n * feat.step, 0.0)[:, None], w)[:, 0]
            usual = float(np.median(n[n > 0])) if (n > 0).any() else 0.0
            series = np.where(
                enough & (rank_s > 0), rolling_sum(tok[:, None], w)[:, 0] / rank_s * usual, np.nan
            )
            unit = "tokens/s"
    # Windows that reach back before the job's first step in the window (start-up) are not a level.
    stepping_idx = np.nonzero(steps)[0]
    first = int(stepping_idx[0]) if stepping_idx.size else 0
    series[: max(w - 1, first + w)] = np.nan
    series[~present.any(axis=1)] = np.nan
    return series, unit, ~train


def _rolling_max(x: np.ndarray, w: int) -> np.ndarray:
    """The maximum over the last ``w`` rows (fewer at the start)."""
    if not len(x):
        return x.copy()
    pad = np.concatenate([np.full(w - 1, x[0]), x])
    return np.lib.stride_tricks.sliding_window_view(pad, w).max(axis=1)


def _peaks(feat: Features, cols: np.ndarray) -> np.ndarray:
    """bf16 peak FLOP/s of each rank's GPU (NaN where unknown)."""
    f = feat.frames.get(c.GPU_PEAK_FLOPS)
    keys = feat.ranks.keys[cols]
    out = np.full(len(keys), np.nan)
    if not len(f):
        return out
    f = f.select(dtype="bf16")
    lab, vals = f.group((c.NODE_LABEL, "gpu"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        peak = {
            (n, g): float(np.nanmax(vals[:, j]))
            for j, (n, g) in enumerate(zip(lab[c.NODE_LABEL], lab["gpu"], strict=True))
        }
    for i, (n, g) in enumerate(zip(keys[c.NODE_LABEL], keys["gpu"], strict=True)):
        out[i] = peak.get((n, g), np.nan)
    return out
