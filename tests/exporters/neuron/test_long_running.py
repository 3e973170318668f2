"""The collector on a node that runs for months: series follow the live runtimes, counters are
keyed by the hardware, the EC2 labels are read once, every value from a report is bounded."""

from __future__ import annotations

import copy
import json
import time
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fleetscope import contract as c
from fleetscope.exporters.neuron_report import MAX_RUNTIMES, BadReport, Converter, parse_line
from fleetscope.labels import MAX_LABEL_CHARS
from tests.exporters.neuron.conftest import NEURON

Errors = list[tuple[str, str, int]]


def _reports(shape: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in (NEURON / f"{shape}.jsonl").read_text().splitlines()]


def _converter(errors: Errors | None = None) -> Converter:
    sink: Errors = errors if errors is not None else []
    return Converter("n0", on_error=lambda r, d, n: sink.append((r, d, n)))


def _with_runtimes(report: dict[str, Any], *runtimes: tuple[int, str]) -> dict[str, Any]:
    """``report`` whose runtime list holds one copy of its first runtime per (pid, tag)."""
    out = copy.deepcopy(report)
    first = report["neuron_runtime_data"][0]
    out["neuron_runtime_data"] = [{**first, "pid": pid, "neuron_runtime_tag": tag} for pid, tag in runtimes]
    return out


def _runtime_series(samples: dict, tag: str | None = None) -> list:
    at = c.NEURON_RUNTIME_LABELS.index("runtime_tag")
    return [k for k in samples if "runtime_tag" in k[0].labels and (tag is None or k[1][at] == tag)]


def _completed(samples: dict, tag: str) -> float:
    at = c.NEURON_EXECUTION_STATUS.labels.index("runtime_tag")
    return sum(
        v
        for k, v in samples.items()
        if k[0] == c.NEURON_EXECUTION_STATUS and k[1][at] == tag and k[1][-1] == "completed"
    )


def test_a_thousand_short_lived_processes_leave_no_series_behind() -> None:
    base = _reports("inf2")[0]
    conv = _converter()
    most = 0
    for pid in range(1000, 2000):
        samples, _ = conv.convert(_with_runtimes(base, (pid, str(pid)), (pid + 5000, str(pid + 5000))))
        most = max(most, len(_runtime_series(samples)))
    one = len(_runtime_series(conv.convert(_with_runtimes(base, (7, "7")))[0]))
    assert one > 10 and most == 2 * one  # bounded by the live runtimes, never by the node's uptime
    assert len(conv.runtimes) == 1
    empty = {**base, "neuron_runtime_data": []}
    samples, _ = conv.convert(empty)
    assert _runtime_series(samples) == [] and conv.runtimes == {}


def test_a_runtime_gone_from_the_report_loses_its_series() -> None:
    base = _reports("inf2")[0]
    conv = _converter()
    samples, _ = conv.convert(_with_runtimes(base, (1, "a"), (2, "b")))
    assert _runtime_series(samples, "a") and _runtime_series(samples, "b")
    samples, _ = conv.convert(_with_runtimes(base, (2, "b")))
    assert not _runtime_series(samples, "a") and _completed(samples, "b") == 240
    no_list = {k: v for k, v in base.items() if k != "neuron_runtime_data"}
    assert not _runtime_series(conv.convert(no_list)[0])


def test_a_returning_tag_starts_from_zero() -> None:
    base = _reports("inf2")[0]
    conv = _converter()
    for _ in range(3):
        samples, _ = conv.convert(_with_runtimes(base, (10, "job-7")))
    assert _completed(samples, "job-7") == 360
    # The same tag with another pid in the very next report: another process, its own count.
    samples, _ = conv.convert(_with_runtimes(base, (11, "job-7")))
    assert _completed(samples, "job-7") == 120
    conv.convert({**base, "neuron_runtime_data": []})
    samples, _ = conv.convert(_with_runtimes(base, (11, "job-7")))
    assert _completed(samples, "job-7") == 120


def test_ecc_is_keyed_by_the_device_and_the_owner_is_on_the_info_series() -> None:
    report = _reports("trn2")[0]
    conv = _converter()
    before, _ = conv.convert(report)
    moved = copy.deepcopy(report)
    for entry in moved["neuron_k8s_info"]["neurondevices_k8s_info"].values():
        entry["pod_name"] = "other-job-0"
    after, _ = conv.convert(moved)
    ecc = [k for k in after if k[0] == c.NEURON_HW_ECC_EVENTS]
    assert len(ecc) == 16 * len(c.NEURON_ECC_EVENT_TYPES)  # one series per device and event, never two
    assert {k for k in before if k[0] == c.NEURON_HW_ECC_EVENTS} == set(ecc)
    assert "pod" not in c.NEURON_HW_ECC_EVENTS.labels
    info = [k[1] for k in after if k[0] == c.NEURON_DEVICE_INFO]
    pod = c.NEURON_DEVICE_INFO.labels.index("pod")
    held = len(moved["neuron_k8s_info"]["neurondevices_k8s_info"])
    assert len(info) == 16 and held > 0
    assert sorted(lab[pod] for lab in info) == [""] * (16 - held) + ["other-job-0"] * held


def test_instance_labels_are_read_once_after_the_first_success() -> None:
    reports = _reports("trn1")
    failed = copy.deepcopy(reports[0])
    failed["instance_info"] = {"error": "IMDS timed out"}
    conv = _converter(errors := [])
    first, _ = conv.convert(failed)
    iid = c.NEURON_HW_ECC_EVENTS.labels.index("instance_id")
    assert {k[1][iid] for k in first if k[0] == c.NEURON_HW_ECC_EVENTS} == {""}
    assert ("group_error", "instance_info: IMDS timed out", 1) in errors
    conv.convert(reports[0])
    later = copy.deepcopy(reports[1])
    later["instance_info"] = {"error": "metadata failed again", "instance_id": "i-other"}
    samples, _ = conv.convert(later)
    ids = {k[1][iid] for k in samples if k[0] == c.NEURON_HW_ECC_EVENTS}
    assert ids == {reports[0]["instance_info"]["instance_id"]}
    assert len([k for k in samples if k[0] == c.NEURON_HW_ECC_EVENTS]) == 16 * 4  # no duplicates


def test_hardware_info_keeps_the_scripts_device_memory_size() -> None:
    samples, _ = _converter().convert(_reports("trn2")[0])
    (labels,) = [k[1] for k in samples if k[0] == c.NEURON_HARDWARE_INFO]
    at = c.NEURON_HARDWARE_INFO.labels.index("neuron_device_memory_size")
    assert labels[at] == "103079215104"


# ---- the malformed stream, case by case -----------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        b'{"neuron_runtime_data": [{"pid": 1, "report": {"neuroncore_cou',  # truncated JSON
        b"2026-12-01 10:00:00 neuron-monitor: INFO starting collection",  # a log line
        b"[" * 100_000,  # nested past the recursion limit
        b"",
    ],
)
def test_a_malformed_line_is_no_report(line: bytes) -> None:
    with pytest.raises(BadReport):
        parse_line(line)


def test_null_missing_and_unknown_groups_are_left_out() -> None:
    report = _reports("trn1")[0]
    report["system_data"]["memory_info"] = None
    del report["system_data"]["vcpu_usage"]
    report["system_data"]["some_future_group"] = {"x": 1}
    report["neuron_runtime_data"][0]["report"]["execution_stats"] = None
    report["neuron_runtime_data"][0]["report"]["new_counters"] = {"period": 1}
    samples, _ = _converter(errors := []).convert(report)
    names = {k[0] for k in samples}
    assert c.NEURON_SYSTEM_MEMORY_TOTAL not in names and c.NEURON_SYSTEM_VCPU_COUNT not in names
    assert c.NEURON_EXECUTION_STATUS not in names and c.NEURONCORE_UTILIZATION in names
    assert errors == []


def test_error_strings_and_a_runtime_level_error_are_counted() -> None:
    report = _reports("inf2")[0]
    conv = _converter(errors := [])
    conv.convert(report)
    report = copy.deepcopy(report)
    report["neuron_runtime_data"][0]["error"] = "runtime unreachable"
    report["system_data"]["memory_info"] = {"error": "cannot read /proc/meminfo"}
    samples, _ = conv.convert(report)
    reasons = {(r, d) for r, d, _ in errors}
    assert ("runtime_error", "runtime serve: runtime unreachable") in reasons
    assert ("group_error", "memory_info: cannot read /proc/meminfo") in reasons
    # The runtime is still listed: its counters stay, its gauges of this report are absent.
    assert _completed(samples, "serve") == 120
    assert not [k for k in samples if k[0] == c.NEURONCORE_UTILIZATION]


# ---- bounds -------------------------------------------------------------------------------------


def test_a_huge_runtime_tag_is_cut_and_counted() -> None:
    base = _reports("inf2")[0]
    conv = _converter(errors := [])
    tags = [str(i) * (128 << 10) for i in range(32)]
    samples, _ = conv.convert(_with_runtimes(base, *((i, t) for i, t in enumerate(tags))))
    longest = max(len(v) for k in samples for v in k[1])
    assert longest == MAX_LABEL_CHARS
    assert sum(n for r, _, n in errors if r == "label_too_long") == 32
    huge = copy.deepcopy(base)
    huge["instance_info"]["instance_name"] = "x" * (8 << 20)
    samples, _ = _converter().convert(huge)
    assert max(len(v) for k in samples for v in k[1]) == MAX_LABEL_CHARS


def test_a_huge_device_count_is_refused_quickly() -> None:
    report = copy.deepcopy(_reports("trn2")[0])
    report["neuron_hardware_info"]["neuron_device_count"] = 10_000_000
    del report["system_data"]["neuron_hw_counters"]
    start = time.monotonic()
    samples, devices = _converter(errors := []).convert(report)
    assert time.monotonic() - start < 1.0
    assert devices == 0 and not [k for k in samples if k[0] == c.GPU_PEAK_FLOPS]
    assert [r for r, _, _ in errors] == ["out_of_range"]


def test_too_many_runtimes_are_cut_and_counted() -> None:
    base = _reports("inf2")[0]
    samples, _ = _converter(errors := []).convert(_with_runtimes(base, *((i, str(i)) for i in range(1000))))
    assert len({k[1][6] for k in _runtime_series(samples)}) == MAX_RUNTIMES
    assert ("out_of_range", f"more than {MAX_RUNTIMES} runtimes in one report; the rest skipped", 1) in errors


@pytest.mark.parametrize("core", ["²", "٣", "9" * 400, "-1", "1.5", " 3"])
def test_a_core_that_is_no_ascii_index_is_skipped_and_counted(core: str) -> None:
    report = _reports("inf2")[0]
    used = report["neuron_runtime_data"][0]["report"]["neuroncore_counters"]["neuroncores_in_use"]
    used[core] = {"neuroncore_utilization": 50.0}
    samples, _ = _converter(errors := []).convert(report)
    cores = {
        k[1][c.NEURONCORE_UTILIZATION.labels.index("neuroncore")]
        for k in samples
        if k[0] == c.NEURONCORE_UTILIZATION
    }
    assert cores == {"0", "1"}
    assert [r for r, _, _ in errors] == ["bad_label"]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=12), inner, max_size=4),
    max_leaves=30,
)


@settings(max_examples=150, derandomize=True, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    runtime=st.dictionaries(
        st.sampled_from(["pid", "neuron_runtime_tag", "error", "report"]), _json, max_size=4
    ),
    hw=st.dictionaries(
        st.sampled_from(["neuron_device_count", "neuroncore_per_device_count", "neuron_device_type"]), _json
    ),
    system=st.dictionaries(st.sampled_from(["neuron_hw_counters", "vcpu_usage", "memory_info"]), _json),
)
def test_any_report_shape_converts_without_raising_into_bounded_labels(
    runtime: dict, hw: dict, system: dict
) -> None:
    report = {"neuron_runtime_data": [runtime], "neuron_hardware_info": hw, "system_data": system}
    samples, devices = _converter().convert(report)
    assert all(len(v) <= MAX_LABEL_CHARS for k in samples for v in k[1])
    assert all(len(k[1]) == len(k[0].labels) for k in samples)
    assert 0 <= devices <= 128


def test_whole_floats_are_counts_and_a_null_tag_is_the_pid() -> None:
    report = copy.deepcopy(_reports("trn2")[0])
    report["neuron_hardware_info"]["neuron_device_count"] = 16.0
    report["neuron_runtime_data"][0]["neuron_runtime_tag"] = None
    report["neuron_runtime_data"][0]["pid"] = 4242
    samples, devices = _converter(errors := []).convert(report)
    assert devices == 16 and errors == []
    assert _runtime_series(samples, "4242")
