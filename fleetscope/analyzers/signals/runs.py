"""Runs of a per-time flag that last: the persistence rule every detector applies."""

from __future__ import annotations

import numpy as np

from fleetscope.window.frames import iter_runs


def runs_with_persistence(flag: np.ndarray, p: int, bridge: int = 2) -> list[tuple[int, int]]:
    """Runs of True at least ``p`` long; gaps up to ``bridge`` steps are bridged."""
    f = flag.copy()
    for a, b in iter_runs(~f):
        if a > 0 and b < len(f) - 1 and b - a + 1 <= bridge:
            f[a : b + 1] = True
    return [(a, b) for a, b in iter_runs(f) if b - a + 1 >= p]
