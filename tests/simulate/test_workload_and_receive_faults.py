"""Issue 37's simulated scenarios: an MoE job's moving hot expert (a look-alike), a node that drops
what it receives (its senders retransmit), shared-fabric congestion (a look-alike), a flaky GPU with
its PCIe replays, and random slow steps (a look-alike), each read back from the recording."""

from __future__ import annotations

import numpy as np
import pytest

from fleetscope import contract as c
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.families import cluster_model
from fleetscope.simulate.record import ground_truth, simulate
from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec, node_name


def _spec(**kw) -> ScenarioSpec:
    base = dict(name="t", family="realistic", nodes=4, duration_s=900, seed=11, scrape_miss=0.0, gc_every_s=0)
    base.update(kw)
    return ScenarioSpec(**base)


def _series(rec, metric: str, **match: str) -> dict[tuple[str, ...], tuple[np.ndarray, np.ndarray]]:
    """(Hostname, gpu or device) -> (times, values) of ``metric``'s series matching ``match``."""
    labels = rec.labels[metric]
    out = {}
    for key, tv in rec.series_of(metric).items():
        d = dict(zip(labels, key, strict=True))
        if all(d.get(k) == v for k, v in match.items()):
            out[(d[c.NODE_LABEL], d.get("gpu", d.get("device", "")))] = tv
    return out


def _increase(tv: tuple[np.ndarray, np.ndarray], t0: float, t1: float) -> float:
    ts, v = tv
    return float(np.interp(t1, ts, v) - np.interp(t0, ts, v))


def _moe_spec(**fault) -> ScenarioSpec:
    f = dict(kind="moe_imbalance", at_s=0, node=0, gpu=3, slowdown=0.3, move_every_s=300, spread=0.5)
    f.update(fault)
    return _spec(tensor_parallel=1, expert_parallel=8, emit_layout=True, faults=[FaultSpec(**f)])


def test_an_moe_job_reports_its_expert_parallel_rank():
    """Megatron carves expert groups from consecutive data-parallel ranks: with 8 per group the
    expert-parallel rank is the data-parallel rank mod 8 (here a node's local GPU)."""
    rec = simulate(_moe_spec())
    labels = rec.labels[c.TRAINING_INFO]
    seen = {}
    for key in rec.series_of(c.TRAINING_INFO):
        d = dict(zip(labels, key, strict=True))
        dp, ep = int(d[c.DATA_PARALLEL_RANK_LABEL]), int(d[c.EXPERT_PARALLEL_RANK_LABEL])
        seen[int(d["rank"])] = (dp, ep, d["gpu"])
    assert len(seen) == 32
    assert all(ep == dp % 8 and str(ep) == gpu for dp, ep, gpu in seen.values())
    dense = simulate(_spec(emit_layout=True, duration_s=60))  # a dense model names no expert rank
    info = c.TRAINING_INFO
    keys = [dict(zip(dense.labels[info], k, strict=True)) for k in dense.series_of(info)]
    assert keys and all(c.EXPERT_PARALLEL_RANK_LABEL not in k for k in keys)


def test_the_hot_expert_is_slow_on_several_replicas_at_once_and_moves_on_without_a_hardware_sign():
    spec = _moe_spec()
    rec = simulate(spec)
    fwd = _series(rec, c.TRAINING_PHASE_SECONDS, phase="forward")
    t = spec.start

    def slow_in(a: float, b: float) -> set[tuple[str, str]]:
        inc = {k: _increase(tv, t + a, t + b) for k, tv in fwd.items()}
        med = float(np.median(list(inc.values())))
        return {k for k, v in inc.items() if v > 1.05 * med}

    first, second = slow_in(60, 290), slow_in(360, 590)
    # Half the expert groups (2 of 4 nodes) route to the hot expert: its GPU on those nodes.
    assert len(first) == 2 and {g for _, g in first} == {"3"}
    assert len(second) == 2 and {g for _, g in second} == {"6"}  # three experts along
    reasons = _series(rec, c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS)
    replays = _series(rec, c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER)
    for key in first | second:
        _ts, v = reasons[key]
        assert not (v.astype(int) & 0xE8).any()  # no thermal, power-brake or HW-slowdown bit
        assert _increase(replays[key], t, t + spec.duration_s) <= 5
    truth = ground_truth(spec)
    assert truth["faults"][0]["expected"] == []  # the job's work, not a fault


def test_the_true_account_books_the_imbalance_as_the_jobs_work_and_a_fault_beside_it_as_slowdown():
    """An imbalance of experts is the job's own work (productive time); a throttle during it costs
    the time over the same imbalanced step without the throttle, not over the balanced job's."""
    alone = simulate(_moe_spec(slowdown=0.2, at_s=120)).goodput["4711"]
    assert alone["slowdown"] == 0
    throttle = FaultSpec(kind="thermal_throttle", at_s=450, node=1, gpu=0, slowdown=0.35)
    spec = _moe_spec(slowdown=0.2, at_s=120)
    spec.faults.append(throttle)
    both = simulate(spec).goodput["4711"]
    plain = simulate(_spec(tensor_parallel=1, expert_parallel=8, faults=[throttle])).goodput["4711"]
    # The throttle's 35% on one GPU is partly hidden behind the hot expert's 20% on the same steps.
    assert 0 < both["slowdown"] < 0.8 * plain["slowdown"]


def test_an_moe_imbalance_needs_experts():
    with pytest.raises(FleetscopeError, match="expert_parallel"):
        _spec(faults=[FaultSpec(kind="moe_imbalance", node=0)])
    with pytest.raises(FleetscopeError, match="expert_parallel"):
        _spec(jobs=[JobSpec(tensor_parallel=1, expert_parallel=1)], faults=[FaultSpec(kind="moe_imbalance")])
    with pytest.raises(FleetscopeError, match="one_in"):
        FaultSpec(kind="flaky_gpu", one_in=0)
    with pytest.raises(FleetscopeError, match="spread"):
        FaultSpec(kind="moe_imbalance", spread=0)


def test_receive_drops_concentrate_on_the_receiver_while_each_sender_retransmits_under_the_threshold():
    spec = _spec(
        nodes=8,
        duration_s=1200,
        faults=[FaultSpec(kind="efa_rx_drops", at_s=300, node=5, device=1, slowdown=0.08, packet_share=0.03)],
    )
    rec = simulate(spec)
    t0, t1 = spec.start + 400, spec.start + 1100
    drops = {k: _increase(tv, t0, t1) for k, tv in _series(rec, c.EFA_RX_DROPS).items()}
    rx = {k: _increase(tv, t0, t1) for k, tv in _series(rec, c.EFA_RX_PKTS).items()}
    tx = {k: _increase(tv, t0, t1) for k, tv in _series(rec, c.EFA_TX_PKTS).items()}
    re = {k: _increase(tv, t0, t1) for k, tv in _series(rec, c.EFA_RETRANS_PKTS).items()}
    bad = (node_name(5), "rdmap95s0")
    assert drops[bad] == pytest.approx(0.03 * rx[bad], rel=0.05)
    assert all(v == 0 for k, v in drops.items() if k != bad)
    senders = [k for k in re if k[1] == bad[1] and k != bad]
    ratios = [re[k] / tx[k] for k in senders]
    # Each of the 7 senders retransmits 1/7 of the drops: 0.43%, under the 0.5% retransmit threshold.
    assert all(0.003 < r < 0.005 for r in ratios)
    assert sum(re[k] for k in senders) == pytest.approx(drops[bad], rel=0.05)
    assert re[bad] / tx[bad] < 1e-4  # the receiver itself sends fine
    steps = next(iter(_series(rec, c.TRAINING_STEPS).values()))
    before = _increase(steps, spec.start + 100, spec.start + 290)
    during = _increase(steps, spec.start + 900, spec.start + 1090)
    assert during < 0.97 * before  # every collective waits for the retransmits
    exp = ground_truth(spec)["faults"][0]["expected"]
    assert exp[0] == {"kind": "straggler", "cause": "network", "node": node_name(5), "gpu": None,
                      "node_level": True, "single": True}  # fmt: skip


def test_congestion_retransmits_everywhere_a_little_and_drops_nothing():
    fault = FaultSpec(kind="efa_congestion", at_s=300, node=0, slowdown=0.03, packet_share=0.003)
    spec = _spec(nodes=4, faults=[fault])
    rec = simulate(spec)
    t0, t1 = spec.start + 400, spec.start + 880
    assert all(_increase(tv, t0, t1) == 0 for tv in _series(rec, c.EFA_RX_DROPS).values())
    tx = _series(rec, c.EFA_TX_PKTS)
    for k, tv in _series(rec, c.EFA_RETRANS_PKTS).items():
        assert _increase(tv, t0, t1) / _increase(tx[k], t0, t1) == pytest.approx(0.003, rel=0.05)
    assert [e["optional"] for e in ground_truth(spec)["faults"][0]["expected"]] == [True]


def test_a_flaky_gpu_logs_pcie_replays_on_its_slow_steps_alone():
    spec = _spec(faults=[FaultSpec(kind="flaky_gpu", at_s=0, node=2, gpu=5, slowdown=0.6, one_in=8)])
    rec = simulate(spec)
    t0, t1 = spec.start + 60, spec.start + 880
    replays = {k: _increase(tv, t0, t1) for k, tv in _series(rec, c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER).items()}
    steps = _increase(next(iter(_series(rec, c.TRAINING_STEPS).values())), t0, t1)
    flaky = replays.pop((node_name(2), "5"))
    # About 30 replays per slow step, one step in 8 (a binomial draw: between 1 in 16 and 1 in 4);
    # a healthy link logs one now and then.
    assert 30 * steps / 16 < flaky < 30 * steps / 4
    assert max(replays.values()) <= 3
    twin = _spec(faults=[FaultSpec(kind="random_slow_steps", at_s=0, node=0, slowdown=0.6, one_in=8)])
    rec2 = simulate(twin)
    assert all(_increase(tv, t0, t1) <= 3 for tv in _series(rec2, c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER).values())
    steps2 = _increase(next(iter(_series(rec2, c.TRAINING_STEPS).values())), t0, t1)
    healthy = simulate(_spec())
    steps0 = _increase(next(iter(_series(healthy, c.TRAINING_STEPS).values())), t0, t1)
    # 1 step in 8 costs 60% more: both lose about 7% of their steps, whoever is slow.
    for s in (steps, steps2):
        assert 0.88 * steps0 < s < 0.97 * steps0
    exp = ground_truth(spec)["faults"][0]["expected"][0]
    assert (exp["kind"], exp["cause"], exp["gpu"], exp.get("single")) == ("straggler", "pcie", "5", True)
    assert ground_truth(twin)["faults"][0]["expected"] == []


def test_scenarios_without_these_kinds_draw_no_extra_random_numbers():
    """Recordings of every earlier scenario stay as they were: the new kinds draw their random
    numbers from a generator of their own, which the others never touch."""
    spec = _spec(faults=[FaultSpec(kind="thermal_throttle", at_s=100, node=1, gpu=2)])
    model = cluster_model(spec)
    state = model.step_rng.bit_generator.state
    for _ in range(40):
        model.tick(spec.step_s)
    assert model.step_rng.bit_generator.state == state
