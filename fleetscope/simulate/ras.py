"""What NCCL RAS would answer about a simulated job, served as the ``nccl_ras`` collector serves it.

The simulator builds the report NCCL would send (:class:`~fleetscope.hang.ras_parse.RasReport`: the
job's world communicator, each rank's launched-collective count, the ranks RAS cannot reach) and
turns it into series with the collector's own builder
(:func:`fleetscope.exporters.ras_series.report_series`): one semantics for real and simulated RAS.
The node of the job's rank 0 serves them, as in a real cluster.

How the counts move (docs/hang.md#live):

* **running**: every completed step launches :data:`COLLECTIVES_PER_STEP` all-reduces (gradient
  buckets); at the moment of a query each rank is at the last one or one past it, so a small skew
  that moves (collectives outpace the query). In a pause (checkpoint, evaluation) no collective is
  launched and every count is equal;
* **hang, cause ``host``**: every rank launched the next collective except the stuck one, frozen:
  the ranks ahead wait for it (``not_launched``);
* **hang, cause ``xid79``**: the rank on the failed GPU died: RAS gets no data from it
  (unresponsive, considered dead 60 s after, as NCCL does), the others launched and wait (``dead``);
* **hang, causes ``efa`` and ``gpu_vanish``**: every rank launched the collective and none
  completes it: equal frozen counts, which RAS cannot tell apart from an idle job
  (``launched_not_completed``; the hardware series carry the evidence).
"""

from __future__ import annotations

import numpy as np

from fleetscope.hang.ras_parse import RasComm, RasMissing, RasRank, RasReport

#: All-reduces one step launches (gradient buckets of a data-parallel step).
COLLECTIVES_PER_STEP = 8
#: Seconds after which RAS declares a silent peer dead (NCCL ras.rst).
DEAD_AFTER_S = 60.0
#: The world communicator's hash in every simulated report.
WORLD_COMM = "0x5157ad0c0e11a001"


def job_report(
    ranks: list[tuple[str, int]],
    launched: int,
    state: str,
    rng: np.random.Generator,
    paused: bool = False,
    cause: str | None = None,
    culprit: int | None = None,
    hung_for: float = 0.0,
) -> RasReport:
    """The RAS report of one job whose rank ``r`` runs on ``ranks[r] = (host, gpu)``.

    ``launched``: all-reduces every rank launched in completed steps; ``state``: ``run`` or
    ``hang``; ``culprit``: the rank of the hang's GPU.
    """
    n = len(ranks)
    if state == "run":
        counts = np.full(n, launched) + (0 if paused else rng.integers(0, 2, n))
    else:
        counts = np.full(n, launched + 1)
        if cause == "host" and culprit is not None:
            counts[culprit] = launched
    comm = RasComm(hash=WORLD_COMM, secondary_hash="0x1:0x1", size=n)
    for r, (host, gpu) in enumerate(ranks):
        if state == "hang" and cause == "xid79" and r == culprit:
            dead = hung_for >= DEAD_AFTER_S
            comm.missing.append(
                RasMissing(r, host, 1000 + r, gpu, gpu, unresponsive=True, considered_dead=dead)
            )
            continue
        comm.ranks.append(RasRank(r, host, 1000 + r, gpu, gpu, counts={"AllReduce": int(counts[r])}))
    return RasReport(source="simulator", format="json", nccl_version="2.28.9", comms=[comm])
