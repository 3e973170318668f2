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
from dataclasses import dataclass

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


#: A job's state codes per grid time (:class:`JobStates`).
NOT_SEEN, RUNNING, STALLED, DOWN = 0, 1, 2, 3
STATE_NAMES = {RUNNING: "running", STALLED: "stalled", DOWN: "down"}
#: Stepping rows whose step times make a job's typical step (their median: one long gap, such as
#: the resume after a stall, does not move it).
TYPICAL_STEP_ROWS = 8


@dataclass(frozen=True)
class JobStates:
    """A job's state at every grid time, from the evidence of its step counters and its series.

    ``codes``: per grid time ``RUNNING``, ``STALLED``, ``DOWN`` or ``NOT_SEEN``; ``since``: per grid
    time the grid index where the current state began (for a stall: the first grid time with no
    step, where the hang finding starts); ``typical_step_s``: per grid time the step time the stall
    test used (NaN before the job's first step).
    """

    codes: np.ndarray
    since: np.ndarray
    typical_step_s: np.ndarray

    def state(self, i: int = -1) -> str:
        """The state's name at grid index ``i`` (the window's end by default): ``running``,
        ``stalled``, ``down``, or ``unknown`` before the job's first report."""
        return STATE_NAMES.get(int(self.codes[i]), "unknown") if len(self.codes) else "unknown"

    def began(self, i: int = -1) -> int | None:
        """Grid index where the state at ``i`` began, for a stall or a job down (None otherwise)."""
        return int(self.since[i]) if len(self.codes) and int(self.codes[i]) in (STALLED, DOWN) else None

    def spans(self) -> list[tuple[str, int, int]]:
        """(state name, first, last grid index) of each stretch of one state, in time order (a
        stall's first index: where it began, which may be before the grid times it reads stalled)."""
        out: list[tuple[str, int, int]] = []
        for i, code in enumerate(self.codes.tolist()):
            if code == NOT_SEEN:
                continue
            name, first = STATE_NAMES[code], int(self.since[i])
            if out and out[-1][0] == name and out[-1][2] == i - 1 and first == out[-1][1]:
                out[-1] = (name, first, i)
                continue
            while out and out[-1][2] >= first:  # a stall began before it was provable
                if out[-1][1] >= first:
                    out.pop()
                else:
                    out[-1] = (out[-1][0], out[-1][1], first - 1)
            out.append((name, first, i))
        return out


def job_states(feat: Features, cols: np.ndarray, steps: np.ndarray) -> JobStates:
    """Each grid time's state of the job of columns ``cols`` (``steps``: its :func:`stepping` mask).

    Down: none of its ranks reports (a last grid row with no sample yet, while the row before has
    them, is the row before's state: the scrape is still to come). Stalled: its ranks report, and no
    rank's step counter advanced for longer than the job's typical step plus a margin: half that
    step (step times vary by tens of percent: data loading, garbage collection, a slow collective)
    and two grid steps (the counters are read once per grid step, so a step that completes just
    after a read is seen one grid step later, and the newest grid time's scrape may not have landed
    yet). The typical step
    is measured only at grid times where steps completed (the time since the previous progress over
    the steps counted, the median of the last ``TYPICAL_STEP_ROWS``), so a stall does not stretch
    the threshold that detects it; before the job's first step since it (re)appeared, ``stall_s``
    stands in for it. Running otherwise.

    A grid time where the job counted pause-phase time (a checkpoint, an evaluation: the phase is
    counted when it ends) is progress too, and a quiet stretch that such a row ends was that pause,
    not a stall: running in hindsight. The window's last grid time has no hindsight, so a blocking
    checkpoint longer than that margin reads stalled until it ends (docs/design.md#job-state).
    """
    T = len(feat.times)
    codes = np.zeros(T, dtype=np.int8)
    typical = np.full(T, np.nan)
    r = feat.ranks
    if not T or not r.steps.size or not cols.any():
        return JobStates(codes, np.zeros(T, dtype=np.int64), typical)
    present: np.ndarray = np.asarray(r.present[:, cols].any(axis=1), dtype=bool)
    paused = _pause_rows(feat, cols)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        counted = np.nan_to_num(np.nanmax(np.where(np.isnan(r.steps[:, cols]), 0, r.steps[:, cols]), axis=1))
    estimates: list[float] = []
    last: int | None = None  # the last grid time with progress (steps or a pause that ended)
    back: int | None = None  # first grid time of the current stretch of reports (-1: was down)
    start = np.arange(T)  # per stalled grid time: where its stall began
    for i in range(T):
        if steps[i]:
            gap = (i - (last if last is not None else i - 1)) * feat.step
            estimates = [*estimates[-(TYPICAL_STEP_ROWS - 1) :], gap / max(float(counted[i]), 1.0)]
        if steps[i] or paused[i]:
            last = i
        if estimates:
            typical[i] = float(np.median(estimates))
        if not present[i]:
            if i == T - 1 and i > 0 and present[i - 1]:
                codes[i], start[i], typical[i] = codes[i - 1], start[i - 1], typical[i - 1]
            else:
                codes[i], back = (NOT_SEEN, None) if back is None else (DOWN, -1)
            continue
        back = i if back is None or back < 0 else back
        if last is None or last < back:  # no progress since the job (re)appeared: ``stall_s``
            stalled, start[i] = (i - back + 1) * feat.step > feat.config.stall_s, back
        else:
            limit = (1.5 * typical[i] if np.isfinite(typical[i]) else feat.config.stall_s) + 2 * feat.step
            stalled, start[i] = (i - last) * feat.step > limit, last + 1
        codes[i] = STALLED if stalled else RUNNING
    # Hindsight: a stall that a pause's end closes was that pause.
    for code, a, b in _runs(codes):
        if code == STALLED and b + 1 < T and paused[b + 1] and codes[b + 1] == RUNNING:
            codes[a : b + 1] = RUNNING
    return JobStates(codes, _since(codes, start), typical)


def _pause_rows(feat: Features, cols: np.ndarray) -> np.ndarray:
    """Per grid time: ranks of the columns ``cols`` counted pause-phase time (eval, checkpoint)."""
    r = feat.ranks
    paused = np.zeros(len(feat.times), dtype=bool)
    for ph in c.PAUSE_PHASES:
        if ph in r.phases:
            paused |= np.asarray(np.nan_to_num(r.phases[ph][:, cols]).sum(axis=1) > 0, dtype=bool)
    return paused


def _since(codes: np.ndarray, start: np.ndarray) -> np.ndarray:
    """Per grid time: where its state began (a stall: where it began, ``start``; else the run's first)."""
    since = np.zeros(len(codes), dtype=np.int64)
    for i in range(len(codes)):
        if codes[i] == STALLED:
            since[i] = start[i]
        elif i and codes[i - 1] == codes[i]:
            since[i] = since[i - 1]
        else:
            since[i] = i
    return since


def _runs(codes: np.ndarray) -> list[tuple[int, int, int]]:
    """(code, first, last index) of each run of equal codes."""
    out: list[tuple[int, int, int]] = []
    for i, code in enumerate(codes.tolist()):
        if out and out[-1][0] == code:
            out[-1] = (code, out[-1][1], i)
        else:
            out.append((code, i, i))
    return out
