"""The Trn1, Trn2 and Inf2 reports served with AWS's neuron-monitor-prometheus.py names, over real HTTP."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.exporters.neuron_report import BadReport, Converter, parse_line
from tests.exporters.neuron.conftest import NEURON, OK, SHAPES, exporter, monitor_config, scrape_until
from tests.support import exposition

#: Names the companion script serves for a report with every metric group, as written on the wire.
AWS_NAMES = {
    "neuroncore_utilization_ratio",
    "neuron_runtime_memory_used_bytes",
    "neuron_runtime_vcpu_usage_ratio",
    "execution_errors_total",
    "execution_status_total",
    "execution_latency_seconds",
    "hardware_ecc_events_total",
    "system_vcpu_count",
    "system_vcpu_usage_ratio",
    "system_memory_total_bytes",
    "system_memory_used_bytes",
    "system_swap_total_bytes",
    "system_swap_used_bytes",
    "instance_info",
    "neuron_hardware_info",
    *(c.neuroncore_memory_metric_name(k) for k in c.NEURON_CORE_MEMORY_KINDS),
}


def _reports(shape: str) -> list[dict]:
    return [json.loads(line) for line in (NEURON / f"{shape}.jsonl").read_text().splitlines()]


@pytest.mark.server
@pytest.mark.parametrize("shape", SHAPES)
def test_a_shape_is_served_with_the_companion_scripts_names(shape: str, tmp_path: Path) -> None:
    config = monitor_config(tmp_path, shape)
    with exporter(f"--collector.neuron.config={config}", tmp_path=tmp_path, node=f"{shape}-0") as exp:
        text = scrape_until(exp, OK)
    names = {name for name, _, _ in exposition.samples(text)}
    assert names >= AWS_NAMES
    report = _reports(shape)[0]
    hw = report["neuron_hardware_info"]
    cores = hw["neuroncore_per_device_count"]
    # Every series carries the node label; the core series their device.
    for name, labels, _ in exposition.samples(text):
        if name in AWS_NAMES:
            assert labels[c.NODE_LABEL] == f"{shape}-0", (name, labels)
    used = report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]
    for core, data in used.items():
        got = exposition.value(text, "neuroncore_utilization_ratio", neuroncore=core)
        assert got == pytest.approx(data["neuroncore_utilization"] / 100)
        (_, labels, _) = exposition.matching(text, "neuroncore_utilization_ratio", neuroncore=core)[0]
        assert labels["neuron_device"] == str(int(core) // cores)
        assert labels["instance_type"] == report["instance_info"]["instance_type"]
    assert exposition.value(text, str(c.NEURON_DEVICES)) == hw["neuron_device_count"]
    info = exposition.matching(text, "neuron_hardware_info")[0][1]
    assert info["neuron_device_type"] == hw["neuron_device_type"]
    assert info["neuroncore_per_device_count"] == str(cores)


def test_peak_flops_per_neuroncore_follow_the_logical_core_count(tmp_path: Path) -> None:
    """Trn2 at LNC=2: 4 logical cores a device, each a quarter of the device's 667 BF16 TFLOPS."""
    samples = _convert("trn2")
    peaks = {k[1]: v for k, v in samples.items() if k[0] == c.GPU_PEAK_FLOPS}
    bf16 = [v for labels, v in peaks.items() if labels[-1] == "bf16"]
    assert len(bf16) == 64 and all(v == pytest.approx(667e12 / 4) for v in bf16)
    core5 = next(labels for labels in peaks if labels[0] == "5" and labels[-1] == "fp8")
    assert core5[3] == "neuron1" and peaks[core5] == pytest.approx(1299e12 / 4)
    trn1 = [v for k, v in _convert("trn1").items() if k[0] == c.GPU_PEAK_FLOPS and k[1][-1] == "bf16"]
    assert len(trn1) == 32 and all(v == pytest.approx(95e12) for v in trn1)


def _convert(shape: str, errors: list[tuple[str, str]] | None = None) -> dict:
    conv = Converter("n0", on_error=lambda r, d, n: (errors if errors is not None else []).append((r, d)))
    samples: dict = {}
    for report in _reports(shape):
        samples, _ = conv.convert(report)
    return samples


def test_per_period_counts_add_up_across_reports() -> None:
    trn1 = _convert("trn1")
    dev = c.NEURON_HW_ECC_EVENTS.labels.index("neuron_device_index")
    ecc = {
        k[1][dev]: v
        for k, v in trn1.items()
        if k[0] == c.NEURON_HW_ECC_EVENTS and k[1][-1] == "mem_ecc_corrected"
    }
    assert ecc["3"] == 1 and ecc["0"] == 0
    completed = [v for k, v in trn1.items() if k[0] == c.NEURON_EXECUTION_STATUS and k[1][-1] == "completed"]
    assert completed == [360]
    inf2 = _convert("inf2")
    hardware = [v for k, v in inf2.items() if k[0] == c.NEURON_EXECUTION_ERRORS and k[1][-1] == "hardware"]
    assert hardware == [1]


def test_pod_labels_come_from_neuron_k8s_info() -> None:
    utils = [k[1] for k in _convert("trn2") if k[0] == c.NEURONCORE_UTILIZATION]
    keys = list(c.NEURONCORE_UTILIZATION.labels)
    assert {lab[keys.index("pod")] for lab in utils} == {"llama-0"}
    assert {lab[keys.index("container")] for lab in utils} == {"trainer"}


def test_a_group_with_an_error_is_skipped_and_counted() -> None:
    report = _reports("trn1")[0]
    report["system_data"]["neuron_hw_counters"] = {"period": 1.0, "error": "driver not loaded"}
    errors: list[tuple[str, str]] = []
    conv = Converter("n0", on_error=lambda r, d, n: errors.append((r, d)))
    samples, devices = conv.convert(report)
    assert not [k for k in samples if k[0] == c.NEURON_HW_ECC_EVENTS]
    assert devices == 16  # from neuron_hardware_info instead
    assert errors == [("group_error", "neuron_hw_counters: driver not loaded")]


@pytest.mark.parametrize("line", [b"not json", b"[1, 2]", b'{"hello": 1}', b"\xff\xfe"])
def test_garbage_is_no_report(line: bytes) -> None:
    with pytest.raises(BadReport):
        parse_line(line)
