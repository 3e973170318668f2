"""record-gpu's recorder, driven by a replayed machine: recording a replay gives the replay back."""

from __future__ import annotations

import json

import pynvml
import pytest

from fleetscope.exporters.gpu.nvml import ReplayNvml
from fleetscope.exporters.gpu.record_cli import Recorder, plain
from tests.exporters.gpu.conftest import NVML_FIXTURES


@pytest.mark.parametrize("fixture", ["h100.json", "h200-mig.json", "l40s.json"])
def test_recording_a_replay_reproduces_it(fixture: str) -> None:
    data = json.loads((NVML_FIXTURES / fixture).read_text())
    backend = ReplayNvml(data, fixture)
    recorder = Recorder(backend, pynvml, timeout=5)
    for index, expected in enumerate(data["devices"]):
        got = recorder.device(index, interval=0)
        for key, answer in expected["calls"].items():
            if key == "nvmlDeviceGetTotalEnergyConsumption":
                assert got["calls"][key] >= answer  # grows with the replay's wall time
                continue
            assert got["calls"][key] == answer, key
        for key, answer in expected["fields"].items():
            if key in ("138", "139"):
                assert got["fields"][key] >= answer
                continue
            assert got["fields"][key] == answer, key
        assert got.get("gpm") == expected.get("gpm")
        assert len(got.get("mig_devices", [])) == len(expected.get("mig_devices", []))
        for mig_got, mig_expected in zip(
            got.get("mig_devices", []), expected.get("mig_devices", []), strict=True
        ):
            assert mig_got["calls"] == mig_expected["calls"]
            assert mig_got.get("gpm") == mig_expected.get("gpm")


def test_a_hung_call_is_recorded_as_lost() -> None:
    data = json.loads((NVML_FIXTURES / "h100.json").read_text())
    data["script"] = [{"from_scrape": 0, "device": 0, "hang": True}]
    recorder = Recorder(ReplayNvml(data), pynvml, timeout=0.2)
    handle = recorder.b.nvmlDeviceGetHandleByIndex(0)
    assert recorder.ask(recorder.b.nvmlDeviceGetName, handle) == {"error": 15, "note": "timed out"}
    # The worker is stuck: later calls are not queued behind it, they are recorded as lost too.
    assert recorder.ask(recorder.b.nvmlDeviceGetUUID, handle)["error"] == 15


def test_plain_turns_ctypes_structures_into_json() -> None:
    mem = pynvml.c_nvmlMemory_v2_t()
    mem.version, mem.total, mem.used = pynvml.nvmlMemory_v2, 80 << 30, 1 << 30
    assert plain(mem) == {
        "version": pynvml.nvmlMemory_v2,
        "total": 80 << 30,
        "reserved": 0,
        "free": 0,
        "used": 1 << 30,
    }
    assert plain((1, b"GPU-x", [2.5])) == [1, "GPU-x", [2.5]]
