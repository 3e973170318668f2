"""The real pynvml ctypes path, through a small fake libnvidia-ml.so.1 built with gcc here.

The exporter runs as a real process with LD_LIBRARY_PATH pointing at the fake library, so pynvml
loads it with ``CDLL("libnvidia-ml.so.1")`` exactly as on a GPU node. ``record-gpu`` then records
the same fake machine, and the replay of that recording must expose the same series.
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope import contract as c
from tests.support.exposition import Key, series, value

SOURCE = Path(__file__).resolve().parent / "fake_nvml" / "fake_nvml.c"


@pytest.fixture(scope="module")
def fake_lib(tmp_path_factory: pytest.TempPathFactory) -> Path:
    gcc = shutil.which("gcc")
    assert gcc, "gcc is needed to build the fake NVML library"
    out = tmp_path_factory.mktemp("fake-nvml")
    subprocess.run(
        [
            gcc,
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Werror",
            "-o",
            str(out / "libnvidia-ml.so.1"),
            str(SOURCE),
        ],
        check=True,
        timeout=120,
    )
    return out


def _fleetscope(*args: str, lib: Path | None = None, **env: str) -> subprocess.CompletedProcess:
    full_env = {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": str(lib) if lib else "/nonexistent", **env}
    return subprocess.run(
        [sys.executable, "-m", "fleetscope", *args], capture_output=True, text=True, env=full_env, timeout=60
    )


def _series(text: str) -> dict[Key, float]:
    """The series of a scrape without the exporter's self-metrics (their timings differ per run)."""
    return {
        key: v
        for key, v in series(text).items()
        if not key[0].startswith(("fleetscope_collector_", "fleetscope_exporter_"))
    }


def _names(s: dict[Key, float]) -> set[str]:
    return {name for name, _labels in s}


ONCE = ["exporter", "--once", "--collector.disable-defaults", "--collector.gpu", "--node.name=fake-node"]


@pytest.mark.server
def test_exporter_reads_the_fake_library_through_pynvml(fake_lib: Path) -> None:
    res = _fleetscope(*ONCE, lib=fake_lib)
    assert res.returncode == 0, res.stderr
    s = _series(res.stdout)
    gpu0 = (
        ("DCGM_FI_DRIVER_VERSION", "590.48.01"), ("Hostname", "fake-node"),
        ("UUID", "GPU-fa6e0000-0000-0000-0000-000000000000"), ("device", "nvidia0"), ("gpu", "0"),
        ("modelName", "NVIDIA H100 80GB HBM3"), ("pci_bus_id", "00000000:18:00.0"),
    )  # fmt: skip
    assert s[(c.DCGM_FI_DEV_GPU_UTIL, gpu0)] == 100
    assert s[(c.DCGM_FI_DEV_MEM_COPY_UTIL, gpu0)] == 11
    assert s[(c.DCGM_FI_DEV_SM_CLOCK, gpu0)] == 1980
    assert s[(c.DCGM_FI_DEV_MEM_CLOCK, gpu0)] == 2619
    assert s[(c.DCGM_FI_DEV_GPU_TEMP, gpu0)] == 59
    assert s[(c.DCGM_FI_DEV_POWER_USAGE, gpu0)] == pytest.approx(629.45)
    assert s[(c.DCGM_FI_DEV_FB_USED, gpu0)] == 19818
    assert s[(c.DCGM_FI_DEV_FB_RESERVED, gpu0)] == 479
    assert s[(c.GPU_UP, gpu0)] == 1
    # nvmlDeviceGetFieldValues: two fields answered, decoded from the value union by type.
    assert s[(c.DCGM_FI_DEV_MEMORY_TEMP, gpu0)] == 55
    assert s[(c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER, gpu0)] == 9
    assert sum(1 for name, _labels in s if name == c.GPU_UP) == 2
    assert value(res.stdout, c.COLLECTOR_SUCCESS, collector="gpu") == 1
    # Functions the fake library lacks (FunctionNotFound) are absent, never 0.
    for missing in (
        c.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION,
        c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
        c.DCGM_FI_DEV_PCIE_LINK_GEN,
        c.DCGM_FI_PROF_SM_ACTIVE,
        c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,
        c.DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS,
    ):
        assert missing not in _names(s), missing


@pytest.mark.server
def test_gpu_is_lost_from_the_driver(fake_lib: Path) -> None:
    res = _fleetscope(*ONCE, lib=fake_lib, FAKE_NVML_LOST="1")
    assert res.returncode == 0, res.stderr
    s = _series(res.stdout)
    up = {dict(labels)["gpu"]: v for (name, labels), v in s.items() if name == c.GPU_UP}
    assert up == {"0": 1.0, "1": 0.0}
    assert not [name for name, labels in s if name != c.GPU_UP and ("gpu", "1") in labels]
    assert "GPU 1 (00000000:2A:00.0) reported lost" in res.stderr


@pytest.mark.server
def test_record_gpu_then_replay_gives_the_same_series(fake_lib: Path, tmp_path: Path) -> None:
    recording = tmp_path / "fake.json"
    res = _fleetscope("record-gpu", "--output", str(recording), "--gpm-interval", "0.01", lib=fake_lib)
    assert res.returncode == 0, res.stderr
    data = json.loads(recording.read_text())
    assert data["format"] == "fleetscope-nvml-replay/1" and len(data["devices"]) == 2
    assert data["devices"][0]["calls"]["nvmlDeviceGetTotalEnergyConsumption"] == {"error": 13}
    live = _series(_fleetscope(*ONCE, lib=fake_lib).stdout)
    replayed = _fleetscope(*ONCE, f"--collector.gpu.nvml-replay={recording}")
    assert replayed.returncode == 0, replayed.stderr
    assert _series(replayed.stdout) == live


def test_record_gpu_without_nvml_is_one_clear_error(tmp_path: Path) -> None:
    res = _fleetscope("record-gpu", "--output", str(tmp_path / "x.json"))
    assert res.returncode != 0
    assert res.stderr.strip().splitlines() == [
        "fleetscope: error: NVML could not start on this machine: NVML Shared Library Not Found"
    ]
    assert not (tmp_path / "x.json").exists()
