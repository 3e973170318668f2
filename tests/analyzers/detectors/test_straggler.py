"""The straggler rules, one hand-built window each: who is slow, where it shows, and what is not slowness."""

from __future__ import annotations

import numpy as np

from fleetscope import hardware as hw
from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.core import analyze
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.slowness import slowness
from tests.analyzers.detectors.frames_builder import CLOCK_MHZ, Cluster

THERMAL = hw.CLOCK_EVENT_HW_THERMAL | hw.CLOCK_EVENT_SW_THERMAL


def stragglers(cl: Cluster) -> list[Finding]:
    return [f for f in analyze(cl.frames()).findings if f.kind == "straggler"]


def test_rank_slower_in_forward_and_backward_is_found():
    # Synced timers: the slow GPU's own forward+backward time is 15% longer from minute 20.
    cl = Cluster()
    slow = cl.between(20)
    r = cl.rank(5)
    for ph in ("forward", "backward"):
        r.phases[ph][slow] *= 1.15
    found = stragglers(cl)
    assert [(f.node, f.gpu, f.rank, f.job_id) for f in found] == [("node-0", "5", 5, "job-a")]
    # It began with the slowness (within one rate window), and is still open.
    assert cl.times[cl.tick(20)] <= found[0].start <= cl.times[cl.tick(22)]
    assert found[0].end is None
    assert 1.1 <= found[0].score <= 1.2


def test_slowness_seen_only_as_less_backward_wait_is_found():
    # Unsynced timers with DDP's all-reduce in backward hooks: the peers wait for rank 9 inside
    # their backward, so their backward grows by the wait; rank 9 computes 15% longer but waits
    # for nobody. Its forward+backward time looks *faster* than its peers'.
    cl = Cluster()
    slow = cl.between(20)
    wait = 0.15 * 2.8 * cl.steps_per_tick  # seconds per grid step
    for r in cl.ranks:
        if r.rank != 9:
            r.phases["backward"][slow] += wait
    report = analyze(cl.frames())
    sl = slowness(report.features)
    after = cl.between(22)
    assert np.nanmax(sl.compute[after, 9]) < 1.0, "the compute view must not be what finds it"
    assert np.nanmax(sl.forward[after, 9]) < DEFAULT.straggler_ratio
    found = [f for f in report.findings if f.kind == "straggler"]
    assert [(f.node, f.gpu, f.rank) for f in found] == [("node-1", "1", 9)]
    assert "less_wait" in found[0].evidence["slowness_views"]


def _pipeline(with_layout: bool) -> Cluster:
    # Four pipeline stages of four ranks; the last stage computes the loss and is 25% slower
    # throughout. Synchronous: every rank completes the same number of steps.
    cl = Cluster(seed=3)
    for r in cl.ranks:
        stage = r.rank // 4
        if with_layout:
            cl.layout[(r.job, r.rank)] = stage
        if stage == 3:
            for ph in ("forward", "backward"):
                r.phases[ph] *= 1.25
    return cl


def test_slower_last_pipeline_stage_is_no_straggler_with_layout_labels():
    cl = _pipeline(with_layout=True)
    assert stragglers(cl) == []
    sl = slowness(analyze(cl.frames()).features)
    assert len(set(sl.groups.tolist())) == 4 and not sl.structure_inferred


def test_slower_last_pipeline_stage_is_no_straggler_without_layout_labels():
    cl = _pipeline(with_layout=False)
    assert stragglers(cl) == []
    sl = slowness(analyze(cl.frames()).features)
    assert sl.structure_inferred
    # The last stage is its own peer group.
    assert set(sl.groups[12:].tolist()).isdisjoint(sl.groups[:12].tolist())


def test_one_gc_pause_is_no_straggler():
    # One grid step in which rank 3 spent 12 s more in forward (a garbage-collection pause).
    cl = Cluster()
    cl.rank(3).phases["forward"][cl.tick(30)] += 12.0
    assert stragglers(cl) == []
    # Not even its score moves: the per-step median over the rate window ignores one grid step.
    score = slowness(analyze(cl.frames()).features).score()[:, 3]
    assert np.nanmax(score) < DEFAULT.straggler_ratio


def test_gpu_throttling_on_and_off_gives_one_finding_with_its_duty_cycle():
    # From minute 10, GPU 2 of node 1 throttles 2 min in every 5: thermal clock-event bits, a clock
    # 30% down and its rank's compute 20% longer while it lasts.
    cl = Cluster()
    minute = np.arange(len(cl.times)) * 15 / 60.0
    on = (minute >= 10) & ((minute - 10) % 5 < 2)
    g = cl.gpu(1, 2)
    g.reasons[on] = THERMAL
    g.clock[on] = 0.7 * CLOCK_MHZ
    r = cl.rank(10)
    for ph in ("forward", "backward"):
        r.phases[ph][on] *= 1.2
    found = stragglers(cl)
    assert len(found) == 1, found
    f = found[0]
    assert (f.node, f.gpu, f.cause) == ("node-1", "2", "thermal_throttle")
    assert "duty_cycle" in f.evidence


def _mild(bits: int) -> Cluster:
    # Rank 6's GPU 4% slower from minute 20 (its clock 4% down), with or without clock-event bits.
    cl = Cluster(seed=7)
    slow = cl.between(20)
    g = cl.gpu(0, 6)
    g.clock[slow] = 0.96 * CLOCK_MHZ
    g.reasons[slow] = bits
    r = cl.rank(6)
    for ph in ("forward", "backward"):
        r.phases[ph][slow] *= 1.04
    return cl


def test_four_percent_slower_with_thermal_bits_is_found():
    found = stragglers(_mild(THERMAL))
    assert [(f.node, f.gpu, f.rank, f.cause) for f in found] == [("node-0", "6", 6, "thermal_throttle")]


def test_four_percent_slower_without_hardware_evidence_is_not_found():
    assert stragglers(_mild(0)) == []


def test_half_of_a_nodes_gpus_slow_at_once_is_one_node_finding():
    cl = Cluster()
    slow = cl.between(30)
    for k in (8, 9, 10, 11):  # GPUs 0-3 of node-1
        for ph in ("forward", "backward"):
            cl.rank(k).phases[ph][slow] *= 1.15
    found = stragglers(cl)
    assert len(found) == 1, found
    f = found[0]
    assert (f.node, f.gpu, f.rank) == ("node-1", None, None)
    assert f.evidence["gpus"] == "0, 1, 2, 3"
    assert f.evidence["ranks"] == "8, 9, 10, 11"


def test_a_slow_rank_of_a_job_with_steps_longer_than_the_grid_step_is_found():
    # A 40 s step on a 15 s grid (most grid steps complete no step); rank 3 is 15% slower in forward.
    cl = Cluster()
    pattern = [1.0, 0.0, 0.0, 1.0, 0.0, 0.0, 0.0, 1.0]
    for r in cl.ranks:
        per = np.array([pattern[i % len(pattern)] for i in range(len(r.steps))])
        r.steps[:] = per
        for name, v in r.phases.items():
            v[:] = per * 40.0 * (0.6 if name == "backward" else 0.4 / 3)
    slow = cl.between(30)
    cl.rank(3).phases["forward"][slow] *= 1.3
    found = [f for f in analyze(cl.frames()).findings if f.kind == "straggler"]
    assert [(f.rank, f.node) for f in found] == [(3, cl.rank(3).node)], found
