"""The checkpoint advisor: the interval between checkpoints that minimises the expected loss.

A job that checkpoints every ``tau`` seconds of work, each save costing ``C`` seconds, on hardware
that fails on average every ``M`` seconds (its nodes' mean time between failures), loses to
checkpoints ``C / (tau + C)`` of its time and, per failure, about half an interval of recomputed
work. Young (1974, CACM 17(9)) showed the first-order optimum ``tau = sqrt(2 C M)``; Daly (2006,
FGCS 22(3)) added the higher-order correction used here,
``tau = sqrt(2 C M) (1 + sqrt(C / 2M) / 3 + (C / 2M) / 9) - C`` for ``C < 2M`` (else ``M``).

``M`` comes from the fleet: the window's infrastructure failures per node-hour, times the job's
nodes (``goodput.infra_failures``: each critical ``failing_node`` finding, one per broken node, and
each restart after a ``job_hang``; restarts without an infrastructure cause -- user code, OOM, a
NaN loss, an operator -- are no draw from the hardware's failure rate and are not counted). A window without a
failure says little about the rate, so the advisor then
uses a prior of one failure per 250 node-days (``failure_prior_node_days`` in the analyzer config),
between the published rates of large GPU training fleets: Llama 3's 419 unexpected interruptions
in 54 days on 16,384 H100 GPUs (one per 264 node-days) and StepFun's fault trace, 584 node faults
on 400 nodes in 348 days (one per 238 node-days; docs/design.md#failure-rates). The advice says
when it rests on the prior.
"""

from __future__ import annotations

import math

from fleetscope.analyzers.report import CheckpointAdvice

#: Node-days per failure without a failure in the window (the analyzer config's default).
PRIOR_NODE_DAYS = 250.0
PRIOR_FAILURES_PER_NODE_HOUR = 1.0 / (PRIOR_NODE_DAYS * 24.0)


def young(save_s: float, mtbf_s: float) -> float:
    """Young's first-order optimum interval of work between checkpoints."""
    return math.sqrt(2.0 * save_s * mtbf_s)


def daly(save_s: float, mtbf_s: float) -> float:
    """Daly's higher-order optimum interval of work between checkpoints."""
    if save_s >= 2.0 * mtbf_s:
        return mtbf_s
    x = save_s / (2.0 * mtbf_s)
    return math.sqrt(2.0 * save_s * mtbf_s) * (1.0 + math.sqrt(x) / 3.0 + x / 9.0) - save_s


def waste(work_s: float, save_s: float, mtbf_s: float) -> float:
    """Expected share of time lost with ``work_s`` of work between saves: the saves, plus half an
    interval (work and save) recomputed per failure."""
    period = work_s + save_s
    return save_s / period + (period / 2.0) / mtbf_s


def advise(
    save_s: float,
    saves: int,
    nodes: int,
    gpus: float,
    failures: int,
    node_hours: float,
    current_s: float | None,
    prior_node_days: float = PRIOR_NODE_DAYS,
) -> CheckpointAdvice:
    """The advice for a job of ``nodes`` nodes (``gpus`` GPUs) whose saves take ``save_s`` and that
    checkpoints every ``current_s`` (wall time between saves; None: unknown); without a failure
    in the window, one per ``prior_node_days``."""
    prior = failures == 0 or node_hours <= 0
    rate = 1.0 / (prior_node_days * 24.0) if prior else failures / node_hours
    mtbf = 3600.0 / (rate * max(nodes, 1))
    y, d = young(save_s, mtbf), daly(save_s, mtbf)
    rec_work = max(d, save_s)
    adv = CheckpointAdvice(
        save_s=round(save_s, 2),
        saves=saves,
        nodes=nodes,
        failures=failures,
        node_hours=round(node_hours, 2),
        failures_per_node_hour=rate,
        prior=prior,
        mtbf_s=round(mtbf, 1),
        young_s=round(y + save_s, 1),
        daly_s=round(d + save_s, 1),
        recommended_s=round(rec_work + save_s, 1),
        waste_recommended=round(waste(rec_work, save_s, mtbf), 5),
    )
    if current_s is not None and current_s > save_s:
        adv.current_s = round(current_s, 1)
        adv.waste_current = round(waste(current_s - save_s, save_s, mtbf), 5)
        adv.gain_gpu_hours_per_day = round((adv.waste_current - adv.waste_recommended) * gpus * 24.0, 2)
    return adv
