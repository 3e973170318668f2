"""One neuron-monitor report (a JSON document) turned into samples with the contract's names.

neuron-monitor (aws-neuron-tools) prints one JSON report per line; its shape is in the Neuron
Monitor User Guide and its Prometheus names are those of AWS's companion script
``neuron-monitor-prometheus.py`` (docs/neuron.md lists each field and where it goes). As in that
script, the counts of ``execution_stats`` and ``neuron_hw_counters`` are per report period and are
added up into counters; a metric group whose ``error`` is set is skipped, the others still count.

Standard library only: the node agent imports this.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetscope import contract as c
from fleetscope import hardware

#: (metric, label values in the metric's label order) -> value
Samples = dict[tuple[c.Metric, tuple[str, ...]], float]
#: Device index -> attribution label values (pod, namespace, container, hpc_job).
Attribution = Callable[[str, Mapping[str, Any] | None], tuple[str, str, str, str]]

_TOP_KEYS = ("neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info")


class BadReport(ValueError):
    """A line that is not a neuron-monitor report."""


def parse_line(line: bytes | str) -> dict[str, Any]:
    """The report in one line of neuron-monitor's output; :class:`BadReport` when it is none."""
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError) as exc:
        raise BadReport(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or not any(k in doc for k in _TOP_KEYS):
        raise BadReport("JSON, but not a neuron-monitor report (no instance_info, system_data, ...)")
    return doc


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    f = float(value)
    return f if math.isfinite(f) else None


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _group(report: Mapping[str, Any], name: str, on_error: Callable[[str, str], None]) -> dict[str, Any]:
    """A metric group, or {} when it is absent or carries an error (counted through ``on_error``)."""
    group = _obj(report.get(name))
    if group and group.get("error"):
        on_error("group_error", f"{name}: {str(group['error'])[:200]}")
        return {}
    return group


@dataclass
class Hardware:
    """What ``neuron_hardware_info`` says about the node."""

    device_count: int = 0
    cores_per_device: int = 0
    device_type: str = ""
    core_version: str = ""

    @classmethod
    def of(cls, report: Mapping[str, Any]) -> Hardware:
        hw = _obj(report.get("neuron_hardware_info"))
        devices, cores = _num(hw.get("neuron_device_count")), _num(hw.get("neuroncore_per_device_count"))
        return cls(
            int(devices or 0),
            int(cores or 0),
            str(hw.get("neuron_device_type") or ""),
            str(hw.get("neuroncore_version") or ""),
        )

    def device_of(self, core: str) -> str:
        if self.cores_per_device > 0 and core.isdigit():
            return str(int(core) // self.cores_per_device)
        return ""


def k8s_labels(entry: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(pod, namespace, container) of a ``neuron_k8s_info`` entry; containers joined with commas."""
    if not entry:
        return ("", "", "")
    containers = entry.get("container_name")
    if isinstance(containers, list):
        container = ",".join(str(x) for x in containers)
    else:
        container = str(containers or "")
    return (str(entry.get("pod_name") or ""), str(entry.get("namespace") or ""), container)


def k8s_attribution(_device: str, k8s: Mapping[str, Any] | None) -> tuple[str, str, str, str]:
    """Attribution from ``neuron_k8s_info`` alone (no Slurm job)."""
    return (*k8s_labels(k8s), "")


@dataclass
class Converter:
    """Turns successive reports into samples; keeps the counters' running totals between them."""

    node: str
    attribution: Attribution = k8s_attribution
    on_error: Callable[[str, str], None] = field(default=lambda _reason, _detail: None)
    totals: Samples = field(default_factory=dict)

    def _add(self, metric: c.Metric, labels: tuple[str, ...], delta: float | None) -> None:
        if delta is None or delta < 0:
            return
        key = (metric, labels)
        self.totals[key] = self.totals.get(key, 0.0) + delta

    def convert(self, report: Mapping[str, Any]) -> tuple[Samples, int]:
        """(this report's samples, counters included, the number of devices it lists)."""
        inst = _instance_labels(report)
        hw = Hardware.of(report)
        k8s = _obj(report.get("neuron_k8s_info")) or None
        gauges: Samples = {}
        runtimes = report.get("neuron_runtime_data")
        for runtime in runtimes if isinstance(runtimes, list) else ():
            if not isinstance(runtime, dict):
                continue
            tag = str(runtime.get("neuron_runtime_tag", runtime.get("pid", "")))
            if runtime.get("error"):
                self.on_error("runtime_error", f"runtime {tag[:80]}: {str(runtime['error'])[:200]}")
                continue
            labels = (*inst, tag, self.node)
            self._runtime(gauges, _obj(runtime.get("report")), labels, hw, k8s)
        system = _obj(report.get("system_data"))
        devices = self._hw_counters(system, inst, hw, k8s)
        self._system(gauges, system, (*inst, self.node))
        gauges[(c.NEURON_INSTANCE_INFO, (*inst, self.node))] = 1.0
        if report.get("neuron_hardware_info") is not None:
            info = (
                *inst,
                self.node,
                str(hw.device_count),
                str(hw.cores_per_device),
                hw.device_type,
                hw.core_version,
            )
            gauges[(c.NEURON_HARDWARE_INFO, info)] = 1.0
        self._peaks(gauges, hw, inst[2])
        count = devices if devices else hw.device_count
        gauges[(c.NEURON_DEVICES, (self.node,))] = float(count)
        return {**gauges, **self.totals}, count

    # ---- Neuron application groups -------------------------------------------------------------

    def _runtime(
        self,
        out: Samples,
        report: Mapping[str, Any],
        labels: tuple[str, ...],
        hw: Hardware,
        k8s: Mapping[str, Any] | None,
    ) -> None:
        def core_labels(core: str) -> tuple[str, ...]:
            dev = hw.device_of(core)
            return (*labels, core, dev, *self.attribution(dev, _core_k8s(k8s, core)))

        counters = _group(report, "neuroncore_counters", self.on_error)
        for core, data in _obj(counters.get("neuroncores_in_use")).items():
            util = _num(_obj(data).get("neuroncore_utilization"))
            if util is not None:
                out[(c.NEURONCORE_UTILIZATION, core_labels(str(core)))] = util / 100.0
        self._memory(out, _group(report, "memory_used", self.on_error), labels, core_labels)
        vcpu = _obj(_group(report, "neuron_runtime_vcpu_usage", self.on_error).get("vcpu_usage"))
        for usage in ("user", "system"):
            if (value := _num(vcpu.get(usage))) is not None:
                out[(c.NEURON_RUNTIME_VCPU_USAGE, (*labels, usage))] = value / 100.0
        self._execution(out, _group(report, "execution_stats", self.on_error), labels)

    def _memory(
        self,
        out: Samples,
        memory: Mapping[str, Any],
        labels: tuple[str, ...],
        core_labels: Callable[[str], tuple[str, ...]],
    ) -> None:
        used = _obj(memory.get("neuron_runtime_used_bytes"))
        for location in ("host", "neuron_device"):
            if (value := _num(used.get(location))) is not None:
                out[(c.NEURON_RUNTIME_MEMORY_USED, (*labels, location))] = value
        per_core = _obj(_obj(used.get("usage_breakdown")).get("neuroncore_memory_usage"))
        for core, data in per_core.items():
            for kind in c.NEURON_CORE_MEMORY_KINDS:
                if (value := _num(_obj(data).get(kind))) is not None:
                    out[(c.METRICS[c.neuroncore_memory_metric_name(kind)], core_labels(str(core)))] = value

    def _execution(self, out: Samples, stats: Mapping[str, Any], labels: tuple[str, ...]) -> None:
        for error_type, n in _obj(stats.get("error_summary")).items():
            self._add(c.NEURON_EXECUTION_ERRORS, (*labels, str(error_type)), _num(n))
        for status, n in _obj(stats.get("execution_summary")).items():
            self._add(c.NEURON_EXECUTION_STATUS, (*labels, str(status)), _num(n))
        total = _obj(_obj(stats.get("latency_stats")).get("total_latency"))
        for percentile, seconds in total.items():
            if (value := _num(seconds)) is not None:
                out[(c.NEURON_EXECUTION_LATENCY, (*labels, str(percentile)))] = value

    # ---- system groups -------------------------------------------------------------------------

    def _hw_counters(
        self, system: Mapping[str, Any], inst: tuple[str, ...], hw: Hardware, k8s: Mapping[str, Any] | None
    ) -> int:
        group = _group(system, "neuron_hw_counters", self.on_error)
        devices = group.get("neuron_devices")
        seen = 0
        for device in devices if isinstance(devices, list) else ():
            index = _num(_obj(device).get("neuron_device_index"))
            if index is None:
                continue
            seen += 1
            dev = str(int(index))
            base = (*inst, self.node, dev, *self.attribution(dev, _device_k8s(k8s, dev)))
            for event in c.NEURON_ECC_EVENT_TYPES:
                self._add(c.NEURON_HW_ECC_EVENTS, (*base, event), _num(device.get(event)))
        return seen

    def _system(self, out: Samples, system: Mapping[str, Any], labels: tuple[str, ...]) -> None:
        vcpu = _group(system, "vcpu_usage", self.on_error)
        if isinstance(vcpu.get("usage_data"), dict):
            out[(c.NEURON_SYSTEM_VCPU_COUNT, labels)] = float(len(vcpu["usage_data"]))
        average = _obj(vcpu.get("average_usage"))
        # The companion script's aggregation: user = user + nice; system = system + io_wait + irq + soft_irq.
        for usage, parts in (
            ("user", ("user", "nice")),
            ("system", ("system", "io_wait", "irq", "soft_irq")),
        ):
            values = [_num(average.get(p)) for p in parts]
            if average and all(v is not None for v in values):
                out[(c.NEURON_SYSTEM_VCPU_USAGE, (*labels, usage))] = min(sum(values), 100.0) / 100.0  # type: ignore[arg-type]
        memory = _group(system, "memory_info", self.on_error)
        for key, metric in (
            ("memory_total_bytes", c.NEURON_SYSTEM_MEMORY_TOTAL),
            ("memory_used_bytes", c.NEURON_SYSTEM_MEMORY_USED),
            ("swap_total_bytes", c.NEURON_SYSTEM_SWAP_TOTAL),
            ("swap_used_bytes", c.NEURON_SYSTEM_SWAP_USED),
        ):
            if (value := _num(memory.get(key))) is not None:
                out[(metric, labels)] = value

    def _peaks(self, out: Samples, hw: Hardware, instance_type: str) -> None:
        """Dense peak FLOP/s of every NeuronCore, as ``fleetscope_gpu_peak_flops{gpu=<core>}``:
        training ranks on Trainium label ``gpu`` with their NeuronCore, so the MFU rules join."""
        peak = hardware.neuron_peak(hw.device_type, instance_type)
        if peak is None or hw.device_count <= 0:
            return
        cores = hw.cores_per_device or peak.physical_cores
        model = f"{hw.device_type or peak.name} NeuronCore"
        for core in range(hw.device_count * cores):
            for dtype, value in peak.per_core(cores).items():
                labels = (str(core), "", "", f"neuron{core // cores}", model, self.node, "", dtype)
                out[(c.GPU_PEAK_FLOPS, labels)] = value


def _instance_labels(report: Mapping[str, Any]) -> tuple[str, ...]:
    info = _obj(report.get("instance_info"))
    keys = (
        "instance_name",
        "instance_id",
        "instance_type",
        "instance_availability_zone",
        "instance_region",
        "subnet_id",
    )
    return tuple(str(info.get(k) or "") for k in keys)


def _core_k8s(k8s: Mapping[str, Any] | None, core: str) -> Mapping[str, Any] | None:
    return _obj(_obj((k8s or {}).get("neuroncores_k8s_info")).get(core)) or None


def _device_k8s(k8s: Mapping[str, Any] | None, device: str) -> Mapping[str, Any] | None:
    return _obj(_obj((k8s or {}).get("neurondevices_k8s_info")).get(device)) or None


def families_order(samples: Samples) -> Iterator[tuple[c.Metric, list[tuple[tuple[str, ...], float]]]]:
    """Samples grouped by metric, in contract order."""
    by_metric: dict[c.Metric, list[tuple[tuple[str, ...], float]]] = {}
    for (metric, labels), value in samples.items():
        by_metric.setdefault(metric, []).append((labels, value))
    for metric in sorted(by_metric, key=list(c.METRICS).index):
        yield metric, sorted(by_metric[metric])
