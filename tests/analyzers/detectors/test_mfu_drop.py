"""MFU drops measure lost throughput while training: a pause is not a drop, a slower job is."""

from __future__ import annotations

from fleetscope.analyzers.core import analyze
from tests.analyzers.detectors.frames_builder import Cluster


def mfu_drops(cl: Cluster) -> list:
    return [f for f in analyze(cl.frames()).findings if f.kind == "mfu_drop"]


def test_a_three_minute_pause_in_steady_training_is_no_mfu_drop():
    cl = Cluster()
    cl.stop_stepping(cl.between(30, 33), util=0.0)
    report = analyze(cl.frames())
    assert [f for f in report.findings if f.kind == "mfu_drop"] == []
    # The job's throughput is still measured (tokens/s, no FLOPs here) and is its steady level.
    expected = 16 * 5 * 8192 / 15.0
    assert report.jobs["job-a"].tokens_per_second == round(expected, 1)


def test_a_sustained_throughput_loss_is_an_mfu_drop():
    # The control: the same job losing 20% of its steps for 15 minutes is a drop.
    cl = Cluster()
    slow = cl.between(30, 45)
    for r in cl.ranks:
        r.steps[slow] = 4.0
        for v in r.phases.values():
            v[slow] *= 0.8
    found = mfu_drops(cl)
    assert len(found) == 1, found
    assert cl.times[cl.tick(29)] <= found[0].start <= cl.times[cl.tick(33)]
    assert 0.75 <= found[0].score <= 0.85
