"""The simulator: recorded OpenMetrics that promtool backfills, ground truth, live /metrics."""

from __future__ import annotations

import gzip
import json

import pytest

from fleetscope import contract as c
from fleetscope.cli import main
from fleetscope.simulate.live import LiveCluster
from fleetscope.simulate.record import simulate, write_scenario
from fleetscope.simulate.spec import FaultSpec, ScenarioSpec
from tests.support.prom import Prometheus, backfill_openmetrics, http_get, promtool


def _spec(**kw) -> ScenarioSpec:
    base = dict(name="t", nodes=2, duration_s=600, seed=3)
    base.update(kw)
    return ScenarioSpec(**base)


@pytest.mark.server
def test_recording_backfills_into_prometheus(tmp_path):
    spec = _spec(faults=[FaultSpec(kind="gpu_lost", at_s=300, node=1, gpu=2)])
    out, truth = write_scenario(spec, tmp_path / "rec.om")
    text = out.read_text()
    assert text.endswith("# EOF\n")
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown" in text
    assert "# TYPE training_steps counter" in text
    backfill_openmetrics(out, tmp_path / "data")
    with Prometheus(tmp_path / "p", data_dir=tmp_path / "data") as prom:
        t = spec.start + 240
        assert prom.value(f'count({c.GPU_UP}{{Hostname="ip-10-1-0-11"}})', time=t) == 8
        assert prom.value(f'{c.GPU_XID_ERRORS_TOTAL}{{xid="79"}}', time=spec.start + 400) == 1
        assert prom.value(f'{c.GPU_UP}{{Hostname="ip-10-1-0-11",gpu="2"}}', time=spec.start + 400) == 0
    gt = json.loads(truth.read_text())
    (fault,) = gt["faults"]
    assert fault["kind"] == "gpu_lost" and fault["node"] == "ip-10-1-0-11" and fault["gpu"] == "2"
    assert fault["onset"] == "2026-11-30T10:05:00Z"
    assert {e["kind"] for e in fault["expected"]} == {"failing_node", "mfu_drop"}


def test_deterministic_by_seed_and_gzip(tmp_path):
    a, _ = write_scenario(_spec(), tmp_path / "a.om.gz")
    b, _ = write_scenario(_spec(), tmp_path / "b.om")
    assert gzip.decompress(a.read_bytes()) == b.read_bytes()
    d, _ = write_scenario(_spec(seed=4), tmp_path / "d.om")
    assert d.read_bytes() != b.read_bytes()


def test_synchronous_training_model():
    """The slowest rank sets the pace: a throttled GPU raises everyone's step time; waiting ranks
    show less tensor activity than the straggler."""
    spec = _spec(
        nodes=2,
        duration_s=900,
        faults=[FaultSpec(kind="thermal_throttle", at_s=300, node=0, gpu=1, slowdown=0.3)],
    )
    rec = simulate(spec)
    steps = rec.series_of(c.TRAINING_STEPS)
    ((t, v),) = [tv for k, tv in steps.items() if k[1] == "0"]
    before = (v[t <= spec.start + 290][-1] - v[t <= spec.start + 60][-1]) / 230
    after = (v[-1] - v[t <= spec.start + 420][-1]) / (t[-1] - spec.start - 420)
    assert after < before * 0.85  # the whole job slowed down
    tensor = rec.series_of(c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE)
    late = {k[0] + "/" + k[5]: tv[1][-5:].mean() for k, tv in tensor.items()}
    slow = late["1/ip-10-1-0-10"]
    assert all(slow > x for k, x in late.items() if k != "1/ip-10-1-0-10")
    clock = rec.series_of(c.DCGM_FI_DEV_SM_CLOCK)
    ((_, cv),) = [tv for k, tv in clock.items() if k[0] == "1" and k[5] == "ip-10-1-0-10"]
    assert cv[-1] < 1700


@pytest.mark.server
def test_live_cluster_is_scraped_by_prometheus(tmp_path):
    spec = _spec(nodes=2, faults=[FaultSpec(kind="gpu_lost", at_s=20, node=1, gpu=3, stall_s=3600)])
    targets = tmp_path / "targets.json"
    with LiveCluster(spec, base_port=0, speed=5.0, targets_file=targets) as cluster:
        status, body = http_get(f"http://{cluster.targets[0]}/metrics")
        assert status == 200
        check = promtool("check", "metrics", input=body)
        # promtool parses it; its lint notes about dcgm-exporter's own names (camelCase labels,
        # counters without _total) are expected, a parsing error is not.
        assert b"parsing error" not in check.stderr and b"error while" not in check.stderr, check.stderr
        assert b"DCGM_FI_DEV_POWER_VIOLATION" in check.stderr  # it did lint the whole text
        assert b'fleetscope_collector_success{collector="gpu",Hostname="ip-10-1-0-10"} 1' in body
        sd = json.loads(targets.read_text())
        assert [g["targets"][0] for g in sd] == cluster.targets
        scrape = [{"job_name": "sim", "file_sd_configs": [{"files": [str(targets)]}]}]
        with Prometheus(tmp_path / "p", scrape_configs=scrape) as prom:
            prom.wait_until(f"{c.GPU_UP} == 0", timeout=40)
            assert prom.value(f'{c.GPU_XID_ERRORS_TOTAL}{{xid="79"}}') == 1
            prom.wait_until(f"{c.TRAINING_STEPS}", min_series=15, timeout=30)  # both targets scraped
            ranks = prom.query(f"{c.TRAINING_STEPS}")
            assert len(ranks) == 15  # the rank on the lost GPU is gone
            # --speed runs the scenario clock faster, but counters grow at real-time rates.
            rate = prom.wait_until(f"rate({c.TRAINING_STEP_SECONDS}[10s])", min_series=1)
            assert 0 <= float(rate[0]["value"][1]) <= 1.2


def test_cli_records_and_explains_flags(tmp_path, capsys):
    with pytest.raises(SystemExit):
        main(["simulate", "--help"])
    helptext = capsys.readouterr().out
    for flag in ("--live", "--base-port", "--targets-file", "--speed", "--fault-at", "--fault-node"):
        assert flag in helptext
    rc = main(
        [
            "simulate",
            "--nodes",
            "1",
            "--duration",
            "2m",
            "--fault",
            "pcie_width_drop",
            "--fault-node",
            "0",
            "--fault-at",
            "60",
            "-o",
            str(tmp_path / "x.om"),
        ]
    )
    assert rc == 0 and (tmp_path / "x.truth.json").exists()
    assert main(["simulate", "--nodes", "2", "--fault", "gpu_lost", "--fault-node", "5", "-o", "y.om"]) == 1
    assert "fault node 5 outside" in capsys.readouterr().err
