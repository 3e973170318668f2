"""Hangs: every rank stops stepping with its GPUs spinning; the root cause when the hardware spoke first."""

from __future__ import annotations

import numpy as np

from fleetscope.analyzers.core import analyze
from tests.analyzers.detectors.frames_builder import Cluster


def _stopped(util: float, eval_s: float = 0.0, efa: bool = False) -> Cluster:
    """Every rank of the job completes no step from minute 30 to 35 and still reports."""
    cl = Cluster(efa=efa)
    cl.stop_stepping(cl.between(30, 35), util=util, eval_s=eval_s)
    return cl


def test_all_ranks_stop_with_gpus_busy_is_one_job_hang():
    cl = _stopped(util=100.0)
    report = analyze(cl.frames())
    assert [f.kind for f in report.findings] == ["job_hang"]
    f = report.findings[0]
    assert (f.node, f.gpu, f.job_id, f.severity, f.cause) == (None, None, "job-a", "critical", "hang")
    assert f.start == cl.times[cl.tick(30)]
    assert f.end is not None  # it resumed at minute 35


def test_efa_timeouts_on_one_node_before_the_hang_make_it_the_failing_node():
    cl = _stopped(util=100.0, efa=True)
    cl.efa_list[1].retrans_timeout_events[cl.tick(29)] = 3.0  # node-1, one minute before
    report = analyze(cl.frames())
    kinds = [f.kind for f in report.findings]
    assert "job_hang" not in kinds
    failing = [f for f in report.findings if f.kind == "failing_node"]
    assert [(f.node, f.cause, f.severity) for f in failing] == [("node-1", "network", "critical")]
    assert "efa" in failing[0].evidence and "no_progress" in failing[0].evidence
    assert report.nodes["node-1"].state == "failing"
    assert report.nodes["node-0"].state == "healthy"


def test_stop_with_gpus_half_busy_is_an_eval_pause_not_a_hang():
    report = analyze(_stopped(util=40.0).frames())
    assert report.findings == []


def test_stop_that_counts_eval_phase_time_is_not_a_hang():
    # The GPUs are as busy as in a hang, but the job says it is evaluating.
    report = analyze(_stopped(util=100.0, eval_s=15.0).frames())
    assert report.findings == []


def _with_tensor(during: float) -> Cluster:
    """As :func:`_stopped` at 100% utilisation, with tensor activity 0.45 while training."""
    cl = _stopped(util=100.0)
    stop = cl.between(30, 36)
    for g in cl.gpu_list:
        g.tensor = np.full(len(cl.times), 0.45)
        g.tensor[stop] = during
    return cl


def test_spinning_gpus_with_idle_tensor_pipes_are_a_hang():
    # NCCL's kernels poll: utilisation 100%, tensor pipes idle.
    kinds = [f.kind for f in analyze(_with_tensor(0.01).frames()).findings]
    assert kinds == ["job_hang"]


def test_a_stop_with_the_tensor_pipes_still_busy_is_a_compute_pause_not_a_hang():
    # An evaluation with big batches the job does not report: utilisation 100% *and* real math.
    assert analyze(_with_tensor(0.40).frames()).findings == []
