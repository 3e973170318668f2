"""The ``gpu`` collector: NVML readings under dcgm-exporter's names, units and labels.

Per scrape, each GPU is read by its own deadline worker (see :mod:`.deadline`), all GPUs at once;
the scrape waits at most ``--collector.gpu.nvml-timeout`` seconds. A GPU that answers
``GpuIsLost`` (or times out, or was reported by XID 79) gets ``fleetscope_gpu_up 0`` and no other
series, while the others keep reporting. Anything NVML answers ``NotSupported`` is remembered and
never asked again, and its series is absent (never 0).

Counters keep dcgm-exporter's names without ``_total``. prometheus_client's text writer appends
``_total`` to the family name of anything typed ``counter``, and OpenMetrics requires it, so those
families are typed ``unknown`` (``untyped`` in the text format): the exposed sample names are then
exactly the contract's names in both formats, which is what Prometheus stores and dashboards query.
"""

from __future__ import annotations

import argparse
import functools
import time
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pynvml
from prometheus_client.metrics_core import Metric as MetricFamily
from prometheus_client.samples import Sample

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.errors import FleetscopeError
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.exporters.gpu import session as sessions
from fleetscope.exporters.gpu.attribution import (
    DEFAULT_RESOURCE_NAMES,
    POD_RESOURCES_SOCKET,
    Attributor,
    Labels,
    PodResourcesClient,
)
from fleetscope.exporters.gpu.deadline import Busy, DeadlineExceeded
from fleetscope.exporters.gpu.nvml import LOST_CODES, UNSUPPORTED_CODES, FieldAnswer
from fleetscope.exporters.gpu.session import GpuDevice, MigDevice, NvmlSession

_MIB = 1024 * 1024
#: The field-value scope id that asks NVML for the sum over every NVLink of the GPU (UINT32 max).
ALL_LINKS = 0xFFFFFFFF

#: nvmlDeviceGetFieldValues ids -> (metric, scale). One batched call per GPU per scrape.
FIELD_METRICS: dict[int, tuple[c.Metric, float]] = {
    pynvml.NVML_FI_DEV_MEMORY_TEMP: (c.DCGM_FI_DEV_MEMORY_TEMP, 1.0),
    pynvml.NVML_FI_DEV_PCIE_REPLAY_COUNTER: (c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER, 1.0),
    pynvml.NVML_FI_DEV_ECC_SBE_VOL_TOTAL: (c.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, 1.0),
    pynvml.NVML_FI_DEV_ECC_DBE_VOL_TOTAL: (c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL, 1.0),
    pynvml.NVML_FI_DEV_ECC_SBE_AGG_TOTAL: (c.DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, 1.0),
    pynvml.NVML_FI_DEV_ECC_DBE_AGG_TOTAL: (c.DCGM_FI_DEV_ECC_DBE_AGG_TOTAL, 1.0),
    pynvml.NVML_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL: (c.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, 1.0),  # noqa: E501
    pynvml.NVML_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL: (c.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL, 1.0),  # noqa: E501
    pynvml.NVML_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL: (c.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, 1.0),
    pynvml.NVML_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL: (c.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL, 1.0),  # noqa: E501
    pynvml.NVML_FI_DEV_PERF_POLICY_POWER: (c.DCGM_FI_DEV_POWER_VIOLATION, 1.0),
    pynvml.NVML_FI_DEV_PERF_POLICY_THERMAL: (c.DCGM_FI_DEV_THERMAL_VIOLATION, 1.0),
    pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION: (c.DCGM_FI_DEV_GPU_RECOVERY_ACTION, 1.0),
}  # fmt: skip
#: NVLink data throughput counters (KiB, all links); DCGM turns their sum into a rate (~MB/s).
NVLINK_THROUGHPUT_FIELDS = (
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_TX,
    pynvml.NVML_FI_DEV_NVLINK_THROUGHPUT_DATA_RX,
)

#: GPM metric id -> (profiling metric, scale to DCGM's unit): % -> ratio, MiB/s -> bytes/s.
GPM_METRICS: dict[int, tuple[c.Metric, float]] = {
    pynvml.NVML_GPM_METRIC_GRAPHICS_UTIL: (c.DCGM_FI_PROF_GR_ENGINE_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_SM_UTIL: (c.DCGM_FI_PROF_SM_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_SM_OCCUPANCY: (c.DCGM_FI_PROF_SM_OCCUPANCY, 0.01),
    pynvml.NVML_GPM_METRIC_ANY_TENSOR_UTIL: (c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_DRAM_BW_UTIL: (c.DCGM_FI_PROF_DRAM_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_FP64_UTIL: (c.DCGM_FI_PROF_PIPE_FP64_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_FP32_UTIL: (c.DCGM_FI_PROF_PIPE_FP32_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_FP16_UTIL: (c.DCGM_FI_PROF_PIPE_FP16_ACTIVE, 0.01),
    pynvml.NVML_GPM_METRIC_PCIE_TX_PER_SEC: (c.DCGM_FI_PROF_PCIE_TX_BYTES, float(_MIB)),
    pynvml.NVML_GPM_METRIC_PCIE_RX_PER_SEC: (c.DCGM_FI_PROF_PCIE_RX_BYTES, float(_MIB)),
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_TX_PER_SEC: (c.DCGM_FI_PROF_NVLINK_TX_BYTES, float(_MIB)),
    pynvml.NVML_GPM_METRIC_NVLINK_TOTAL_RX_PER_SEC: (c.DCGM_FI_PROF_NVLINK_RX_BYTES, float(_MIB)),
}
GPM_IDS = list(GPM_METRICS)

#: The per-GPU series this collector emits (fleetscope_gpu_up and peak_flops are separate).
GPU_SERIES: tuple[c.Metric, ...] = (
    c.DCGM_FI_DEV_GPU_UTIL, c.DCGM_FI_DEV_MEM_COPY_UTIL, c.DCGM_FI_DEV_SM_CLOCK, c.DCGM_FI_DEV_MEM_CLOCK,
    c.DCGM_FI_DEV_GPU_TEMP, c.DCGM_FI_DEV_MEMORY_TEMP, c.DCGM_FI_DEV_POWER_USAGE,
    c.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION, c.DCGM_FI_DEV_FB_USED, c.DCGM_FI_DEV_FB_FREE,
    c.DCGM_FI_DEV_FB_RESERVED, c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER, c.DCGM_FI_DEV_PCIE_LINK_GEN,
    c.DCGM_FI_DEV_PCIE_LINK_WIDTH, c.DCGM_FI_DEV_PCIE_TX_THROUGHPUT, c.DCGM_FI_DEV_PCIE_RX_THROUGHPUT,
    c.DCGM_FI_DEV_ENC_UTIL, c.DCGM_FI_DEV_DEC_UTIL, c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, c.DCGM_FI_DEV_POWER_VIOLATION,  # noqa: E501
    c.DCGM_FI_DEV_THERMAL_VIOLATION, c.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL, c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
    c.DCGM_FI_DEV_ECC_SBE_AGG_TOTAL, c.DCGM_FI_DEV_ECC_DBE_AGG_TOTAL,
    c.DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS, c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS,
    c.DCGM_FI_DEV_ROW_REMAP_FAILURE, c.DCGM_FI_DEV_ROW_REMAP_PENDING,
    c.DCGM_FI_DEV_NVLINK_CRC_FLIT_ERROR_COUNT_TOTAL, c.DCGM_FI_DEV_NVLINK_CRC_DATA_ERROR_COUNT_TOTAL,
    c.DCGM_FI_DEV_NVLINK_REPLAY_ERROR_COUNT_TOTAL, c.DCGM_FI_DEV_NVLINK_RECOVERY_ERROR_COUNT_TOTAL,
    c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL, c.DCGM_FI_DEV_GPU_RECOVERY_ACTION,
    *(m for m, _ in GPM_METRICS.values()),
)  # fmt: skip


#: The model table is a list of regexes; a node has one or two models, so remember the answers.
_peak_flops = functools.lru_cache(maxsize=64)(hardware.peak_flops)


def family_type(metric: c.Metric) -> str:
    """The exposition type: DCGM counters without ``_total`` are ``unknown`` (module docstring)."""
    if metric.type == "counter" and not metric.endswith("_total"):
        return "unknown"
    return metric.type


class _Lost(Exception):
    """This GPU stopped answering during the read."""


@dataclass
class Reading:
    """One GPU's answers for this scrape."""

    values: dict[c.Metric, float] = field(default_factory=dict)
    mig: list[tuple[MigDevice, dict[c.Metric, float]]] = field(default_factory=list)
    pids: list[int] = field(default_factory=list)
    up: bool = True


class GpuReader:
    """Reads one GPU through the backend; remembers NotSupported answers on the device."""

    def __init__(self, backend: Any, want_processes: bool) -> None:
        self.b = backend
        self.want_processes = want_processes

    def _call(self, unsupported: set[str], key: str, fn: Any, *args: Any, **kw: Any) -> Any:
        if key in unsupported:
            return None
        try:
            return fn(*args, **kw)
        except pynvml.NVMLError as exc:
            if exc.value in UNSUPPORTED_CODES:
                unsupported.add(key)
            elif exc.value in LOST_CODES:
                raise _Lost(str(exc)) from None
            return None  # transient (NoData, Timeout, ...): absent this scrape

    def read(self, dev: GpuDevice) -> Reading:
        try:
            return self._read(dev)
        except _Lost:
            return Reading(up=False)

    def _read(self, dev: GpuDevice) -> Reading:
        b, h, u, v = self.b, dev.handle, dev.unsupported, {}
        call = self._call
        util = call(u, "util", b.nvmlDeviceGetUtilizationRates, h)
        if util is not None:
            v[c.DCGM_FI_DEV_GPU_UTIL] = util.gpu
            v[c.DCGM_FI_DEV_MEM_COPY_UTIL] = util.memory
        for key, metric, args in (
            ("clock_sm", c.DCGM_FI_DEV_SM_CLOCK, (pynvml.NVML_CLOCK_SM,)),
            ("clock_mem", c.DCGM_FI_DEV_MEM_CLOCK, (pynvml.NVML_CLOCK_MEM,)),
            ("temp", c.DCGM_FI_DEV_GPU_TEMP, (pynvml.NVML_TEMPERATURE_GPU,)),
        ):
            fn = b.nvmlDeviceGetClockInfo if key.startswith("clock") else b.nvmlDeviceGetTemperature
            x = call(u, key, fn, h, *args)
            if x is not None:
                v[metric] = x
        power = call(u, "power", b.nvmlDeviceGetPowerUsage, h)
        if power is not None:
            v[c.DCGM_FI_DEV_POWER_USAGE] = power / 1000.0
        energy = call(u, "energy", b.nvmlDeviceGetTotalEnergyConsumption, h)
        if energy is not None:
            v[c.DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION] = energy
        mem = call(u, "memory", b.nvmlDeviceGetMemoryInfo, h, version=pynvml.nvmlMemory_v2)
        if mem is not None:
            v[c.DCGM_FI_DEV_FB_USED] = mem.used // _MIB
            v[c.DCGM_FI_DEV_FB_FREE] = mem.free // _MIB
            v[c.DCGM_FI_DEV_FB_RESERVED] = mem.reserved // _MIB
        gen = call(u, "pcie_gen", b.nvmlDeviceGetCurrPcieLinkGeneration, h)
        if gen is not None:
            v[c.DCGM_FI_DEV_PCIE_LINK_GEN] = gen
        width = call(u, "pcie_width", b.nvmlDeviceGetCurrPcieLinkWidth, h)
        if width is not None:
            v[c.DCGM_FI_DEV_PCIE_LINK_WIDTH] = width
        self._read_pcie_and_codecs(dev, v)
        reasons = call(u, "clock_events", b.nvmlDeviceGetCurrentClocksEventReasons, h)
        if reasons is not None:
            v[c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS] = reasons
        rows = call(u, "remapped_rows", b.nvmlDeviceGetRemappedRows, h)
        if rows is not None:
            corr, unc, pending, failure = rows
            v[c.DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS] = corr
            v[c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS] = unc
            v[c.DCGM_FI_DEV_ROW_REMAP_PENDING] = 1 if pending else 0
            v[c.DCGM_FI_DEV_ROW_REMAP_FAILURE] = 1 if failure else 0
        self._read_fields(dev, v)
        reading = Reading(values=v)
        self._read_profiling(dev, reading)
        if self.want_processes:
            procs = call(u, "processes", b.nvmlDeviceGetComputeRunningProcesses, h) or []
            reading.pids = [int(p.pid) for p in procs]
        return reading

    def _read_pcie_and_codecs(self, dev: GpuDevice, v: dict[c.Metric, float]) -> None:
        """PCIe throughput (KB/s, DCGM fields 200/201) and encoder/decoder utilization (%)."""
        b, h, u, call = self.b, dev.handle, dev.unsupported, self._call
        for key, metric, counter in (
            ("pcie_tx", c.DCGM_FI_DEV_PCIE_TX_THROUGHPUT, pynvml.NVML_PCIE_UTIL_TX_BYTES),
            ("pcie_rx", c.DCGM_FI_DEV_PCIE_RX_THROUGHPUT, pynvml.NVML_PCIE_UTIL_RX_BYTES),
        ):
            kbps = call(u, key, b.nvmlDeviceGetPcieThroughput, h, counter)
            if kbps is not None:
                v[metric] = kbps  # KB/s, as DCGM fields 200/201
        for key, metric, fn in (
            ("enc_util", c.DCGM_FI_DEV_ENC_UTIL, b.nvmlDeviceGetEncoderUtilization),
            ("dec_util", c.DCGM_FI_DEV_DEC_UTIL, b.nvmlDeviceGetDecoderUtilization),
        ):
            answer = call(u, key, fn, h)  # [utilization %, sampling period in us]
            if answer is not None:
                v[metric] = answer[0]

    def _read_profiling(self, dev: GpuDevice, reading: Reading) -> None:
        """GPM ratios of the GPU (or of each MIG instance) and each MIG instance's memory."""
        b, h, u, v = self.b, dev.handle, dev.unsupported, reading.values
        call = self._call
        if dev.gpm_supported is None:
            support = call(u, "gpm_support", b.nvmlGpmQueryDeviceSupport, h)
            dev.gpm_supported = bool(support is not None and support.isSupportedDevice)
        if dev.gpm_supported and not dev.mig_enabled:
            dev.gpm_prev = self._gpm(dev.unsupported, dev.gpm_prev, v, h, None)
        for mig in dev.mig:
            mv: dict[c.Metric, float] = {}
            mmem = call(
                mig.unsupported, "memory", b.nvmlDeviceGetMemoryInfo, mig.handle, version=pynvml.nvmlMemory_v2
            )
            if mmem is not None:
                mv[c.DCGM_FI_DEV_FB_USED] = mmem.used // _MIB
                mv[c.DCGM_FI_DEV_FB_FREE] = mmem.free // _MIB
                mv[c.DCGM_FI_DEV_FB_RESERVED] = mmem.reserved // _MIB
            if dev.gpm_supported:
                mig.gpm_prev = self._gpm(mig.unsupported, mig.gpm_prev, mv, h, mig.gpu_instance_id)
            reading.mig.append((mig, mv))

    def _read_fields(self, dev: GpuDevice, v: dict[c.Metric, float]) -> None:
        ids: list[Any] = [f for f in FIELD_METRICS if f"field:{f}" not in dev.unsupported]
        want_nvlink = "field:nvlink_throughput" not in dev.unsupported
        if want_nvlink:
            ids += [(f, ALL_LINKS) for f in NVLINK_THROUGHPUT_FIELDS]
        answers = self._field_answers(dev, ids) if ids else None
        if answers is None:
            return
        nvlink_kib = 0.0
        nvlink_ok = want_nvlink
        for fid, (ret, value) in zip(ids, answers, strict=True):
            if isinstance(fid, tuple):
                if ret != 0 or value is None:
                    nvlink_ok = False
                    if ret in UNSUPPORTED_CODES:
                        dev.unsupported.add("field:nvlink_throughput")
                else:
                    nvlink_kib += value
                continue
            if ret != 0 or value is None:
                if ret in UNSUPPORTED_CODES:
                    dev.unsupported.add(f"field:{fid}")
                elif ret in LOST_CODES:
                    raise _Lost(f"field {fid}: NVML return {ret}")
                continue
            metric, scale = FIELD_METRICS[fid]
            if metric is c.DCGM_FI_DEV_MEMORY_TEMP and value > 200:
                continue  # DCGM treats > 200 C as an invalid reading
            v[metric] = value * scale
        if nvlink_ok:
            self._nvlink_bandwidth(dev, nvlink_kib, v)

    def _field_answers(self, dev: GpuDevice, ids: list[Any]) -> list[FieldAnswer] | None:
        """One nvmlDeviceGetFieldValues call; None when it failed (all fields unsupported, if so)."""
        try:
            return self.b.field_values(dev.handle, ids)
        except pynvml.NVMLError as exc:
            if exc.value in LOST_CODES:
                raise _Lost(str(exc)) from None
            if exc.value in UNSUPPORTED_CODES:
                dev.unsupported.update(f"field:{f}" for f in FIELD_METRICS)
                dev.unsupported.add("field:nvlink_throughput")
            return None

    @staticmethod
    def _nvlink_bandwidth(dev: GpuDevice, nvlink_kib: float, v: dict[c.Metric, float]) -> None:
        """The NVLink rate since the last scrape from the all-links KiB counter (none on the first)."""
        now = time.monotonic()
        prev = dev.nvlink_prev
        dev.nvlink_prev = (now, nvlink_kib)
        if prev is not None and now > prev[0] and nvlink_kib >= prev[1]:
            # As DCGM: delta KiB / seconds / 1000, "about MB/s".
            v[c.DCGM_FI_DEV_NVLINK_BANDWIDTH_TOTAL] = (nvlink_kib - prev[1]) / (now - prev[0]) / 1000.0

    def _gpm(
        self,
        unsupported: set[str],
        prev: Any,
        out: dict[c.Metric, float],
        handle: Any,
        gpu_instance_id: int | None,
    ) -> Any:
        """Take a GPM sample; with the previous one, compute the profiling ratios. Returns the new sample."""
        if "gpm" in unsupported:
            return None
        try:
            sample = self.b.gpm_sample(handle, gpu_instance_id)
        except pynvml.NVMLError as exc:
            if exc.value in UNSUPPORTED_CODES:
                unsupported.add("gpm")
            elif exc.value in LOST_CODES:
                raise _Lost(str(exc)) from None
            return prev
        if prev is None:
            return sample
        try:
            ids = [i for i in GPM_IDS if f"gpm:{i}" not in unsupported]
            for metric_id, (ret, value) in self.b.gpm_metrics(prev, sample, ids).items():
                if ret == 0 and value is not None:
                    metric, scale = GPM_METRICS[metric_id]
                    out[metric] = value * scale
                elif ret in UNSUPPORTED_CODES:
                    unsupported.add(f"gpm:{metric_id}")
        except pynvml.NVMLError as exc:
            if exc.value in LOST_CODES:
                raise _Lost(str(exc)) from None
        finally:
            try:
                self.b.gpm_free(prev)
            except pynvml.NVMLError:
                pass
        return sample


class SeriesBuilder:
    """Collects samples per metric with dcgm-exporter's label keys in order."""

    def __init__(self, node_label: str, node_name: str, driver: str) -> None:
        self.node_label = node_label
        self.node_name = node_name
        self.driver = driver
        self.samples: defaultdict[str, list[Sample]] = defaultdict(list)

    def labels(
        self, dev: GpuDevice, mig: MigDevice | None = None, attribution: Labels | None = None
    ) -> Labels:
        gpu, uuid, bus, device, model = dev.identity_labels()
        labels = {"gpu": gpu, "UUID": uuid, "pci_bus_id": bus, "device": device, "modelName": model}
        if mig is not None:
            labels["GPU_I_PROFILE"] = mig.profile
            labels["GPU_I_ID"] = str(mig.gpu_instance_id)
        labels[self.node_label] = self.node_name
        labels["DCGM_FI_DRIVER_VERSION"] = self.driver
        if attribution:
            for key in c.GPU_ATTRIBUTION_LABELS:
                if key in attribution:
                    labels[key] = attribution[key]
        return labels

    def add(self, metric: str, labels: Labels, value: float) -> None:
        self.samples[metric].append(Sample(metric, labels, float(value), None, None))

    def add_all(self, values: dict[c.Metric, float], labels: Labels) -> None:
        """All of one GPU's readings with the same labels (the hot loop of a scrape)."""
        samples = self.samples
        for metric, value in values.items():
            samples[metric].append(Sample(metric, labels, float(value), None, None))

    def families(self) -> Iterable[MetricFamily]:
        for metric in (*GPU_SERIES, c.GPU_UP, c.GPU_PEAK_FLOPS):
            samples = self.samples.get(metric)
            if not samples:
                continue
            family = MetricFamily(metric, metric.help, family_type(metric))
            family.samples = samples
            yield family


class GpuCollector(Collector):
    name = "gpu"
    description = "NVIDIA GPUs through NVML, with dcgm-exporter's metric names and labels"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("gpu collector")
        g.add_argument(
            "--collector.gpu.nvml-replay",
            dest="gpu_nvml_replay",
            metavar="PATH",
            default=None,
            help="answer NVML calls from a recorded JSON fixture (fleetscope record-gpu) "
            "instead of the driver",
        )
        g.add_argument(
            "--collector.gpu.nvml-timeout",
            dest="gpu_nvml_timeout",
            type=float,
            default=2.0,
            metavar="SECONDS",
            help="deadline for one GPU's NVML calls per scrape (default 2)",
        )
        g.add_argument(
            "--collector.gpu.kubernetes",
            dest="gpu_kubernetes",
            action="store_true",
            help="add pod/namespace/container labels from the kubelet pod-resources socket "
            "(needs grpcio: pip install 'fleetscope[k8s]')",
        )
        g.add_argument(
            "--collector.gpu.pod-resources-socket",
            dest="gpu_pod_resources_socket",
            default=POD_RESOURCES_SOCKET,
            metavar="PATH",
            help=f"kubelet pod-resources socket (default {POD_RESOURCES_SOCKET})",
        )
        g.add_argument(
            "--collector.gpu.kubernetes-resource-names",
            dest="gpu_resource_names",
            default=",".join(DEFAULT_RESOURCE_NAMES),
            metavar="NAMES",
            help="comma-separated GPU resource names (default nvidia.com/gpu; "
            "nvidia.com/mig-* always counts)",
        )
        g.add_argument(
            "--collector.gpu.hpc-job-mapping-dir",
            dest="gpu_hpc_job_mapping_dir",
            default=None,
            metavar="DIR",
            help="directory of per-GPU Slurm job files written by the prolog "
            "(deploy/slurm/prolog.sh) -> hpc_job label",
        )
        g.add_argument(
            "--collector.gpu.slurm-cgroup",
            dest="gpu_slurm_cgroup",
            action="store_true",
            help="find hpc_job from the cgroup (job_<id>) of the processes NVML reports on each GPU",
        )

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        opt = ctx.option
        replay = opt("gpu_nvml_replay", None)
        if replay and not Path(str(replay)).is_file():
            raise FleetscopeError(f"--collector.gpu.nvml-replay {replay}: no such file")
        timeout = ctx.option_float("gpu_nvml_timeout", sessions.DEFAULT_TIMEOUT)
        if timeout <= 0:
            raise FleetscopeError(f"--collector.gpu.nvml-timeout must be > 0, not {timeout}")
        self.session: NvmlSession = sessions.session_from_options(ctx.options)
        pods = None
        if opt("gpu_kubernetes", False):
            names = tuple(n.strip() for n in str(opt("gpu_resource_names", "")).split(",") if n.strip())
            pods = PodResourcesClient(
                str(opt("gpu_pod_resources_socket", POD_RESOURCES_SOCKET)),
                names or DEFAULT_RESOURCE_NAMES,
                timeout=self.session.timeout,
            )
        mapping_dir = opt("gpu_hpc_job_mapping_dir", None)
        self.attributor = Attributor(
            ctx.procfs,
            pods=pods,
            mapping_dir=Path(str(mapping_dir)) if mapping_dir else None,
            slurm_cgroup=bool(opt("gpu_slurm_cgroup", False)),
        )
        self._lost_logged: set[int] = set()

    def deadline(self, default: float) -> float:
        """At least the NVML deadline and a second: a hung GPU is reported lost, not the collector."""
        return max(default, self.session.timeout + 1.0)

    def collect(self) -> Iterable[MetricFamily]:
        s = self.session
        s.ensure_started()
        backend = s.backend
        assert backend is not None
        backend.begin_scrape()
        self.attributor.refresh()
        reader = GpuReader(backend, self.attributor.wants_processes)
        deadline = time.monotonic() + s.timeout
        jobs = []
        for dev in s.devices:
            job = None
            if dev.handle is not None and not s.fallen_off(dev.index) and dev.worker is not None:
                try:
                    job = dev.worker.submit(reader.read, dev)
                except Busy:
                    job = None
            jobs.append((dev, job))
        out = SeriesBuilder(self.ctx.node_label, self.ctx.node_name, s.driver_version)
        for dev, job in jobs:
            reading = Reading(up=False)
            if job is not None:
                assert dev.worker is not None
                try:
                    reading = dev.worker.wait(job, max(0.0, deadline - time.monotonic()))
                except DeadlineExceeded:
                    self._note_lost(dev, f"no NVML answer within {s.timeout:g}s")
                    reading = Reading(up=False)
            self._emit(out, dev, reading)
        return list(out.families())

    def _note_lost(self, dev: GpuDevice, why: str) -> None:
        if dev.index not in self._lost_logged:
            self._lost_logged.add(dev.index)
            self.log.error("GPU %d (%s) reported lost: %s", dev.index, dev.bus_id or "?", why)

    def _emit(self, out: SeriesBuilder, dev: GpuDevice, reading: Reading) -> None:
        base = out.labels(dev)
        if not reading.up:
            if dev.index not in self._lost_logged:
                self._note_lost(
                    dev,
                    "fallen off the bus (XID 79)"
                    if self.session.fallen_off(dev.index)
                    else "NVML says the GPU is lost",
                )
            out.add(c.GPU_UP, base, 0)
            return
        if dev.index in self._lost_logged:
            self._lost_logged.discard(dev.index)
            self.log.info("GPU %d answers again", dev.index)
        out.add(c.GPU_UP, base, 1)
        peak = _peak_flops(dev.name)
        if peak:
            for dtype, flops in peak.items():
                out.add(c.GPU_PEAK_FLOPS, {**base, "dtype": dtype}, flops)
        for attribution in self.attributor.labels(dev.index, dev.uuid, pids=reading.pids):
            out.add_all(reading.values, out.labels(dev, attribution=attribution) if attribution else base)
        for mig, values in reading.mig:
            for attribution in self.attributor.labels(
                dev.index, dev.uuid, mig.gpu_instance_id, mig.uuids, reading.pids
            ):
                out.add_all(values, out.labels(dev, mig, attribution))

    def close(self) -> None:
        self.attributor.close()
