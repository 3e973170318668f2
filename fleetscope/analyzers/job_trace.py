"""One job's per-grid-time counters: everything its goodput account and checkpoint advice read.

The account (:mod:`fleetscope.analyzers.goodput`) reads a job's ranks only through these
reductions: sums over its ranks (steps, step time, phase, save and load time), the median rank's
steps, job-level gauges (global step, resume point, restart attempt), which ranks are present,
and where a rank's step counter fell. A streamed window (:mod:`fleetscope.analyzers.stream`)
keeps them for each chunk's own grid times and joins them (:meth:`JobTrace.join`), so the account
of the whole window is computed once over the whole window, as one-shot analysis computes it: a
failure and its restart, the rework back to the failed run's resume point, a save or a stall
across a chunk boundary, the node-hours of the window are each seen whole, not per chunk.

What needs the grid time before a row (a counter's increase, a counter that fell) is read in the
chunk: its lead-in gives the increases their previous sample, and the last value of each rank's
step counter (:attr:`JobTrace.last_raw`) is carried to the next chunk.

Memory: per job a dozen vectors of the window's length and one boolean per rank and grid time
(a 512-node day at 15 s: 24 MB), not the grid.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import RANK_KEY, Features, place_columns, row_positions
from fleetscope.window.frames import increase_steps

#: A rank: its RANK_KEY label values.
RankKey = tuple


def _aligned(feat: Features, name: str, cols: np.ndarray, how: str = "max") -> np.ndarray | None:
    """``name`` on the job's rank columns (T x ranks), None when the window lacks it."""
    f = feat.frames.get(name)
    if not len(f):
        return None
    r = feat.ranks
    lab, vals = f.group(RANK_KEY, how)
    out = place_columns(np.full(r.steps.shape, np.nan), row_positions(r.keys, lab, RANK_KEY), vals)[:, cols]
    return None if np.isnan(out).all() else out


def _sum(x: np.ndarray | None, n: int) -> np.ndarray:
    """Per grid time, the sum over the columns (NaN as 0); zeros when there is nothing."""
    if x is None or not x.size:
        return np.zeros(n)
    return np.nansum(np.nan_to_num(x, nan=0.0), axis=1) * np.ones(n)


def _job_level(x: np.ndarray | None, n: int) -> np.ndarray:
    """One value per grid time from per-rank gauges that all ranks share (their max; NaN: none)."""
    if x is None or not x.size:
        return np.full(n, np.nan)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmax(x, axis=1)


def _ffill_prev(x: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Each column's last value before each row (``before``: the values before the first row;
    NaN where none)."""
    import pandas as pd

    stacked = np.vstack([before.reshape(1, -1), x])
    return pd.DataFrame(stacked).ffill().to_numpy()[:-1]


def _last(x: np.ndarray, before: np.ndarray) -> np.ndarray:
    """Each column's last non-NaN value (``before`` where it has none)."""
    import pandas as pd

    stacked = np.vstack([before.reshape(1, -1), x])
    return pd.DataFrame(stacked).ffill().to_numpy()[-1]


def _rose(x: np.ndarray, before: np.ndarray, sign: float) -> np.ndarray:
    """Per row: did any column move by more than half a unit in ``sign``'s direction since its last value."""
    prev = _ffill_prev(x, before)
    with np.errstate(invalid="ignore"):
        return np.any(sign * (x - prev) > 0.5, axis=1)


@dataclass
class JobTrace:
    """One job's counters per grid time ``t`` (interval ``i``: ``t[i-1]`` to ``t[i]``)."""

    t: np.ndarray
    keys: list[RankKey]
    #: Per grid time and rank (``keys``): the rank's series has a sample.
    present: np.ndarray
    steps: np.ndarray  # the ranks' steps, summed
    job_steps: np.ndarray  # the median rank's steps
    train: np.ndarray  # step time (else the phases of a step), summed
    ck_phase: np.ndarray  # the checkpoint phase, summed
    ev: np.ndarray  # the eval phase, summed
    save_inc: np.ndarray  # checkpoint save seconds, summed increases
    load_inc: np.ndarray  # checkpoint load seconds, summed increases
    ck_telemetry: bool  # the save-seconds counter was seen
    gstep: np.ndarray  # job-level gauges (NaN: none)
    resumed: np.ndarray
    attempt: np.ndarray
    #: A rank's step counter or the global step fell, or the restart attempt went up.
    falls: np.ndarray
    #: Some rank's raw step counter is non-zero there (a job already running).
    stepped_raw: np.ndarray
    nodes: set[str] = field(default_factory=set)
    #: Rank -> the first grid time its step counter was seen.
    born: dict[RankKey, float] = field(default_factory=dict)
    #: Rank -> its step counter's last value; and the job-level gauges' (for the next chunk's falls).
    last_raw: dict[RankKey, float] = field(default_factory=dict)
    last_gstep: float = float("nan")
    last_attempt: float = float("nan")

    @classmethod
    def of(
        cls, feat: Features, cols: np.ndarray, own_start: float | None = None, before: JobTrace | None = None
    ) -> JobTrace:
        """The trace of the job with rank columns ``cols`` in ``feat``, over the grid times from
        ``own_start`` (a streamed chunk's own region; None: all); ``before``: the job's trace of the
        chunks before (its last counter values)."""
        r = feat.ranks
        t_all = feat.times
        own = 0 if own_start is None else int(np.searchsorted(t_all, own_start - 1e-6))
        T = len(t_all)
        keys = list(r.keys[cols][list(RANK_KEY)].itertuples(index=False, name=None)) if cols.any() else []
        step_s = r.step_seconds[:, cols]
        if np.isnan(step_s).all():  # no step timer: the phases of the step
            step_s = sum(
                (
                    r.phases[p][:, cols]
                    for p in c.TRAINING_PHASES
                    if p not in c.PAUSE_PHASES and p in r.phases
                ),
                np.zeros(step_s.shape),
            )
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            job_steps = np.nan_to_num(np.nanmedian(r.steps[:, cols], axis=1), nan=0.0) * np.ones(T)
        save = _aligned(feat, c.TRAINING_CHECKPOINT_SAVE_SECONDS, cols)
        load = _aligned(feat, c.TRAINING_CHECKPOINT_LOAD_SECONDS, cols)
        raw = feat.frames.get(c.TRAINING_STEPS)
        _lab, steps_raw = raw.group(RANK_KEY)
        steps_raw = steps_raw[:, cols] if steps_raw.shape[1] == len(cols) else np.full((T, 0), np.nan)
        raw_keys = keys if steps_raw.shape[1] else []
        gstep = _job_level(_aligned(feat, c.TRAINING_GLOBAL_STEP, cols), T)
        attempt = _job_level(_aligned(feat, c.TRAINING_RESTART_ATTEMPT, cols), T)

        o = slice(own, T)
        prev = before.last_raw if before is not None else {}
        raw_before = np.array([prev.get(k, np.nan) for k in raw_keys], dtype=float)
        g_before = np.array([before.last_gstep if before is not None else np.nan])
        a_before = np.array([before.last_attempt if before is not None else np.nan])
        falls = _rose(steps_raw[o], raw_before, -1.0) if steps_raw.shape[1] else np.zeros(T - own, dtype=bool)
        falls |= _rose(gstep[o].reshape(-1, 1), g_before, -1.0)
        falls |= _rose(attempt[o].reshape(-1, 1), a_before, 1.0)
        seen = ~np.isnan(steps_raw[o])
        born = {
            k: float(t_all[own + int(np.argmax(seen[:, i]))])
            for i, k in enumerate(raw_keys)
            if seen[:, i].any()
        }
        last = _last(steps_raw[o], raw_before) if steps_raw.shape[1] else np.zeros(0)
        return cls(
            t=t_all[o].copy(),
            keys=keys,
            present=r.present[o][:, cols].copy(),
            steps=_sum(r.steps[:, cols], T)[o],
            job_steps=job_steps[o],
            train=_sum(step_s, T)[o],
            ck_phase=_sum(r.phases["checkpoint"][:, cols], T)[o]
            if "checkpoint" in r.phases
            else np.zeros(T - own),
            ev=_sum(r.phases["eval"][:, cols], T)[o] if "eval" in r.phases else np.zeros(T - own),
            save_inc=_sum(None if save is None else increase_steps(save), T)[o],
            load_inc=_sum(None if load is None else increase_steps(load), T)[o],
            ck_telemetry=save is not None and not np.isnan(save[o]).all(),
            gstep=gstep[o],
            resumed=_job_level(_aligned(feat, c.TRAINING_RESUMED_FROM_STEP, cols), T)[o],
            attempt=attempt[o],
            falls=falls,
            stepped_raw=np.nan_to_num(steps_raw[o]).any(axis=1)
            if steps_raw.shape[1]
            else np.zeros(T - own, bool),
            nodes={str(n) for n in r.keys[cols][c.NODE_LABEL]} if cols.any() else set(),
            born=born,
            last_raw={
                **prev,
                **{k: float(v) for k, v in zip(raw_keys, last, strict=True) if not np.isnan(v)},
            },
            last_gstep=float(_last(gstep[o].reshape(-1, 1), g_before)[0]),
            last_attempt=float(_last(attempt[o].reshape(-1, 1), a_before)[0]),
        )

    def join(self, later: JobTrace) -> JobTrace:
        """This trace followed by ``later`` (the next chunk's own grid times)."""
        keys = list(dict.fromkeys([*self.keys, *later.keys]))
        pos = {k: i for i, k in enumerate(keys)}
        present = np.zeros((len(self.t) + len(later.t), len(keys)), dtype=bool)
        present[: len(self.t), [pos[k] for k in self.keys]] = self.present
        present[len(self.t) :, [pos[k] for k in later.keys]] = later.present
        cat = {name: np.concatenate([getattr(self, name), getattr(later, name)]) for name in _VECTORS}
        born = dict(later.born)
        born.update({k: v for k, v in self.born.items() if v <= born.get(k, v)})
        return JobTrace(
            **cat,
            keys=keys,
            present=present,
            ck_telemetry=self.ck_telemetry or later.ck_telemetry,
            nodes=self.nodes | later.nodes,
            born=born,
            last_raw={**self.last_raw, **later.last_raw},
            last_gstep=later.last_gstep,
            last_attempt=later.last_attempt,
        )

    def on_grid(self, t: np.ndarray, step: float) -> JobTrace:
        """This trace on the grid ``t`` (the window's): grid times it lacks hold no rank."""
        if len(self.t) == len(t) and np.array_equal(self.t, t):
            return self
        idx = np.clip(np.searchsorted(t, self.t - step / 2), 0, len(t) - 1)
        n = len(t)
        out = {}
        for name in _VECTORS:
            v = getattr(self, name)
            fill = np.nan if name in ("gstep", "resumed", "attempt") else (False if v.dtype == bool else 0.0)
            full = np.full(n, fill, dtype=v.dtype)
            full[idx] = v
            out[name] = full
        out["t"] = t.copy()
        present = np.zeros((n, len(self.keys)), dtype=bool)
        present[idx] = self.present
        return JobTrace(
            **out,
            keys=self.keys,
            present=present,
            ck_telemetry=self.ck_telemetry,
            nodes=self.nodes,
            born=self.born,
            last_raw=self.last_raw,
            last_gstep=self.last_gstep,
            last_attempt=self.last_attempt,
        )


#: The per-grid-time vectors of a trace (joined by concatenation).
_VECTORS = (
    "t", "steps", "job_steps", "train", "ck_phase", "ev", "save_inc", "load_inc",
    "gstep", "resumed", "attempt", "falls", "stepped_raw",
)  # fmt: skip
