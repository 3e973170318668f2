"""One neuron-monitor report (a JSON document) turned into samples with the contract's names.

neuron-monitor (aws-neuron-tools) prints one JSON report per line; its shape is in the Neuron
Monitor User Guide and its Prometheus names are those of AWS's companion script
``neuron-monitor-prometheus.py`` (docs/neuron.md lists each field and where it goes). As in that
script, the counts of ``execution_stats`` and ``neuron_hw_counters`` are per report period and are
added up into counters; a metric group whose ``error`` is set is skipped, the others still count.

What a long-running node needs besides (docs/neuron.md#on-a-long-running-node):

* runtime series follow the report's runtimes: a runtime the report no longer lists (or an empty
  list) loses its series, and a tag that comes back with another pid starts from zero, so the
  series stay bounded by the live runtimes;
* hardware counters are keyed by the device alone; who holds a device (pod, Slurm job) is on
  ``fleetscope_neuron_device_info``, so a counter never freezes or doubles when the owner changes;
* the EC2 labels are read once, from the first report whose ``instance_info`` succeeded;
* every value from the report is bounded before it is used (:mod:`fleetscope.labels`).

Standard library only: the node agent imports this.
"""

from __future__ import annotations

import json
import math
from collections import Counter
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Any

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.labels import (
    MAX_CORES_PER_DEVICE,
    MAX_NEURON_DEVICE,
    MAX_NEURON_DEVICES,
    MAX_NEURONCORE,
    cap,
    parse_index,
)

#: (metric, label values in the metric's label order) -> value
Samples = dict[tuple[c.Metric, tuple[str, ...]], float]
#: Device index -> attribution label values (pod, namespace, container, hpc_job).
Attribution = Callable[[str, Mapping[str, Any] | None], tuple[str, str, str, str]]
#: Called with (reason, detail, count) for inputs skipped; the collector counts them.
OnError = Callable[[str, str, int], None]
#: Runtimes of one report served at most (a node has at most a few dozen NeuronCores).
MAX_RUNTIMES = 128
#: Error and status types one runtime counts at most (neuron-monitor reports 12).
_MAX_KINDS = 64

_TOP_KEYS = ("neuron_runtime_data", "system_data", "instance_info", "neuron_hardware_info")
_INSTANCE_KEYS = (
    "instance_name",
    "instance_id",
    "instance_type",
    "instance_availability_zone",
    "instance_region",
    "subnet_id",
)
_NO_INSTANCE = ("",) * len(_INSTANCE_KEYS)


class BadReport(ValueError):
    """A line that is not a neuron-monitor report."""


def parse_line(line: bytes | str) -> dict[str, Any]:
    """The report in one line of neuron-monitor's output; :class:`BadReport` when it is none."""
    try:
        doc = json.loads(line)
    except (ValueError, UnicodeDecodeError, RecursionError) as exc:
        raise BadReport(f"not JSON ({type(exc).__name__})") from None
    if not isinstance(doc, dict) or not any(k in doc for k in _TOP_KEYS):
        raise BadReport("JSON, but not a neuron-monitor report (no instance_info, system_data, ...)")
    return doc


def _num(value: object) -> float | None:
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        f = float(value)
    except OverflowError:
        return None
    return f if math.isfinite(f) else None


def _integral(value: object) -> object:
    """A JSON number that is a whole number as an int (``16.0`` -> 16); anything else unchanged."""
    if isinstance(value, float) and value.is_integer():
        return int(value)
    return value


def _obj(value: object) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _ignore(_reason: str, _detail: str, _count: int = 1) -> None:
    pass


class _Problems:
    """The inputs one report skipped, tallied and handed on once per reason and detail."""

    def __init__(self) -> None:
        self.counts: Counter[tuple[str, str]] = Counter()

    def __call__(self, reason: str, detail: str, count: int = 1) -> None:
        self.counts[(reason, detail)] += count

    def label(self, value: object, what: str) -> str:
        """``value`` as a label value, cut to the label cap (counted as ``label_too_long``)."""
        text, cut = cap(str(value))
        if cut:
            self("label_too_long", f"{what} longer than {len(text)} characters; cut")
        return text

    def flush(self, on_error: OnError) -> None:
        for (reason, detail), count in self.counts.items():
            on_error(reason, detail, count)


def _group(report: Mapping[str, Any], name: str, problems: _Problems) -> dict[str, Any]:
    """A metric group, or {} when it is absent or carries an error (counted as ``group_error``)."""
    group = _obj(report.get(name))
    if group and group.get("error"):
        problems("group_error", f"{name}: {str(group['error'])[:200]}")
        return {}
    return group


@dataclass
class Hardware:
    """What ``neuron_hardware_info`` says about the node (counts out of bounds read as unknown)."""

    device_count: int = 0
    cores_per_device: int = 0
    device_type: str = ""
    core_version: str = ""
    memory_size: str = ""

    @classmethod
    def of(cls, report: Mapping[str, Any], problems: _Problems | None = None) -> Hardware:
        problems = problems or _Problems()
        hw = _obj(report.get("neuron_hardware_info"))
        counts = []
        for key, bound in (
            ("neuron_device_count", MAX_NEURON_DEVICES),
            ("neuroncore_per_device_count", MAX_CORES_PER_DEVICE),
        ):
            value = _integral(hw.get(key))
            n = parse_index(value, bound + 1)
            if n is None and value is not None:
                problems("out_of_range", f"neuron_hardware_info.{key} is not an integer in 0..{bound}")
            counts.append(n or 0)
        memory = hw.get("neuron_device_memory_size")
        return cls(
            counts[0],
            counts[1],
            problems.label(hw.get("neuron_device_type") or "", "neuron_device_type"),
            problems.label(hw.get("neuroncore_version") or "", "neuroncore_version"),
            str(memory) if parse_index(memory, 1 << 50) is not None else "",
        )

    def device_of(self, core: int) -> str:
        return str(core // self.cores_per_device) if self.cores_per_device > 0 else ""


def k8s_labels(entry: Mapping[str, Any] | None) -> tuple[str, str, str]:
    """(pod, namespace, container) of a ``neuron_k8s_info`` entry; containers joined with commas."""
    if not entry:
        return ("", "", "")
    containers = entry.get("container_name")
    if isinstance(containers, list):
        container = ",".join(str(x) for x in containers[:16])
    else:
        container = str(containers or "")
    return (
        cap(str(entry.get("pod_name") or ""))[0],
        cap(str(entry.get("namespace") or ""))[0],
        cap(container)[0],
    )


def k8s_attribution(_device: str, k8s: Mapping[str, Any] | None) -> tuple[str, str, str, str]:
    """Attribution from ``neuron_k8s_info`` alone (no Slurm job)."""
    return (*k8s_labels(k8s), "")


@dataclass
class _Runtime:
    """One Neuron application's running totals: (metric, its own labels) -> total."""

    pid: object
    totals: dict[tuple[c.Metric, str], float] = field(default_factory=dict)


@dataclass
class Converter:
    """Turns successive reports into samples; keeps the counters' running totals between them."""

    node: str
    attribution: Attribution = k8s_attribution
    on_error: OnError = _ignore
    #: The EC2 labels, fixed by the first report whose ``instance_info`` succeeded.
    instance: tuple[str, ...] | None = None
    #: Live runtimes by tag: only those of the latest report.
    runtimes: dict[str, _Runtime] = field(default_factory=dict)
    #: ECC totals by (device index, event type).
    device_totals: dict[tuple[str, str], float] = field(default_factory=dict)

    def convert(self, report: Mapping[str, Any]) -> tuple[Samples, int]:
        """(this report's samples, counters included, the number of devices it lists)."""
        problems = _Problems()
        try:
            return self._convert(report, problems)
        finally:
            problems.flush(self.on_error)

    def _convert(self, report: Mapping[str, Any], problems: _Problems) -> tuple[Samples, int]:
        inst = self._instance(report, problems)
        hw = Hardware.of(report, problems)
        k8s = _obj(report.get("neuron_k8s_info")) or None
        out: Samples = {}
        self._runtimes(out, report, inst, hw, k8s, problems)
        system = _obj(report.get("system_data"))
        devices = self._hw_counters(out, system, inst, problems)
        self._system(out, system, (*inst, self.node), problems)
        out[(c.NEURON_INSTANCE_INFO, (*inst, self.node))] = 1.0
        if report.get("neuron_hardware_info") is not None:
            info = (
                *inst,
                self.node,
                str(hw.device_count),
                str(hw.cores_per_device),
                hw.device_type,
                hw.core_version,
                hw.memory_size,
            )
            out[(c.NEURON_HARDWARE_INFO, info)] = 1.0
        listed = devices if devices else [str(d) for d in range(hw.device_count)]
        for dev in listed:
            owner = self.attribution(dev, _device_k8s(k8s, dev))
            out[(c.NEURON_DEVICE_INFO, (*inst, self.node, dev, *owner))] = 1.0
        self._peaks(out, hw, inst[2])
        out[(c.NEURON_DEVICES, (self.node,))] = float(len(listed))
        return out, len(listed)

    def _instance(self, report: Mapping[str, Any], problems: _Problems) -> tuple[str, ...]:
        """The EC2 labels: read once, from the first ``instance_info`` without an error."""
        if self.instance is not None:
            return self.instance
        info = _obj(report.get("instance_info"))
        if info.get("error"):
            problems("group_error", f"instance_info: {str(info['error'])[:200]}")
            return _NO_INSTANCE
        if not info.get("instance_id"):
            return _NO_INSTANCE
        self.instance = tuple(problems.label(info.get(k) or "", k) for k in _INSTANCE_KEYS)
        return self.instance

    # ---- Neuron application groups -------------------------------------------------------------

    def _runtimes(
        self,
        out: Samples,
        report: Mapping[str, Any],
        inst: tuple[str, ...],
        hw: Hardware,
        k8s: Mapping[str, Any] | None,
        problems: _Problems,
    ) -> None:
        """Every runtime the report lists; the others' totals are dropped (they ended)."""
        runtimes = report.get("neuron_runtime_data")
        entries = [r for r in runtimes if isinstance(r, dict)] if isinstance(runtimes, list) else []
        if len(entries) > MAX_RUNTIMES:
            problems("out_of_range", f"more than {MAX_RUNTIMES} runtimes in one report; the rest skipped")
            entries = entries[:MAX_RUNTIMES]
        live: dict[str, _Runtime] = {}
        for runtime in entries:
            pid = runtime.get("pid")
            tag = runtime.get("neuron_runtime_tag")  # else the pid, as neuron-monitor names it
            tag = problems.label(pid if tag is None and pid is not None else tag or "", "runtime tag")
            if tag in live:
                continue
            known = self.runtimes.get(tag)
            state = live[tag] = known if known is not None and known.pid == pid else _Runtime(pid)
            labels = (*inst, tag, self.node)
            if runtime.get("error"):
                problems("runtime_error", f"runtime {tag[:80]}: {str(runtime['error'])[:200]}")
            else:
                self._runtime(out, state, _obj(runtime.get("report")), labels, hw, k8s, problems)
            for (metric, own), total in state.totals.items():
                out[(metric, (*labels, own))] = total
        self.runtimes = live

    def _runtime(
        self,
        out: Samples,
        state: _Runtime,
        report: Mapping[str, Any],
        labels: tuple[str, ...],
        hw: Hardware,
        k8s: Mapping[str, Any] | None,
        problems: _Problems,
    ) -> None:
        def core_labels(key: object) -> tuple[str, ...] | None:
            core = parse_index(key, MAX_NEURONCORE)
            if core is None:
                problems("bad_label", f"a NeuronCore index that is not an integer in 0..{MAX_NEURONCORE - 1}")
                return None
            dev = hw.device_of(core)
            return (*labels, str(core), dev, *self.attribution(dev, _core_k8s(k8s, str(key))))

        counters = _group(report, "neuroncore_counters", problems)
        for core, data in _obj(counters.get("neuroncores_in_use")).items():
            util = _num(_obj(data).get("neuroncore_utilization"))
            if util is not None and (keys := core_labels(core)) is not None:
                out[(c.NEURONCORE_UTILIZATION, keys)] = util / 100.0
        self._memory(out, _group(report, "memory_used", problems), labels, core_labels)
        vcpu = _obj(_group(report, "neuron_runtime_vcpu_usage", problems).get("vcpu_usage"))
        for usage in ("user", "system"):
            if (value := _num(vcpu.get(usage))) is not None:
                out[(c.NEURON_RUNTIME_VCPU_USAGE, (*labels, usage))] = value / 100.0
        self._execution(out, state, _group(report, "execution_stats", problems), labels)

    def _memory(
        self,
        out: Samples,
        memory: Mapping[str, Any],
        labels: tuple[str, ...],
        core_labels: Callable[[object], tuple[str, ...] | None],
    ) -> None:
        used = _obj(memory.get("neuron_runtime_used_bytes"))
        for location in ("host", "neuron_device"):
            if (value := _num(used.get(location))) is not None:
                out[(c.NEURON_RUNTIME_MEMORY_USED, (*labels, location))] = value
        per_core = _obj(_obj(used.get("usage_breakdown")).get("neuroncore_memory_usage"))
        for core, data in per_core.items():
            values = [(kind, _num(_obj(data).get(kind))) for kind in c.NEURON_CORE_MEMORY_KINDS]
            if all(v is None for _, v in values) or (keys := core_labels(core)) is None:
                continue
            for kind, value in values:
                if value is not None:
                    out[(c.METRICS[c.neuroncore_memory_metric_name(kind)], keys)] = value

    def _execution(
        self, out: Samples, state: _Runtime, stats: Mapping[str, Any], labels: tuple[str, ...]
    ) -> None:
        for metric, summary in (
            (c.NEURON_EXECUTION_ERRORS, "error_summary"),
            (c.NEURON_EXECUTION_STATUS, "execution_summary"),
        ):
            for kind, n in _obj(stats.get(summary)).items():
                delta = _num(n)
                key = (metric, kind)
                # A kind is a label value: a short name, and a runtime keeps a bounded number of them.
                if delta is None or delta < 0 or not _kind(kind):
                    continue
                if key in state.totals or len(state.totals) < _MAX_KINDS:
                    state.totals[key] = state.totals.get(key, 0.0) + delta
        total = _obj(_obj(stats.get("latency_stats")).get("total_latency"))
        for percentile, seconds in total.items():
            if (value := _num(seconds)) is not None and _percentile(percentile):
                out[(c.NEURON_EXECUTION_LATENCY, (*labels, percentile))] = value

    # ---- system groups -------------------------------------------------------------------------

    def _hw_counters(
        self, out: Samples, system: Mapping[str, Any], inst: tuple[str, ...], problems: _Problems
    ) -> list[str]:
        """ECC totals of every device the report lists (the device indices, in report order)."""
        group = _group(system, "neuron_hw_counters", problems)
        devices = group.get("neuron_devices")
        seen: list[str] = []
        for device in devices if isinstance(devices, list) else ():
            index = parse_index(_integral(_obj(device).get("neuron_device_index")), MAX_NEURON_DEVICE)
            if index is None:
                problems(
                    "bad_label", f"a neuron_device_index that is not an integer in 0..{MAX_NEURON_DEVICE - 1}"
                )
                continue
            dev = str(index)
            if dev in seen:
                continue
            if len(seen) >= MAX_NEURON_DEVICES:
                problems(
                    "out_of_range", f"more than {MAX_NEURON_DEVICES} devices in one report; the rest skipped"
                )
                break
            seen.append(dev)
            for event in c.NEURON_ECC_EVENT_TYPES:
                delta = _num(device.get(event))
                key = (dev, event)
                if delta is not None and delta >= 0:
                    self.device_totals[key] = self.device_totals.get(key, 0.0) + delta
                if key in self.device_totals:
                    out[(c.NEURON_HW_ECC_EVENTS, (*inst, self.node, dev, event))] = self.device_totals[key]
        return seen

    def _system(
        self, out: Samples, system: Mapping[str, Any], labels: tuple[str, ...], problems: _Problems
    ) -> None:
        vcpu = _group(system, "vcpu_usage", problems)
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
        memory = _group(system, "memory_info", problems)
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
        training ranks on Trainium label ``gpu`` with their NeuronCore, so the MFU rules join.
        ``hw``'s counts are bounded (:class:`Hardware`), so this loop is too."""
        peak = hardware.neuron_peak(hw.device_type, instance_type)
        if peak is None or hw.device_count <= 0:
            return
        cores = hw.cores_per_device or peak.physical_cores
        model = f"{hw.device_type or peak.name} NeuronCore"
        for core in range(hw.device_count * cores):
            for dtype, value in peak.per_core(cores).items():
                labels = (str(core), "", "", f"neuron{core // cores}", model, self.node, "", dtype)
                out[(c.GPU_PEAK_FLOPS, labels)] = value


def _percentile(key: str) -> bool:
    """``p0`` ... ``p100``: the latency percentiles neuron-monitor reports."""
    return len(key) <= 4 and key[:1] == "p" and parse_index(key[1:], 101) is not None


def _kind(key: str) -> bool:
    """An error or status type: a short ASCII name (``completed_with_err``)."""
    return 0 < len(key) <= 64 and key.isascii() and key.replace("_", "").isalnum()


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
