"""A lost GPU, a hung NVML call, NVML missing, NotSupported caching: the scrape keeps working."""

from __future__ import annotations

import logging
import time
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.exporters.gpu.collector import GpuCollector
from fleetscope.exporters.gpu.session import NvmlUnavailable
from tests.exporters.gpu.conftest import NVML_FIXTURES, context, fixture_with_script, one, values
from tests.support import exposition
from tests.support.collected import samples
from tests.support.exporter import ExporterProcess


@pytest.mark.server
def test_gpu_lost_mid_run_through_the_exporter(tmp_path: Path) -> None:
    fixture = fixture_with_script(tmp_path, "h100x8.json", [{"from_scrape": 3, "device": 2, "lost": True}])
    flags = ["--collector.disable-defaults", "--collector.gpu", f"--collector.gpu.nvml-replay={fixture}"]
    with ExporterProcess(*flags, log_dir=tmp_path) as exporter:
        for _ in range(2):
            body = exporter.metrics()
            assert exposition.value(body, c.GPU_UP, gpu="2") == 1
            assert exposition.matching(body, c.DCGM_FI_DEV_SM_CLOCK, gpu="2")
        body = exporter.metrics()  # scrape 3: GPU 2 answers GpuIsLost
        lost = [(name, v) for name, labels, v in exposition.samples(body) if labels.get("gpu") == "2"]
        assert lost == [(c.GPU_UP, 0.0)], lost
        for gpu in "0134567":
            assert exposition.value(body, c.GPU_UP, gpu=gpu) == 1
            assert exposition.matching(body, c.DCGM_FI_DEV_POWER_USAGE, gpu=gpu)
        assert exposition.value(body, c.COLLECTOR_SUCCESS, collector="gpu") == 1
        assert "GPU 2 (00000000:3A:00.0) reported lost" in exporter.log()


def test_hung_nvml_call_does_not_hang_the_scrape(tmp_path: Path) -> None:
    fixture = fixture_with_script(tmp_path, "h100x8.json", [{"from_scrape": 2, "device": 1, "hang": True}])
    collector = GpuCollector(context(gpu_nvml_replay=str(fixture), gpu_nvml_timeout=1.0))
    try:
        first = samples(collector.collect())
        assert len(values(first, c.GPU_UP)) == 8 and set(values(first, c.GPU_UP)) == {1.0}
        start = time.monotonic()
        second = samples(collector.collect())  # GPU 1 hangs in the driver
        assert time.monotonic() - start < 3.0  # the deadline (1 s), not the hour the call hangs
        assert one(second, c.GPU_UP, gpu="1") == 0
        assert values(second, c.DCGM_FI_DEV_SM_CLOCK, gpu="1") == []
        assert one(second, c.GPU_UP, gpu="0") == 1 and one(second, c.DCGM_FI_DEV_SM_CLOCK, gpu="0") == 1980
        # While the abandoned call is still stuck, the GPU is not asked again: no new wait.
        start = time.monotonic()
        third = samples(collector.collect())
        assert time.monotonic() - start < 0.6  # well under the 1 s deadline
        assert one(third, c.GPU_UP, gpu="1") == 0 and one(third, c.GPU_UP, gpu="7") == 1
    finally:
        collector.close()


@pytest.mark.server
def test_nvml_missing_gives_success_0_and_one_clear_line(tmp_path: Path) -> None:
    env = {"LD_LIBRARY_PATH": str(tmp_path)}  # no libnvidia-ml.so.1 on this machine or there
    flags = ["--collector.disable-defaults", "--collector.gpu", "--collector.lustre"]
    with ExporterProcess(*flags, env=env, log_dir=tmp_path) as exporter:
        for _ in range(3):
            body = exporter.metrics()
        assert exposition.value(body, c.COLLECTOR_SUCCESS, collector="gpu") == 0
        assert 'fleetscope_collector_success{collector="lustre"}' in body  # the others keep working
        assert "DCGM_FI_DEV" not in body and "fleetscope_gpu_up" not in body
        log = exporter.log()
        assert (
            log.count("ERROR fleetscope.exporters.gpu: NVML is not available (libnvidia-ml.so.1 not found")
            == 1
        )
        assert "Traceback" not in log


def test_nvml_missing_in_process_raises_a_clear_error() -> None:
    collector = GpuCollector(context())
    with pytest.raises(NvmlUnavailable, match=r"libnvidia-ml\.so\.1 not found"):
        list(collector.collect())
    # Retried at most once a minute: the second scrape does not touch NVML again.
    with pytest.raises(NvmlUnavailable):
        list(collector.collect())


def test_bad_replay_fixture_is_reported_not_raised(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    collector = GpuCollector(context(gpu_nvml_replay=str(bad)))
    with caplog.at_level(logging.ERROR), pytest.raises(NvmlUnavailable, match="not valid JSON"):
        list(collector.collect())


def test_not_supported_is_asked_once() -> None:
    collector = GpuCollector(context(gpu_nvml_replay=str(NVML_FIXTURES / "h100-mig.json")))
    try:
        list(collector.collect())
        backend = collector.session.backend
        asked: list[str] = []
        fields_asked: list[list] = []
        original_lookup, original_fields = backend._lookup, backend.field_values

        def lookup(handle, key):
            asked.append(key)
            return original_lookup(handle, key)

        def field_values(handle, ids):
            fields_asked.append(list(ids))
            return original_fields(handle, ids)

        backend._lookup = lookup
        backend.field_values = field_values
        list(collector.collect())
        list(collector.collect())
    finally:
        collector.close()
    assert "nvmlDeviceGetUtilizationRates" not in asked  # NotSupported on a MIG-enabled GPU
    assert "nvmlDeviceGetRemappedRows" not in asked
    assert "nvmlDeviceGetClockInfo:1" in asked  # supported calls are still made
    flat = {f if isinstance(f, int) else f[0] for ids in fields_asked for f in ids}
    assert 38 not in flat and 138 not in flat  # NVLink counters: NotSupported in this capture
    assert 82 in flat


def test_missing_replay_file_is_one_clear_error(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    from fleetscope.exporters.registry import NodeCollector, build_collectors

    missing = tmp_path / "nope.json"
    with caplog.at_level(logging.ERROR):
        node = NodeCollector(build_collectors(["gpu"], context(gpu_nvml_replay=str(missing))))
    s = samples(node.collect())
    assert one(s, c.COLLECTOR_SUCCESS, collector="gpu") == 0
    assert f"--collector.gpu.nvml-replay {missing}: no such file" in caplog.text
