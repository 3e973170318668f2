"""Simulated training ranks: one real :class:`~fleetscope.telemetry.monitor.TrainingMonitor` per rank
on the scenario's virtual clock, served as the exporter would serve its rank file.

The simulator decides *what* each rank does (step times, phases, saves, evaluations, loads,
restarts); the monitor decides *what is reported*: when a pause's seconds reach the counters (at
its end), what a save counts, what a resume sets. The series come from the monitor's snapshot
through the writer's :func:`~fleetscope.telemetry.writer.rank_samples` (what the rank file holds),
so the simulator and the library share one set of counter rules. Rendering the text file and
parsing it back (about 0.9 ms a rank a scrape) is skipped: it changes no value.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable, Sequence

import numpy as np

from fleetscope import contract as c
from fleetscope.telemetry.monitor import TrainingMonitor
from fleetscope.telemetry.writer import rank_samples

#: Where the simulated monitors' rank files would go: a path that cannot exist, never written.
NOWHERE = os.path.join(os.devnull, "fleetscope-simulated-ranks")


class VirtualClock:
    """The Unix time the simulator sets before each call into the monitors."""

    __slots__ = ("now",)

    def __init__(self, now: float = 0.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


def spawn(
    clock: VirtualClock,
    job_id: str,
    ranks: Sequence[int],
    gpus: Sequence[int],
    attempt: int,
    layouts: Sequence[dict[str, int]] | None,
    convention: str = "palm",
) -> list[TrainingMonitor]:
    """One monitor per rank of a starting run (its processes start at ``clock.now``); their
    start-up lines (one per rank, at info level) are not logged."""
    log = logging.getLogger("fleetscope.telemetry")
    level = log.level
    log.setLevel(max(level, logging.WARNING))
    try:
        return _spawn(clock, job_id, ranks, gpus, attempt, layouts, convention)
    finally:
        log.setLevel(level)


def _spawn(
    clock: VirtualClock,
    job_id: str,
    ranks: Sequence[int],
    gpus: Sequence[int],
    attempt: int,
    layouts: Sequence[dict[str, int]] | None,
    convention: str,
) -> list[TrainingMonitor]:
    return [
        TrainingMonitor(
            job_id,
            rank,
            local_rank=gpu,
            gpu=gpu,
            directory=NOWHERE,
            flops_convention=convention,
            layout=None if layouts is None else layouts[i],
            restart_attempt=attempt,
            start=False,
            env={},
            clock=clock,
        )
        for i, (rank, gpu) in enumerate(zip(ranks, gpus, strict=True))
    ]


def close(monitors: Sequence[TrainingMonitor]) -> None:
    """The ranks' processes exit."""
    for m in monitors:
        m.close()


def samples(
    monitors: Sequence[TrainingMonitor], keys: Sequence[tuple[str, ...]], convention: str = "palm"
) -> dict[str, tuple[tuple[str, ...], list[tuple[str, ...]], np.ndarray]]:
    """Every rank's samples now, by metric: (extra label names, series keys, values).

    ``keys[i]``: the label values of monitor ``i``'s series (its rank labels, node and scrape
    labels); each sample's own labels (``phase``, ``result``, the layout) are appended. Ranks
    whose files hold the same series (nearly always all of a job's) are gathered in one array.
    """
    groups: list[tuple[list, list[tuple[str, ...]], list[list[float]]]] = []
    for m, key in zip(monitors, keys, strict=True):
        smp = rank_samples(m.snapshot(), convention)
        shape = [(metric, extra) for metric, extra, _ in smp]
        if not groups or groups[-1][0] != shape:
            groups.append((shape, [], []))
        groups[-1][1].append(key)
        groups[-1][2].append([float(v) for _, _, v in smp])
    names: dict[c.Metric, tuple[str, ...]] = {}
    rows: dict[c.Metric, list[tuple[str, ...]]] = {}
    vals: dict[c.Metric, list[np.ndarray]] = {}
    for shape, group_keys, values in groups:
        arr = np.asarray(values, dtype=float)
        for pos, (metric, extra) in enumerate(shape):
            if metric not in names:
                names[metric] = tuple(k for k, _ in extra)
                rows[metric], vals[metric] = [], []
            tail = tuple(v for _, v in extra)
            rows[metric].extend([k + tail for k in group_keys] if tail else group_keys)
            vals[metric].append(arr[:, pos])
    return {m.name: (names[m], rows[m], np.round(np.concatenate(vals[m]), 6)) for m in names}


StepPhases = dict[str, np.ndarray]


def commit_step(
    monitors: Sequence[TrainingMonitor],
    idx: np.ndarray,
    seconds: float,
    phases: StepPhases,
    tokens: float,
    flops: float,
) -> None:
    """Ranks ``idx`` (positions in ``monitors``) complete a step: their phases, then the step."""
    cols = {p: v[idx].tolist() for p, v in phases.items()}
    for n, i in enumerate(idx.tolist()):
        m = monitors[i]
        for p, v in cols.items():
            m.add_phase_time(p, v[n])
        m.record_step(seconds, tokens, flops)


def each(
    monitors: Sequence[TrainingMonitor], idx: np.ndarray, call: Callable[[TrainingMonitor], None]
) -> None:
    for i in idx.tolist():
        call(monitors[i])
