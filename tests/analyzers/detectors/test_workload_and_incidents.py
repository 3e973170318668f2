"""Issue 37's rules, one hand-built window each: simultaneity is structure (an MoE hot spot moving
between replicas is no straggler), a node that drops what it receives is the network culprit, one
incident is one finding with its link or memory as the cause, and strong evidence is confirmed early."""

from __future__ import annotations

import numpy as np

from fleetscope import contract as c
from fleetscope import hardware as hw
from fleetscope.analyzers.config import DEFAULT
from fleetscope.analyzers.core import analyze
from fleetscope.analyzers.findings import Finding
from fleetscope.times import parse_rfc3339
from tests.analyzers.detectors.frames_builder import CLOCK_MHZ, STEP, Cluster

THERMAL = hw.CLOCK_EVENT_HW_THERMAL | hw.CLOCK_EVENT_SW_THERMAL


def findings(cl: Cluster, kind: str = "straggler") -> list[Finding]:
    return [f for f in analyze(cl.frames()).findings if f.kind == kind]


def warnings_(fs: list[Finding]) -> list[tuple]:
    return sorted((f.node, f.gpu, f.cause) for f in fs if f.severity != "info")


def hot(cl: Cluster, nodes: list[int], gpu: int, m0: float, m1: float | None, factor: float = 1.18) -> None:
    """The GPU ``gpu`` of each of ``nodes`` computes ``factor`` longer from minute m0 to m1."""
    when = cl.between(m0, m1)
    for n in nodes:
        r = cl.rank(n * cl.gpus + gpu)
        for ph in ("forward", "backward"):
            r.phases[ph][when] *= factor


def moving_hot_spot(cl: Cluster) -> None:
    """An MoE job's hot expert: local GPU 3 of three replicas, then GPU 6 of two, then GPU 1 of two."""
    hot(cl, [0, 2, 4], 3, 10, 18)
    hot(cl, [1, 3], 6, 18, 26)
    hot(cl, [0, 5], 1, 26, 34)


# ---------------------------------------------------------------- simultaneity is structure
def test_a_hot_spot_moving_between_replicas_is_workload_not_stragglers():
    cl = Cluster(nodes=6, seed=11)
    moving_hot_spot(cl)
    fs = findings(cl)
    assert warnings_(fs) == []
    (info,) = fs
    assert (info.severity, info.cause, info.node) == ("info", "workload_imbalance", None)
    assert info.job_id == "job-a"
    assert "local GPU 3 on 3 replicas" in info.evidence["imbalance"]


def test_the_same_slowness_one_replica_at_a_time_is_stragglers():
    # One GPU at a time, each on its own node: specific to a GPU, so each is a straggler.
    cl = Cluster(nodes=6, seed=11)
    hot(cl, [2], 3, 10, 18)
    hot(cl, [4], 6, 26, 34)
    assert warnings_(findings(cl)) == [("node-2", "3", "unknown"), ("node-4", "6", "unknown")]


def test_two_gpus_of_one_role_slow_together_to_the_end_are_still_found():
    # Simultaneous but never moving or fading: two faults must not hide each other.
    cl = Cluster(nodes=6, seed=11)
    hot(cl, [1, 4], 5, 10, None)
    assert warnings_(findings(cl)) == [("node-1", "5", "unknown"), ("node-4", "5", "unknown")]


def test_simultaneous_slowness_with_a_hardware_sign_is_a_fault():
    cl = Cluster(nodes=6, seed=11)
    moving_hot_spot(cl)
    for n in (0, 2, 4):  # the first hot spot's GPUs throttle: thermal bits, clock down
        g = cl.gpu(n, 3)
        g.reasons[cl.between(10, 18)] = THERMAL
        g.clock[cl.between(10, 18)] = 0.85 * CLOCK_MHZ
    fs = findings(cl)
    assert warnings_(fs) == [(f"node-{n}", "3", "thermal_throttle") for n in (0, 2, 4)]
    assert [f.cause for f in fs if f.severity == "info"] == ["workload_imbalance"]


def _expert_layout(cl: Cluster) -> None:
    """Two GPUs per expert-parallel rank: GPUs 0-1 hold rank 0, 2-3 rank 1, 4-5 rank 2, 6-7 rank 3."""
    for r in cl.ranks:
        cl.layout[(r.job, r.rank)] = 0
        cl.positions[(r.job, r.rank)] = {
            c.DATA_PARALLEL_RANK_LABEL: str(r.rank),
            c.EXPERT_PARALLEL_RANK_LABEL: str((int(r.gpu) // 2) % 4),
        }


def _expert_hot_spot(cl: Cluster) -> None:
    hot(cl, [0], 4, 10, 18)  # expert-parallel rank 2 on node 0 (GPU 4) and node 3 (GPU 5)
    hot(cl, [3], 5, 10, 18)
    hot(cl, [1], 0, 18, 26)  # then rank 0 on node 1 (GPU 0) and node 2 (GPU 1)
    hot(cl, [2], 1, 18, 26)


def test_the_expert_parallel_rank_of_the_layout_names_the_role():
    cl = Cluster(nodes=6, seed=12)
    _expert_layout(cl)
    _expert_hot_spot(cl)
    fs = findings(cl)
    assert warnings_(fs) == []
    assert "expert-parallel rank 2" in fs[0].evidence["imbalance"]
    # Without the layout the same GPUs are different local GPUs: no shared role, four stragglers.
    bare = Cluster(nodes=6, seed=12)
    _expert_hot_spot(bare)
    assert len(warnings_(findings(bare))) == 4


def test_an_mfu_drop_of_a_moving_hot_spot_is_the_jobs_work_not_the_network():
    cl = Cluster(nodes=6, seed=11)
    moving_hot_spot(cl)
    for r in cl.ranks:  # the whole job steps 10% slower while a replica waits for its hot expert
        r.steps[cl.between(10, 34)] *= 0.9
        r.phases["backward"][cl.between(10, 34)] *= 1.0
    drops = findings(cl, "mfu_drop")
    assert drops and all((f.severity, f.cause) == ("info", "workload_imbalance") for f in drops)


# ---------------------------------------------------------------- receive-side drops
def _efa(share: float, resent: bool = True, everywhere: bool = False) -> Cluster:
    """8 nodes, one EFA device each; from minute 10 node 5's device drops ``share`` of what it
    receives (every node's with ``everywhere``); with ``resent`` the other nodes retransmit the
    drops, each its 1/7 part. Every rank's communication (backward) time grows 5%."""
    cl = Cluster(nodes=8, seed=21, efa=True)
    when = cl.between(10)
    for e in cl.efa_list:
        e.rx_pkts = e.tx_pkts.copy()
        e.rx_drops = np.zeros(len(cl.times))
    droppers = range(8) if everywhere else [5]
    for n in droppers:
        drops = share * cl.efa_list[n].rx_pkts[when]
        cl.efa_list[n].rx_drops[when] = drops
        if resent:
            for m in range(8):
                if m != n:
                    cl.efa_list[m].retrans_pkts[when] += drops / 7
    for r in cl.ranks:
        r.phases["backward"][when] *= 1.05
    return cl


def test_a_node_dropping_what_it_receives_is_the_culprit_though_its_senders_retransmit():
    cl = _efa(0.03)
    ratio = (0.03 * 2e6 / 7 + 10) / 2e6  # each sender: 0.43%, under its 0.5% threshold
    assert ratio < DEFAULT.retrans_ratio
    fs = findings(cl)
    assert warnings_(fs) == [("node-5", None, "network")]
    ev = fs[0].evidence
    assert "rdmap16s27 rx_drops/rx_pkts" in ev and "senders' retrans_pkts/tx_pkts" in ev
    assert "step_seconds" in ev
    # A hardware sign: confirmed within two grid steps of its start.
    assert parse_rfc3339(ev["confirmed_at"]) - fs[0].start <= 2 * STEP
    (drop,) = findings(cl, "mfu_drop") or [None]
    assert drop is None or drop.cause == "network"


def test_receive_drops_nobody_resent_or_everyone_shares_name_no_receiver():
    assert warnings_(findings(_efa(0.03, resent=False))) == []
    # Every node drops alike: no receiver stands out (each sender's own 0.6% retransmits still
    # count on the send side, as before).
    fs = findings(_efa(0.006, everywhere=True))
    assert fs and not any("rx_drops" in k for f in fs for k in f.evidence)


def test_mild_retransmits_everywhere_without_drops_name_no_node():
    cl = _efa(0.0)
    for e in cl.efa_list:
        e.retrans_pkts[cl.between(10)] += 0.003 * e.tx_pkts[cl.between(10)]
    assert warnings_(findings(cl)) == []


# ---------------------------------------------------------------- one incident, its cause
def _bursts(cl: Cluster, on_min: float, off_min: float, factor: float, replays: float = 0.0) -> None:
    """Rank 10 (node 1, GPU 2) computes ``factor`` longer in bursts from minute 10 to 50; its GPU's
    PCIe replay counter grows by ``replays`` a grid step during them."""
    minute = np.arange(len(cl.times)) * STEP / 60.0
    on = (minute >= 10) & (minute < 50) & ((minute - 10) % (on_min + off_min) < on_min)
    r = cl.rank(10)
    for ph in ("forward", "backward"):
        r.phases[ph][on] *= factor
    for g in cl.gpu_list:
        g.replays = np.where((np.random.default_rng(1).random(len(cl.times)) < 0.01), 1.0, 0.0)
    cl.gpu(1, 2).replays = np.where(on, replays, 0.0)


def test_a_flaky_gpu_is_one_finding_with_its_pcie_link_as_the_cause():
    cl = Cluster(nodes=4, seed=5)
    _bursts(cl, 3, 4, 1.12, replays=10.0)  # 40 replays a minute while slow, over DCGM's 8
    fs = findings(cl)
    assert warnings_(fs) == [("node-1", "2", "pcie")]
    assert c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER in fs[0].evidence


def test_episodes_of_one_gpu_are_one_incident_with_its_pattern():
    cl = Cluster(nodes=4, seed=5)
    _bursts(cl, 5, 5, 1.15)
    fs = findings(cl)
    assert warnings_(fs) == [("node-1", "2", "unknown")]
    assert "episodes over" in fs[0].evidence["episodes"]


def test_replays_every_gpu_shares_are_the_platforms_not_a_cause():
    cl = Cluster(nodes=4, seed=5)
    _bursts(cl, 5, 5, 1.15)
    for g in cl.gpu_list:
        g.replays = np.full(len(cl.times), 10.0)
    assert warnings_(findings(cl)) == [("node-1", "2", "unknown")]


def _mild_with_sbe(sbe: float) -> Cluster:
    # Rank 6's GPU 5% slower from minute 20 with no clock sign; its corrected ECC counter grows.
    cl = Cluster(seed=7)
    for ph in ("forward", "backward"):
        cl.rank(6).phases[ph][cl.between(20)] *= 1.05
    for g in cl.gpu_list:
        g.sbe = np.zeros(len(cl.times))
    cl.gpu(0, 6).sbe[cl.between(20)] = sbe
    return cl


def test_corrected_ecc_errors_on_one_gpu_are_its_cause():
    assert warnings_(findings(_mild_with_sbe(5.0))) == [("node-0", "6", "ecc_correctable")]  # 20/min
    assert warnings_(findings(_mild_with_sbe(0.0))) == []  # 5% without evidence: jitter's size


# ---------------------------------------------------------------- earlier for what is clear
def _slow(factor: float, bits: int = 0) -> Cluster:
    cl = Cluster(seed=9)
    when = cl.between(20)
    for ph in ("forward", "backward"):
        cl.rank(6).phases[ph][when] *= factor
    if bits:
        cl.gpu(0, 6).reasons[when] = bits
        cl.gpu(0, 6).clock[when] = CLOCK_MHZ / factor
    return cl


def _delay(f: Finding) -> float:
    return (parse_rfc3339(f.evidence["confirmed_at"]) or 0.0) - f.start


def test_strong_evidence_is_confirmed_early_and_a_small_slowdown_after_its_persistence():
    # A hardware sign: two scrape windows; a large slowdown: one rate window (its median's).
    (throttle,) = findings(_slow(1.15, THERMAL))
    assert _delay(throttle) <= 2 * STEP
    (large,) = findings(_slow(1.35))
    assert _delay(large) <= DEFAULT.rate_window_s
    (small,) = findings(_slow(1.10))
    assert _delay(small) >= DEFAULT.persistence_s - STEP
