"""The gpu collector on NVML answers built from real nvidia-smi captures: values, units, labels,
and the absent-not-zero rule."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest
from prometheus_client import CollectorRegistry, generate_latest

from fleetscope import contract as c
from fleetscope.exporters.gpu.collector import GPU_SERIES, GpuCollector
from tests.exporters.gpu.conftest import CAPTURES, NVML_FIXTURES, capture_csv, capture_q, context, one, values
from tests.support.collected import samples
from tests.support.prom import promtool

H100 = "linux-x86_64__nvidia-h100-80gb-hbm3__590.48.01.txt"
H200 = "linux-x86_64__nvidia-h200__590.48.01.txt"
H100_MIG = "linux-x86_64__nvidia-h100-mig__590.48.01.txt"
H200_MIG = "linux-x86_64__nvidia-h200-mig__590.48.01.txt"
L40S = "linux-x86_64__nvidia-l40s__595.80.txt"


def scrape(fixture: str, times: int = 2, **opts: object):
    """Collect ``times`` times (GPM and NVLink rates need two samples); return the last scrape."""
    collector = GpuCollector(context(gpu_nvml_replay=str(NVML_FIXTURES / fixture), **opts))
    try:
        result = None
        for _ in range(times):
            result = list(collector.collect())
        return result
    finally:
        collector.close()


def q_number(q: str, label: str, occurrence: int = 0) -> float:
    """The number after ``label :`` in an nvidia-smi -q section (the n-th such line)."""
    found = re.findall(r"^\s*" + re.escape(label) + r"\s+:\s+(-?[0-9.]+)", q, re.M)
    assert len(found) > occurrence, f"{label!r} not in the capture"
    return float(found[occurrence])


@pytest.mark.parametrize("fixture,capture", [("h100.json", H100), ("h200.json", H200)])
def test_series_match_the_capture(fixture: str, capture: str) -> None:
    s = samples(scrape(fixture))
    q, csv = capture_q(capture), capture_csv(capture)
    assert one(s, c.DCGM_FI_DEV_POWER_USAGE) == pytest.approx(q_number(q, "Average Power Draw"))
    assert one(s, c.DCGM_FI_DEV_SM_CLOCK) == q_number(q, "SM", occurrence=0)
    assert one(s, c.DCGM_FI_DEV_MEM_CLOCK) == float(csv["clocks.current.memory"].split()[0])
    assert one(s, c.DCGM_FI_DEV_GPU_TEMP) == q_number(q, "GPU Current Temp")
    assert one(s, c.DCGM_FI_DEV_MEMORY_TEMP) == q_number(q, "Memory Current Temp")
    assert one(s, c.DCGM_FI_DEV_GPU_UTIL) == q_number(q, "GPU")
    assert one(s, c.DCGM_FI_DEV_FB_USED) == q_number(q, "Used")
    assert one(s, c.DCGM_FI_DEV_FB_FREE) == q_number(q, "Free")
    assert one(s, c.DCGM_FI_DEV_FB_RESERVED) == q_number(q, "Reserved")
    assert one(s, c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER) == q_number(q, "Replays Since Reset")
    assert one(s, c.DCGM_FI_DEV_PCIE_LINK_GEN) == float(csv["pcie.link.gen.current"])
    assert one(s, c.DCGM_FI_DEV_PCIE_LINK_WIDTH) == float(csv["pcie.link.width.current"])
    # Remapped rows, as -q and the CSV report them.
    assert one(s, c.DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS) == float(csv["remapped_rows.correctable"])
    assert one(s, c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS) == float(csv["remapped_rows.uncorrectable"])
    assert one(s, c.DCGM_FI_DEV_ROW_REMAP_PENDING) == (1.0 if csv["remapped_rows.pending"] == "Yes" else 0.0)
    assert one(s, c.DCGM_FI_DEV_ROW_REMAP_FAILURE) == (1.0 if csv["remapped_rows.failure"] == "Yes" else 0.0)
    # Clock-event reasons: the bitmask nvidia-smi prints as clocks_event_reasons.active.
    assert one(s, c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS) == int(csv["clocks_event_reasons.active"], 16)
    # Violation counters: nvidia-smi prints microseconds, DCGM's unit is ns.
    assert one(s, c.DCGM_FI_DEV_POWER_VIOLATION) == q_number(q, "SW Power Capping") * 1000
    assert one(s, c.DCGM_FI_DEV_GPU_RECOVERY_ACTION) == 0  # "GPU Recovery Action : None"
    assert one(s, c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL) == q_number(q, "DRAM Uncorrectable")
    # Identity labels.
    labels = dict(next(lbl for (n, lbl) in s if n == c.GPU_UP))
    assert labels["modelName"] == csv["name"]
    assert labels["UUID"] == csv["uuid"]
    assert labels["pci_bus_id"] == csv["pci.bus_id"]
    assert labels["DCGM_FI_DRIVER_VERSION"] == csv["driver_version"]
    assert labels["device"] == "nvidia0" and labels["gpu"] == "0" and labels["Hostname"] == "node-a"
    assert one(s, c.GPU_UP) == 1
    # Hopper: GPM profiling ratios (0..1) and bytes/s; GR_ENGINE from -q utilization.
    assert one(s, c.DCGM_FI_PROF_GR_ENGINE_ACTIVE) == pytest.approx(q_number(q, "GPU") / 100)
    assert 0 <= one(s, c.DCGM_FI_PROF_SM_ACTIVE) <= 1
    assert one(s, c.DCGM_FI_PROF_PCIE_TX_BYTES) > 0
    # Peak FLOPs from the model table.
    assert one(s, c.GPU_PEAK_FLOPS, dtype="bf16") == 0.9895e15
    assert one(s, c.GPU_PEAK_FLOPS, dtype="fp8") == 1.979e15


def test_l40s_absent_not_zero() -> None:
    """L40S: GDDR (no memory temperature), no NVLink, no GPM, not in the FLOPs table."""
    s = samples(scrape("l40s.json"))
    q = capture_q(L40S)
    assert re.search(r"Memory Current Temp\s+:\s+N/A", q)
    assert values(s, c.DCGM_FI_DEV_MEMORY_TEMP) == []
    for m in (
        c.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL,
        c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL,
        c.DCGM_FI_PROF_GR_ENGINE_ACTIVE,
        c.DCGM_FI_PROF_SM_ACTIVE,
        c.DCGM_FI_PROF_PCIE_TX_BYTES,
    ):
        assert values(s, m) == [], m
    assert values(s, c.GPU_PEAK_FLOPS) == []
    # What the L40S does report is there, including a non-zero power-capping counter.
    assert one(s, c.DCGM_FI_DEV_POWER_VIOLATION) == q_number(q, "SW Power Capping") * 1000 > 0
    assert one(s, c.DCGM_FI_DEV_GPU_UTIL) == q_number(q, "GPU")
    assert one(s, c.GPU_UP) == 1


def _capture_mig_layout(capture: str) -> dict[tuple[str, str], float]:
    """(GPU-instance profile, GI id) -> used MiB, read straight from the capture's -L and -q."""
    text = (CAPTURES / capture).read_text()
    profiles = re.findall(r"^\s+MIG (\S+)\s+Device\s+\d+:", text, re.M)
    q = capture_q(capture)
    blocks = re.findall(r"MIG Device\n(.*?)Shared BAR1", q, re.S)
    layout = {}
    for profile, block in zip(profiles, blocks, strict=True):
        gi = re.search(r"GPU Instance ID\s+:\s+(\d+)", block).group(1)
        used = float(re.search(r"Shared FB Memory Usage.*?Used\s+:\s+(\d+) MiB", block, re.S).group(1))
        # "1c.3g.71gb" is compute instance 1 of GPU instance profile 3g.71gb.
        layout[(re.sub(r"^\d+c\.", "", profile), gi)] = used
    return layout


@pytest.mark.parametrize("fixture,capture", [("h100-mig.json", H100_MIG), ("h200-mig.json", H200_MIG)])
def test_mig_layout_labels_and_absent_utilization(fixture: str, capture: str) -> None:
    s = samples(scrape(fixture))
    q = capture_q(capture)
    # MIG-enabled GPU: utilization and remapped rows are N/A in the capture -> absent, not 0.
    assert re.search(r"^\s+GPU\s+:\s+N/A", q, re.M)
    assert re.search(r"Remapped Rows\s+:\s+N/A", q)
    assert values(s, c.DCGM_FI_DEV_GPU_UTIL) == []
    assert values(s, c.DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS) == []
    # One FB series per GPU instance, labelled with the profile and GI id nvidia-smi reports.
    mig_fb = {
        (dict(lbl)["GPU_I_PROFILE"], dict(lbl)["GPU_I_ID"]): v
        for (n, lbl), v in s.items()
        if n == c.DCGM_FI_DEV_FB_USED and "GPU_I_ID" in dict(lbl)
    }
    expected = _capture_mig_layout(capture)
    assert mig_fb == expected and len(expected) >= 4
    # Profiling ratios per GPU instance (GPM MIG samples), none on the parent GPU.
    prof = [dict(lbl) for (n, lbl) in s if n == c.DCGM_FI_PROF_GR_ENGINE_ACTIVE]
    assert len(prof) == len(expected) and all("GPU_I_ID" in lbl for lbl in prof)
    # The device-level readings stay on the parent GPU.
    assert one(s, c.DCGM_FI_DEV_GPU_TEMP) == q_number(q, "GPU Current Temp")


def test_label_order_follows_the_contract() -> None:
    families = scrape("h100-mig.json", times=1)
    for fam in families:
        for sample in fam.samples:
            keys = tuple(k for k in sample.labels if k != "dtype")
            assert keys == c.gpu_label_keys(mig="GPU_I_ID" in keys), (fam.name, keys)


def test_only_contract_names_and_first_scrape_has_no_rates() -> None:
    first = samples(scrape("h100x8.json", times=1))
    names = {n for n, _ in first}
    assert names <= {*GPU_SERIES, c.GPU_UP, c.GPU_PEAK_FLOPS}
    # GPM and the NVLink bandwidth are rates: nothing to report before a second sample.
    assert values(first, c.DCGM_FI_PROF_SM_ACTIVE) == []
    assert values(first, c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL) == []
    assert len(values(first, c.GPU_UP)) == 8
    second = samples(scrape("h100x8.json", times=2))
    assert len(values(second, c.DCGM_FI_PROF_SM_ACTIVE)) == 8
    assert len(values(second, c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL)) == 8


def test_exposition_names_are_exact_and_promtool_accepts_them() -> None:
    collector = GpuCollector(context(gpu_nvml_replay=str(NVML_FIXTURES / "h100x8.json")))
    registry = CollectorRegistry(auto_describe=False)
    registry.register(collector)  # type: ignore[arg-type]
    collector.collect()
    from fleetscope.exporters.server import render_text

    text = render_text(collector)  # what /metrics serves

    def keys(b: bytes) -> list[str]:  # the lines without values (the energy counter grows meanwhile)
        return sorted(
            line.rpartition(" ")[0] if not line.startswith("#") else line for line in b.decode().splitlines()
        )

    assert keys(text) == keys(generate_latest(registry))
    body = text.decode()
    # DCGM counters keep their names (no _total appended) in the text format.
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in body
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in body
    assert "\nDCGM_FI_DEV_ECC_DBE_VOL_TOTAL{" in body
    res = promtool("check", "metrics", input=text)
    problems = (res.stdout + res.stderr).decode()
    # Exit 3 = lint warnings only (1 would be a parse error). The two accepted warnings come from
    # dcgm-exporter's own names (UUID, modelName, Hostname, ... and PCIE_REPLAY_COUNTER), which
    # dashboards depend on; docs/gpu.md lists them.
    assert res.returncode in (0, 3), problems
    for line in problems.splitlines():
        assert re.search(
            r"label names should be written in 'snake_case' not 'camelCase'$|"
            r"^DCGM_FI_DEV_PCIE_REPLAY_COUNTER metric name should not include type 'counter'$",
            line,
        ), line

    from prometheus_client.openmetrics.exposition import generate_latest as openmetrics

    om = openmetrics(registry).decode()
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION unknown" in om
    assert "\nDCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION{" in om


def test_fixtures_are_fresh() -> None:
    res = subprocess.run(
        [sys.executable, str(NVML_FIXTURES / "build_fixtures.py"), "--check"], capture_output=True, text=True
    )
    assert res.returncode == 0, res.stderr


@pytest.mark.parametrize(
    "fixture,capture", [("h100.json", H100), ("l40s.json", L40S), ("h100-mig.json", H100_MIG)]
)
def test_pcie_throughput_and_codec_utilization_match_the_capture(fixture: str, capture: str) -> None:
    """dcgm-exporter's PCIE_TX/RX_THROUGHPUT (KB/s, as nvidia-smi prints it) and ENC/DEC_UTIL (%)."""
    s = samples(scrape(fixture))
    q = capture_q(capture)
    assert one(s, c.DCGM_FI_DEV_PCIE_TX_THROUGHPUT) == q_number(q, "Tx Throughput")
    assert one(s, c.DCGM_FI_DEV_PCIE_RX_THROUGHPUT) == q_number(q, "Rx Throughput")
    encoder = re.search(r"^\s+Encoder\s+:\s+(\S+)", q, re.M)
    assert encoder is not None
    if encoder.group(1) == "N/A":  # MIG mode: not supported, so absent (never 0)
        assert not values(s, c.DCGM_FI_DEV_ENC_UTIL) and not values(s, c.DCGM_FI_DEV_DEC_UTIL)
    else:
        assert one(s, c.DCGM_FI_DEV_ENC_UTIL) == float(encoder.group(1))
        assert one(s, c.DCGM_FI_DEV_DEC_UTIL) == q_number(q, "Decoder")
