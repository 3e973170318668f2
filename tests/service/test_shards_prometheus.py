"""Three ``fleetscope serve --shard K/3`` processes and one unsharded, on a real Prometheus holding
a simulated recording (three jobs, two job-less nodes, three faults): the union of the shards'
findings is the unsharded service's, with none twice (the shards' discovery reads the recording
rule, backfilled as Prometheus evaluates it); a shard killed (SIGKILL, its cycles running
back to back) and started again owns the same share and reports the same findings."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import FaultSpec, JobSpec, ScenarioSpec
from tests.service.support import ServeProcess
from tests.support.prom import Prometheus, backfill_openmetrics, backfill_rules, discovery_rule_file, wait_for

pytestmark = [pytest.mark.server]

PAST, AHEAD = 1500, 900  # the recording ends 15 minutes in the future: the window is full all test long
SHARDS = 3
FLAGS = ("--window", "900", "--step", "15", "--interval", "0.5")


@pytest.fixture(scope="module")
def prom(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("shards")
    start = float(int(time.time() // 15) * 15 - PAST)
    spec = ScenarioSpec(
        name="realistic_shards",
        nodes=8,
        gpus_per_node=2,
        efa_per_node=1,
        duration_s=PAST + AHEAD,
        start=start,
        seed=5,
        jobs=[
            JobSpec("alpha", nodes=3, first_node=0, tensor_parallel=2),
            JobSpec("beta", nodes=2, first_node=3, tensor_parallel=2),
            JobSpec("gamma", nodes=1, first_node=5, tensor_parallel=2),
        ],
        faults=[
            FaultSpec(kind="pcie_width_drop", at_s=PAST - 600, node=1, gpu=1),
            FaultSpec(kind="thermal_throttle", at_s=PAST - 700, node=3, gpu=0, slowdown=0.3),
            FaultSpec(kind="pcie_width_drop", at_s=PAST - 500, node=7, gpu=0),
        ],
    )
    out, _ = write_scenario(spec, tmp / "s.om")
    backfill_openmetrics(out, tmp / "data")
    # The discovery's recording rule, as a deployment's Prometheus evaluates it from the generated
    # rules (backfilled data is never evaluated by rules on its own).
    with Prometheus(tmp / "raw", data_dir=tmp / "data") as raw:
        backfill_rules(raw.url, discovery_rule_file(tmp), start, start + PAST + AHEAD, tmp / "data", "15s")
    with Prometheus(tmp / "p", data_dir=tmp / "data") as p:
        yield p


def _union_matches(whole: ServeProcess, shards: list[ServeProcess]) -> tuple[list, list[list]] | None:
    expected = whole.finding_keys()
    parts = [s.finding_keys() for s in shards]
    if expected is None or any(p is None for p in parts):
        return None
    union = [k for p in parts for k in p or []]
    return (expected, parts) if sorted(union) == sorted(expected) else None


def test_three_shards_find_what_one_process_finds(prom, tmp_path: Path) -> None:
    whole = ServeProcess(prom.url, *FLAGS, workdir=tmp_path)
    shards = [
        ServeProcess(prom.url, *FLAGS, "--shard", f"{k}/{SHARDS}", workdir=tmp_path) for k in range(SHARDS)
    ]
    try:
        for s in (whole, *shards):
            s.start(timeout=60)
        found: list = []
        wait_for(
            lambda: found.append(_union_matches(whole, shards)) or found[-1],
            timeout=120,
            what="the shards' findings to add up to the unsharded service's",
        )
        expected, parts = found[-1]
        # A straggler in job beta, a narrowed PCIe link in job alpha and one on a job-less node. Beta's
        # MFU drop, which the straggler explains, may come with them (which window the cycle sees
        # decides); the healthy job gamma has none.
        kinds = {k[0] for k in expected}
        assert {"failing_node", "straggler"} <= kinds <= {"failing_node", "straggler", "mfu_drop"}, expected
        assert all(k[4] == "beta" and k[5] == "straggler" for k in expected if k[0] == "mfu_drop"), expected
        assert len(expected) >= 3, expected
        assert len(expected) == len(set(expected))  # and so no finding is in two shards
        assert sum(1 for p in parts if p) >= 2, parts  # the findings are spread over the shards

        statuses = [s.api("/api/v1/status") for s in shards]
        assert whole.api("/api/v1/status")["shard"] is None
        owned = [st["shard"] for st in statuses]
        assert [o["index"] for o in owned] == [0, 1, 2] and all(o["count"] == SHARDS for o in owned)
        assert sum(o["nodes"] for o in owned) == owned[0]["fleet_nodes"] == 8
        assert sum(o["jobs"] for o in owned) == owned[0]["fleet_jobs"] == 3
        assert sum(st["nodes"] for st in statuses) == whole.api("/api/v1/status")["nodes"] == 8
        assert owned[1]["text"].startswith("shard 1 of 3, owning ")
        assert {o["discovery"] for o in owned} == {"recorded"}  # the rule, not the identity series

        # Kill one shard outright in the middle of its back-to-back cycles, start it again.
        victim = 1
        before = sorted(parts[victim])
        shards[victim].proc.kill()
        shards[victim].proc.wait()
        shards[victim].start(timeout=60)
        again: list = []
        wait_for(
            lambda: again.append(shards[victim].finding_keys()) or again[-1] is not None,
            timeout=90,
            what="the restarted shard's first verdicts",
        )
        # The hardware findings come back as they were; an MFU drop follows the sliding window
        # (it may appear or go as the window moves), and the union below still has to hold.
        assert sorted(k for k in again[-1] if k[0] != "mfu_drop") == [k for k in before if k[0] != "mfu_drop"]
        assert shards[victim].api("/api/v1/status")["shard"] == owned[victim]
        found.clear()
        wait_for(
            lambda: found.append(_union_matches(whole, shards)) or found[-1],
            timeout=60,
            what="the union after the restart",
        )
        hardware = sorted(k for k in expected if k[0] != "mfu_drop")
        assert sorted(k for p in found[-1][1] for k in p if k[0] != "mfu_drop") == hardware
    finally:
        for s in (whole, *shards):
            s.stop()


def test_discovery_slides_and_finds_what_a_fresh_one_finds(prom) -> None:
    from fleetscope.analyzers.core import LOADED
    from fleetscope.service.shard import Discovery
    from fleetscope.window.prometheus import PrometheusAccess
    from fleetscope.window.sources import PrometheusSource

    source = PrometheusSource(PrometheusAccess(prom.url), LOADED)
    held = Discovery()
    now = time.time()
    for i in range(4):
        end = now - 200 + 45 * i
        rows = held.rows(source, end - 900, end, 15.0)
        assert held.read == "recorded"
        for fresh in (Discovery(), Discovery(recorded=False)):  # the rule's rows are the identity series'
            assert sorted(map(sorted, (r.items() for r in rows))) == sorted(
                map(sorted, (r.items() for r in fresh.rows(source, end - 900, end, 15.0)))
            )
        assert len({r["Hostname"] for r in rows}) == 8
        assert {r.get("job_id") for r in rows} == {None, "alpha", "beta", "gamma"}
        assert held.until is not None and held.until >= end
    # Far past the recording: nothing is left (a row leaves with its last sample).
    assert held.rows(source, now + 3 * 3600, now + 3 * 3600 + 900, 15.0) == []
