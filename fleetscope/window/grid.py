"""Where a recording's time grid goes: its step and its phase against the scrape times.

Why it matters. The grid rule (``last_over_time`` with a lookback just under two steps, see
:mod:`fleetscope.window.frames`) takes, at each grid time, the last sample at or before it. When
a node is scraped within a few milliseconds of the grid times, its scrape jitter puts each sample on
one side of a grid time or the other, so its counters advance by zero steps in one grid step and
by two in the next. Over a long rate window that averages out; over the four samples a 60 s scrape
interval leaves in a two-minute window it does not, and a healthy job's throughput seems to swing
by a quarter. A recording's grid used to start at its first sample, which puts it exactly on the
earliest-scraped node's scrape times: the worst phase there is.

So the step is the typical sample spacing rounded to the whole second it almost always is
(Prometheus scrape intervals are whole seconds; jitter makes the median spacing 60.007 s), and the
grid's phase is moved to the middle of the widest gap between the scrape phases of the nodes --
unless every sample already sits on a common grid (a synthetic recording), which is left as it is.
"""

from __future__ import annotations

import numpy as np

#: Samples whose phases all lie within this of each other are on a common grid already (seconds).
ALIGNED_S = 0.002


def round_step(spacing: float) -> float:
    """The scrape interval behind a median sample spacing: whole seconds when within 1%."""
    whole = round(spacing)
    if whole >= 1 and abs(spacing - whole) <= 0.01 * whole:
        return float(whole)
    return round(spacing, 3)


def grid_start(times: np.ndarray, t_min: float, step: float) -> float:
    """The first grid time: at or after ``t_min``, at the phase farthest from every scrape phase.

    ``times`` is a sample of the recording's sample times (any order, a few thousand are enough).
    """
    t = np.asarray(times, dtype=float)
    t = t[np.isfinite(t)]
    if t.size == 0 or step <= 0:
        return t_min
    phase = np.sort(np.mod(t - t_min, step))
    # Circular spread of the phases: all on one grid (up to rounding) -> keep the first sample.
    gaps = np.diff(np.concatenate([phase, [phase[0] + step]]))
    if step - gaps.max() <= ALIGNED_S:
        return t_min
    i = int(np.argmax(gaps))
    middle = (phase[i] + gaps[i] / 2) % step
    return t_min + middle
