"""Issue 35: a job with a rank on every node (a health check, an NCCL test) no longer pulls the fleet
onto one shard. Two ``fleetscope serve --shard K/2`` and one unsharded, on a real Prometheus holding
two 4-node jobs with a fault each and a fleet-wide job on all 8 nodes: each shard fetches 4 nodes
(the older scheme gave one shard all 8), the fleet-wide job is owned by one, and the shards' node and
GPU findings add up to the unsharded service's, each fault found by exactly one shard; resized to 3
shards, they add up again."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.simulate.record import write_samples, write_scenario
from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec, node_name
from tests.service.support import ServeProcess
from tests.support.prom import Prometheus, backfill_openmetrics, wait_for

pytestmark = [pytest.mark.server]

PAST, AHEAD = 1500, 900  # the recording ends 15 minutes in the future: the window is full all test long
NODES = 8
FLAGS = ("--window", "900", "--step", "15", "--interval", "0.5")
FLEET_WIDE = "health-check"


def _fleet_wide_job(start: float, duration: float, step: float) -> dict:
    """One rank per node, on GPU 0 beside the node's own job, stepping evenly (no finding of its own)."""
    times = [start + i * step for i in range(int(duration // step) + 1)]
    n = len(times)
    out: dict[str, dict] = {}
    for node in range(NODES):
        labels = (("job_id", FLEET_WIDE), ("rank", str(node)), ("local_rank", "0"))
        labels += ((c.NODE_LABEL, node_name(node)), ("gpu", "0"))
        for metric, values in (
            (c.TRAINING_STEPS, [float(i) for i in range(n)]),
            (c.TRAINING_STEP_SECONDS, [step * i for i in range(n)]),
            (c.TRAINING_GLOBAL_STEP, [float(i) for i in range(n)]),
        ):
            out.setdefault(metric, {})[labels] = (times, values)
        out.setdefault(c.TRAINING_INFO, {})[(*labels, ("flops_convention", "palm"))] = (times, [1.0] * n)
    return out


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("fleet_wide")
    start = float(int(time.time() // 15) * 15 - PAST)
    spec = ScenarioSpec(
        name="realistic_fleet_wide",
        nodes=NODES,
        gpus_per_node=2,
        efa_per_node=1,
        duration_s=PAST + AHEAD,
        start=start,
        seed=7,
        jobs=[
            JobSpec("alpha", nodes=4, first_node=0, tensor_parallel=2),
            JobSpec("beta", nodes=4, first_node=4, tensor_parallel=2),
        ],
        faults=[
            FaultSpec(kind="pcie_width_drop", at_s=PAST - 600, node=1, gpu=1),
            FaultSpec(kind="pcie_width_drop", at_s=PAST - 500, node=6, gpu=1),
        ],
    )
    out, _ = write_scenario(spec, tmp / "s.om")
    backfill_openmetrics(out, tmp / "data")
    extra = tmp / "fleet_wide.om"
    write_samples(_fleet_wide_job(start, PAST + AHEAD, spec.step_s), extra)
    backfill_openmetrics(extra, tmp / "data")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p


def test_a_fleet_wide_job_is_split_and_its_nodes_verdicts_add_up(prom, tmp_path: Path) -> None:
    whole = ServeProcess(prom.url, *FLAGS, workdir=tmp_path)
    shards = [ServeProcess(prom.url, *FLAGS, "--shard", f"{k}/2", workdir=tmp_path) for k in range(2)]
    try:
        for s in (whole, *shards):
            s.start(timeout=60)
        seen: list = []

        def node_findings_add_up() -> bool:
            expected, parts = whole.finding_keys(), [s.finding_keys() for s in shards]
            if expected is None or any(p is None for p in parts):
                return False
            seen.append((expected, parts))
            mine = [k for p in parts for k in p or [] if k[1] is not None]
            return sorted(mine) == sorted(k for k in expected if k[1] is not None)

        wait_for(node_findings_add_up, timeout=120, what="the shards' node findings to add up")
        expected, parts = seen[-1]
        # Both faults (a narrowed PCIe link in alpha, one in beta) are found, each by exactly one shard.
        for node in (node_name(1), node_name(6)):
            assert [k[1] for k in expected if k[0] == "failing_node"].count(node) == 1, expected
            assert sum(1 for p in parts for k in p if k[0] == "failing_node" and k[1] == node) == 1, parts
        # Job-level findings (no node) are each reported once too.
        job_level = [k for p in parts for k in p if k[1] is None]
        assert len(job_level) == len(set(job_level))

        owned = [s.api("/api/v1/status")["shard"] for s in shards]
        # The older scheme: one unit of all 8 nodes (the fleet-wide job joins alpha and beta).
        assert sorted(o["nodes"] for o in owned) == [4, 4], owned
        assert all(o["fleet_nodes"] == NODES and o["bound"] == 5 and o["fleet_jobs"] == 3 for o in owned)
        assert sum(o["jobs"] for o in owned) == 3  # alpha, beta and the fleet-wide job: one owner each
        assert sum(o["split_jobs"] for o in owned) == 1  # the fleet-wide job, owned by one shard
        # This Prometheus has no fleetscope rules: discovery reads the identity series.
        assert {o["discovery"] for o in owned} == {"raw"}

        # Resize to 3 shards (a new StatefulSet size: every pod restarts with the new N): the
        # placement is computed afresh and the union converges to the same findings again.
        for s in shards:
            s.stop()
        shards[:] = [ServeProcess(prom.url, *FLAGS, "--shard", f"{k}/3", workdir=tmp_path) for k in range(3)]
        for s in shards:
            s.start(timeout=60)
        wait_for(node_findings_add_up, timeout=120, what="the 3 shards' node findings to add up")
        expected, parts = seen[-1]
        for node in (node_name(1), node_name(6)):
            assert sum(1 for p in parts for k in p if k[0] == "failing_node" and k[1] == node) == 1, parts
        owned = [s.api("/api/v1/status")["shard"] for s in shards]
        assert sum(o["nodes"] for o in owned) == NODES and max(o["nodes"] for o in owned) <= 4, owned
        assert sum(o["jobs"] for o in owned) == 3
    finally:
        for s in (whole, *shards):
            s.stop()
