"""A real Prometheus scrapes the exporter on the recorded 8xH100 fixture; the contract's GPU series
come back through its HTTP API with the names, labels and values dashboards expect."""

from __future__ import annotations

from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.exporters.gpu.collector import GPU_SERIES
from tests.exporters.gpu.conftest import NVML_FIXTURES
from tests.support.exporter import ExporterProcess
from tests.support.prom import Prometheus

pytestmark = [pytest.mark.server]

KMSG = NVML_FIXTURES / "kmsg-xid79.txt"


def test_prometheus_scrapes_the_recorded_8xh100(tmp_path: Path) -> None:
    flags = [
        "--collector.disable-defaults",
        "--collector.gpu",
        "--collector.xid",
        f"--collector.gpu.nvml-replay={NVML_FIXTURES / 'h100x8.json'}",
        f"--collector.xid.kmsg-path={KMSG}",
        "--node.name=p5-node-1",
    ]
    with ExporterProcess(*flags, log_dir=tmp_path) as exporter:
        scrape = [{"job_name": "fleetscope", "static_configs": [{"targets": [exporter.url.split("//")[1]]}]}]
        with Prometheus(tmp_path / "prom", scrape_configs=scrape, scrape_interval="1s") as prom:
            # Rates (GPM, NVLink bandwidth) need a second scrape; wait for them.
            prom.wait_until(c.DCGM_FI_PROF_SM_ACTIVE, timeout=30, min_series=7)
            names = {r["metric"]["__name__"] for r in prom.query('{__name__=~"DCGM_.*|fleetscope_gpu_.*"}')}
            expected = {str(m) for m in GPU_SERIES} | {
                c.GPU_UP,
                c.GPU_PEAK_FLOPS,
                c.GPU_XID_ERRORS_TOTAL,
                c.DCGM_FI_DEV_XID_ERRORS,
            }
            assert expected <= names, sorted(expected - names)
            # Counters keep dcgm-exporter's names in the TSDB (no _total appended).
            assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in names
            assert prom.value(f"count({c.DCGM_FI_DEV_SM_CLOCK})") == 7  # GPU 1 fell off the bus
            one = prom.query(f'{c.DCGM_FI_DEV_POWER_USAGE}{{gpu="3"}}')[0]
            labels = one["metric"]
            assert labels["Hostname"] == "p5-node-1" and labels["modelName"] == "NVIDIA H100 80GB HBM3"
            assert labels["device"] == "nvidia3" and labels["pci_bus_id"] == "00000000:5D:00.0"
            assert labels["DCGM_FI_DRIVER_VERSION"] == "590.48.01"
            assert float(one["value"][1]) == 629.45
            # The XID 79 line of the kmsg fixture: counted, and GPU 1 is down while 7 answer.
            assert prom.value(f'{c.GPU_XID_ERRORS_TOTAL}{{xid="79"}}') == 1
            assert prom.value(f'{c.DCGM_FI_DEV_XID_ERRORS}{{gpu="1"}}') == 79
            assert prom.value(f"sum({c.GPU_UP})") == 7
            assert prom.value(f'{c.GPU_UP}{{gpu="1"}}') == 0
            # MFU denominators (one per answering GPU): the peak FLOPs join on Hostname and gpu.
            assert prom.value(f'sum({c.GPU_PEAK_FLOPS}{{dtype="bf16"}})') == 7 * 0.9895e15
            # The energy counter grows with the captured power draw (rate() works on it).
            prom.wait_until(
                f"rate({c.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION}[5s]) > 0", timeout=30, min_series=7
            )
