"""What one chunk of a streamed window hands the next (:mod:`fleetscope.analyzers.stream`)."""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass
class Carry:
    """What one chunk hands the next: the per-job levels the detectors cannot see again."""

    #: job -> (unit, best level): MFU or tokens/s of the job's best long segment so far.
    mfu_base: dict[str, tuple[str, float]] = field(default_factory=dict)
    #: job -> the goodput account's baseline step time (seconds), as the first chunk that had one measured it.
    step_base: dict[str, float] = field(default_factory=dict)
    #: (job_id, rank, Hostname, gpu, view) -> the rank's best (lowest) slowness level in that view so
    #: far: a rank slow through a whole chunk has still changed against its own earlier level.
    rank_best: dict[tuple[str, ...], float] = field(default_factory=dict)

    def merge(self, other: Carry) -> Carry:
        """This carry updated by the next chunk's: the best MFU level, the first baseline step."""
        out = dict(self.mfu_base)
        for job, (unit, level) in other.mfu_base.items():
            old = out.get(job)
            if old is None or old[0] != unit or level > old[1]:
                out[job] = (unit, level)
        best = dict(self.rank_best)
        for key, level in other.rank_best.items():
            best[key] = min(level, best.get(key, level))
        return Carry(mfu_base=out, step_base={**other.step_base, **self.step_base}, rank_best=best)
