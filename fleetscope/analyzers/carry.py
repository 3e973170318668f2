"""What one chunk of a streamed window hands the next (:mod:`fleetscope.analyzers.stream`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Carry:
    """What one chunk hands the next: the per-job levels the detectors cannot see again."""

    #: job -> (unit, level): the baseline MFU or tokens/s the latest chunk measured from (its best
    #: long segment; in a chunk inside a drop, the level carried in): the next chunk's reference.
    #: The latest, not the best of all: a healthy job drifts (data mix, sequence length), and a
    #: short window's best is noisy.
    mfu_base: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: job -> the goodput account's baseline step time (seconds), as the first chunk that had one measured it.
    step_base: dict[str, float] = field(default_factory=dict)
    #: (job_id, rank, Hostname, gpu, view) -> the rank's best (lowest) slowness level in that view so
    #: far: a rank slow through a whole chunk has still changed against its own earlier level.
    rank_best: dict[tuple[str, ...], float] = field(default_factory=dict)
    #: Nodes seen so far: one that reappears after a chunk's edge came back, it did not join.
    nodes_seen: set[str] = field(default_factory=set)

    def merge(self, other: Carry) -> Carry:
        """This carry updated by the next chunk's: its MFU levels, the first baseline step, the lowest
        slowness levels, every node seen."""
        out = {**self.mfu_base, **other.mfu_base}
        best = dict(self.rank_best)
        for key, level in other.rank_best.items():
            best[key] = min(level, best.get(key, level))
        return Carry(
            mfu_base=out,
            step_base={**other.step_base, **self.step_base},
            rank_best=best,
            nodes_seen=self.nodes_seen | other.nodes_seen,
        )
