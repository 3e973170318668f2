"""Failing nodes: each rule of the detector on its own, then how their events become findings.

Every rule test builds a two-node job (:class:`~tests.analyzers.detectors.frames_builder.Cluster`)
that shows its signal on one GPU, and one look-alike the rule must let pass.
"""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope import xids
from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.detectors.failing_node import (
    RULES,
    Event,
    FailingNodeDetector,
    Rule,
    double_bit_ecc,
    findings_of,
    first_per_cause,
    gpu_reported_lost,
    gpu_series_stopped,
    node_down,
    pcie_width_drop,
    ranks_stopped,
    recovery_action,
    row_remap_failed,
    rows_remapped_uncorrectable,
    xid_counted,
    xid_last_seen,
)
from fleetscope.analyzers.features import build_features
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.signals.window_signals import Signals
from tests.analyzers.detectors.frames_builder import Cluster


def signals(cl: Cluster) -> Signals:
    return Signals(build_features(cl.frames(), DEFAULT))


def events(rule: Rule, cl: Cluster) -> list[tuple[str, str, str, int, str]]:
    """(node, gpu, cause, grid index, evidence key) of every event of ``rule``."""
    return [(e.node, e.gpu, e.cause, e.at, e.key) for e in rule(signals(cl))]


def counter(cl: Cluster, jump_at: int, by: float = 1.0) -> np.ndarray:
    """A counter at 0 that steps up by ``by`` at grid index ``jump_at``."""
    return np.where(np.arange(len(cl.times)) >= jump_at, by, 0.0)


# ------------------------------------------------------------------------------------ the rules


def test_every_rule_is_listed_once_in_its_merge_order() -> None:
    assert (
        xid_counted,
        xid_last_seen,
        gpu_reported_lost,
        double_bit_ecc,
        rows_remapped_uncorrectable,
        row_remap_failed,
        recovery_action,
        pcie_width_drop,
        gpu_series_stopped,
        ranks_stopped,
        node_down,
    ) == RULES


def test_xid_counted_reports_drain_xids_with_their_finding_cause_and_ignores_application_ones() -> None:
    cl = Cluster()
    at = cl.tick(20)
    cl.gpu_series(c.GPU_XID_ERRORS_TOTAL, 1, 3, counter(cl, at), xid="79")
    cl.gpu_series(c.GPU_XID_ERRORS_TOTAL, 1, 5, counter(cl, at + 4), xid="74")
    cl.gpu_series(c.GPU_XID_ERRORS_TOTAL, 0, 2, counter(cl, at), xid="13")  # application: the job's fault
    assert events(xid_counted, cl) == [
        ("node-1", "3", "gpu_lost", at, "XID 79"),
        ("node-1", "5", "xid_74", at + 4, "XID 74"),
    ]


def test_xid_counted_takes_a_first_sample_above_zero_as_the_event() -> None:
    # The exporter started after the XID: the counter's first sample already holds it.
    cl = Cluster()
    cl.gpu_series(c.GPU_XID_ERRORS_TOTAL, 0, 1, np.full(len(cl.times), 2.0), xid="48")
    (event,) = xid_counted(signals(cl))
    assert (event.cause, event.at) == ("ecc_uncorrectable", 0)
    assert event.text.startswith("2 at ") and event.text.endswith("(drain class)")


def test_xid_last_seen_reads_dcgm_exporters_gauge() -> None:
    cl = Cluster()
    at = cl.tick(25)
    cl.gpu_series(c.DCGM_FI_DEV_XID_ERRORS, 0, 6, counter(cl, at, by=64.0))
    cl.gpu_series(c.DCGM_FI_DEV_XID_ERRORS, 1, 0, counter(cl, at, by=31.0))  # application
    assert events(xid_last_seen, cl) == [("node-0", "6", "row_remap_failure", at, "XID 64")]


def test_gpu_reported_lost_is_the_first_zero_of_gpu_up() -> None:
    cl = Cluster()
    cl.gpu(1, 2).up[cl.between(33)] = 0.0
    assert events(gpu_reported_lost, cl) == [("node-1", "2", "gpu_lost", cl.tick(33), c.GPU_UP)]


def test_double_bit_ecc_is_an_increase_of_the_volatile_counter() -> None:
    cl = Cluster()
    cl.gpu_series(c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, 0, 4, 5.0 + counter(cl, cl.tick(12), by=2.0))
    cl.gpu_series(c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, 0, 5, np.full(len(cl.times), 5.0))  # old errors, no new
    (event,) = double_bit_ecc(signals(cl))
    assert (event.node, event.gpu, event.cause, event.at) == ("node-0", "4", "ecc_uncorrectable", cl.tick(12))
    assert event.text == "+2 double-bit errors"


def test_rows_remapped_uncorrectable_is_an_increase_of_the_remapped_rows() -> None:
    cl = Cluster()
    cl.gpu_series(c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, 1, 7, counter(cl, cl.tick(40)))
    cl.gpu_series(c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS, 1, 6, np.zeros(len(cl.times)))
    assert events(rows_remapped_uncorrectable, cl) == [
        ("node-1", "7", "ecc_uncorrectable", cl.tick(40), c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS)
    ]


def test_row_remap_failed_is_the_failure_flag_set() -> None:
    cl = Cluster()
    cl.gpu_series(c.DCGM_FI_DEV_ROW_REMAP_FAILURE, 0, 0, counter(cl, cl.tick(8)))
    cl.gpu_series(c.DCGM_FI_DEV_ROW_REMAP_FAILURE, 0, 1, np.zeros(len(cl.times)))
    assert events(row_remap_failed, cl) == [
        ("node-0", "0", "row_remap_failure", cl.tick(8), c.DCGM_FI_DEV_ROW_REMAP_FAILURE)
    ]


def test_recovery_action_names_what_the_driver_asks_for() -> None:
    cl = Cluster()
    cl.gpu_series(c.DCGM_FI_DEV_GPU_RECOVERY_ACTION, 1, 1, counter(cl, cl.tick(50), by=2.0))
    cl.gpu_series(c.DCGM_FI_DEV_GPU_RECOVERY_ACTION, 1, 2, np.zeros(len(cl.times)))  # 0: none
    (event,) = recovery_action(signals(cl))
    assert (event.node, event.gpu, event.cause, event.at) == ("node-1", "1", "recovery_action", cl.tick(50))
    assert event.text == "2 (node_reboot)"


def test_pcie_width_drop_compares_with_the_widest_link_on_the_node() -> None:
    cl = Cluster()
    for n in range(cl.nodes):
        for g in range(cl.gpus):
            width = np.full(len(cl.times), 8.0 if n == 1 else 16.0)  # node-1 trains x8 everywhere: no drop
            if (n, g) == (0, 5):
                width[cl.between(22)] = 4.0
            cl.gpu_series(c.DCGM_FI_DEV_PCIE_LINK_WIDTH, n, g, width)
    (event,) = pcie_width_drop(signals(cl))
    assert (event.node, event.gpu, event.cause, event.at) == ("node-0", "5", "pcie_width_drop", cl.tick(22))
    assert event.text == "x16 -> x4"


def test_gpu_series_stopped_while_the_nodes_other_gpus_report() -> None:
    cl = Cluster()
    cl.gpu(0, 3).present[cl.between(44)] = False
    assert events(gpu_series_stopped, cl) == [("node-0", "3", "gpu_lost", cl.tick(44), "series")]


def test_gpu_series_stopped_is_silent_when_the_whole_node_goes_quiet() -> None:
    cl = Cluster()
    for g in range(cl.gpus):
        cl.gpu(0, g).present[cl.between(44)] = False
    assert events(gpu_series_stopped, cl) == []


def _ranks_vanish(util: float) -> Cluster:
    """From minute 30 the job stalls; node-1's ranks stop reporting then, node-0's keep reporting
    with their GPUs at ``util`` (a collective spinning at 100%, an idle stop at 0%)."""
    cl = Cluster()
    cl.stop_stepping(cl.between(30), util=util)
    for r in cl.ranks:
        if r.node == "node-1":
            r.present[cl.between(30)] = False
    return cl


def test_ranks_stopped_marks_the_ranks_that_vanished_first_in_a_stall() -> None:
    cl = _ranks_vanish(util=100.0)
    found = events(ranks_stopped, cl)
    assert found == [("node-1", str(g), "ranks_stopped", cl.tick(30), "training") for g in range(cl.gpus)]


def test_ranks_stopped_is_silent_when_the_others_gpus_idle() -> None:
    # A job the scheduler stops leaves its GPUs idle: the first ranks to end just exited first.
    assert events(ranks_stopped, _ranks_vanish(util=0.0)) == []


def _node_crash(busy: float) -> Cluster:
    """node-1's exporter and ranks go away at minute 35; node-0's ranks stall (GPUs at ``busy``)
    and are gone at minute 40 (the job aborted); node-0's exporter keeps reporting."""
    cl = Cluster()
    cl.stop_stepping(cl.between(35), util=busy)
    for r in cl.ranks:
        r.present[cl.between(35 if r.node == "node-1" else 40)] = False
    for g in range(cl.gpus):
        cl.gpu(1, g).present[cl.between(35)] = False
        cl.gpu(0, g).util[cl.between(40)] = 0.0
    return cl


def test_node_down_names_the_node_whose_exporter_left_before_its_job_went_down() -> None:
    cl = _node_crash(busy=100.0)
    assert events(node_down, cl) == [("node-1", "", "node_down", cl.tick(35), "series")]


def test_node_down_is_silent_when_the_survivors_went_idle_and_it_never_came_back() -> None:
    # A planned stop: the others' GPUs idle while they wait, and node-1 does not reboot.
    assert events(node_down, _node_crash(busy=0.0)) == []


# ------------------------------------------------------------------------------ merging the events


def _event(node: str, gpu: str, cause: str, at: int, key: str = "k") -> Event:
    return Event(node, gpu, cause, at, key, f"{cause} at {at}")


def test_first_per_cause_keeps_the_earliest_event_of_each_cause_family() -> None:
    merged = first_per_cause(
        [
            _event("n", "0", "xid_74", 9, "XID 74"),
            _event("n", "0", "xid_95", 5, "XID 95"),  # the same family, earlier: it wins
            _event("n", "0", "gpu_lost", 7, "a"),
            _event("n", "0", "gpu_lost", 7, "b"),  # a tie: the first one stays
        ]
    )
    assert {family: (e.cause, e.key) for family, e in merged[("n", "0")].items()} == {
        "xid": ("xid_95", "XID 95"),
        "gpu_lost": ("gpu_lost", "a"),
    }


def _features():
    return build_features(Cluster().frames(), DEFAULT)


def test_a_finding_takes_the_most_specific_cause_and_the_earliest_start() -> None:
    feat = _features()
    later_but_more_specific = _event("node-0", "3", "xid_74", 9, "XID 74")
    (f,) = findings_of([_event("node-0", "3", "recovery_action", 4, "action"), later_but_more_specific], feat)
    assert (f.cause, f.severity, f.start) == ("xid_74", "critical", float(feat.times[4]))
    assert f.action.startswith("drain the node after the job's next checkpoint")  # the xid family's
    assert f.evidence == {
        "action": "recovery_action at 4",
        "XID 74": "xid_74 at 9",
        "confirmed_at": f.evidence["confirmed_at"],
    }
    assert list(f.evidence) == ["action", "XID 74", "confirmed_at"]  # in time order
    assert (f.rank, f.job_id) == (3, "job-a")  # the rank that ran on the GPU


def test_a_narrow_pcie_link_alone_is_a_warning() -> None:
    (f,) = findings_of([_event("node-1", "2", "pcie_width_drop", 6)], _features())
    assert (f.cause, f.severity, f.node, f.gpu, f.rank) == ("pcie_width_drop", "warning", "node-1", "2", 10)


def test_one_node_with_several_broken_gpus_is_one_finding() -> None:
    feat = _features()
    found = findings_of(
        [_event("node-0", "1", "ranks_stopped", 3), _event("node-0", "4", "gpu_lost", 5, "series")], feat
    )
    assert [(f.node, f.gpu, f.cause) for f in found] == [("node-0", "4", "gpu_lost")]
    assert found[0].start == float(feat.times[3])
    assert found[0].evidence["also"] == "gpu 1: ranks_stopped (rank 1)"


@pytest.mark.parametrize("xid", [79, 48, 64, 74])
def test_the_detector_names_an_xid_by_xids_finding_cause(xid: int) -> None:
    cl = Cluster()
    cl.gpu_series(c.GPU_XID_ERRORS_TOTAL, 1, 3, counter(cl, cl.tick(20)), xid=str(xid))
    found: list[Finding] = FailingNodeDetector().detect(signals(cl), []).findings
    assert [(f.node, f.gpu, f.rank, f.job_id, f.cause) for f in found] == [
        ("node-1", "3", 11, "job-a", xids.finding_cause(xid))
    ]
