"""A node whose series vanish while its job keeps stepping is a monitoring gap, never a failing node."""

from __future__ import annotations

from fleetscope.analyzers.core import analyze
from tests.analyzers.detectors.frames_builder import Cluster


def test_node_unscraped_for_six_minutes_is_one_info_monitoring_gap():
    cl = Cluster()
    cl.absent(1, cl.between(30, 36))
    report = analyze(cl.frames())
    gaps = [f for f in report.findings if f.kind == "monitoring_gap"]
    assert [(f.node, f.severity, f.cause) for f in gaps] == [("node-1", "info", "series_absent")]
    assert gaps[0].start == cl.times[cl.tick(30)]
    assert gaps[0].end == cl.times[cl.tick(36)]
    assert [f for f in report.findings if f.kind == "failing_node"] == []
    assert report.nodes["node-1"].state == "healthy"
    assert set(report.nodes["node-1"].gpus.values()) == {"healthy"}


def test_node_unscraped_for_six_minutes_is_no_mfu_drop():
    # The job kept training at full speed on every node (the node's counters, once scraped again,
    # hold every step of the gap): its throughput did not drop, only our view of it.
    cl = Cluster()
    cl.absent(1, cl.between(30, 36))
    report = analyze(cl.frames())
    assert [f for f in report.findings if f.kind == "mfu_drop"] == []
