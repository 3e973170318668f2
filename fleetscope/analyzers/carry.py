"""What one chunk of a streamed window hands the next (:mod:`fleetscope.analyzers.stream`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # numpy types: the service reads reports without them
    from fleetscope.analyzers.job_trace import JobTrace


@dataclass
class Carry:
    """What one chunk hands the next: the per-job levels the detectors cannot see again."""

    #: job -> (unit, level): the baseline MFU or tokens/s the latest chunk measured from (its best
    #: long segment; in a chunk inside a drop, the level carried in): the next chunk's reference.
    #: The latest, not the best of all: a healthy job drifts (data mix, sequence length), and a
    #: short window's best is noisy.
    mfu_base: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: (job_id, rank, Hostname, gpu, view) -> the rank's best (lowest) slowness level in that view so
    #: far: a rank slow through a whole chunk has still changed against its own earlier level.
    rank_best: dict[tuple[str, ...], float] = field(default_factory=dict)
    #: Nodes seen so far: one that reappears after a chunk's edge came back, it did not join.
    nodes_seen: set[str] = field(default_factory=set)
    #: job -> its counters over the own regions of the chunks so far (the goodput account and the
    #: checkpoint advice of the whole window are computed from them once, at the end).
    traces: dict[str, JobTrace] = field(default_factory=dict)
    #: The nodes of any GPU or rank series so far (the advice's node-hours).
    window_nodes: set[str] = field(default_factory=set)
    #: The own grid times of the chunks so far (the grid of the whole window's account).
    grid: tuple[float, ...] = ()

    def merge(self, other: Carry) -> Carry:
        """This carry updated by the next chunk's: its MFU levels, the lowest slowness levels, every
        node seen, the jobs' counters joined."""
        out = {**self.mfu_base, **other.mfu_base}
        traces = dict(self.traces)
        for job, trace in other.traces.items():
            traces[job] = traces[job].join(trace) if job in traces else trace
        best = dict(self.rank_best)
        for key, level in other.rank_best.items():
            best[key] = min(level, best.get(key, level))
        return Carry(
            mfu_base=out,
            rank_best=best,
            nodes_seen=self.nodes_seen | other.nodes_seen,
            traces=traces,
            window_nodes=self.window_nodes | other.window_nodes,
            grid=self.grid + other.grid,
        )
