"""``fleetscope record-gpu``: record every NVML answer of this machine into a replay fixture.

Run it on a GPU node (needs the NVIDIA driver; no root needed except for some counters)::

    fleetscope record-gpu --output h200-node.json

It asks NVML everything the ``gpu`` and ``xid`` collectors ask (identity, clocks, temperatures,
power, energy, memory, PCIe, clock-event reasons, remapped rows, the batched field values, GPM
profiling metrics over ``--gpm-interval`` seconds, running processes, MIG devices) and writes each
answer, or the NVML error it raised, in the ``fleetscope-nvml-replay/1`` format that
``--collector.gpu.nvml-replay`` and the tests replay. Every call runs under a deadline, so a hung
GPU is recorded as lost instead of hanging the recorder.
"""

from __future__ import annotations

import argparse
import ctypes
import logging
import time
from pathlib import Path
from typing import Any

from fleetscope import strictjson
from fleetscope.errors import FleetscopeError
from fleetscope.times import rfc3339

log = logging.getLogger("fleetscope.record_gpu")


def add_arguments(p: argparse.ArgumentParser) -> None:
    p.add_argument("--output", "-o", required=True, metavar="PATH", help="JSON fixture to write")
    p.add_argument(
        "--gpm-interval",
        type=float,
        default=1.0,
        metavar="SECONDS",
        help="time between the two GPM samples (default 1)",
    )
    p.add_argument(
        "--timeout",
        type=float,
        default=5.0,
        metavar="SECONDS",
        help="deadline for each NVML call (default 5)",
    )
    p.add_argument("--note", default="", help="free text stored in the fixture's 'source'")


def plain(value: Any) -> Any:
    """A pynvml answer as JSON: structures to objects, bytes to text, arrays to lists."""
    if isinstance(value, bytes | bytearray):
        return value.decode(errors="replace")
    if isinstance(value, ctypes.Structure | ctypes.Union):
        return {name: plain(getattr(value, name)) for name, *_ in value._fields_ if not name.startswith("_")}
    if isinstance(value, ctypes.Array):
        return [plain(v) for v in value]
    if isinstance(value, list | tuple):
        return [plain(v) for v in value]
    if isinstance(value, int | float | str | bool) or value is None:
        return value
    if hasattr(value, "__dict__"):
        return {k: plain(v) for k, v in vars(value).items() if not k.startswith("_")}
    return str(value)


def _device_calls(pynvml: Any) -> list[tuple[str, str, tuple, dict]]:
    """(replay key, pynvml function, args after the handle, kwargs) the collectors use."""
    return [
        ("nvmlDeviceGetName", "nvmlDeviceGetName", (), {}),
        ("nvmlDeviceGetUUID", "nvmlDeviceGetUUID", (), {}),
        ("nvmlDeviceGetIndex", "nvmlDeviceGetIndex", (), {}),
        ("nvmlDeviceGetPciInfo", "nvmlDeviceGetPciInfo", (), {}),
        ("nvmlDeviceGetMigMode", "nvmlDeviceGetMigMode", (), {}),
        ("nvmlDeviceGetMaxMigDeviceCount", "nvmlDeviceGetMaxMigDeviceCount", (), {}),
        ("nvmlDeviceGetUtilizationRates", "nvmlDeviceGetUtilizationRates", (), {}),
        ("nvmlDeviceGetClockInfo:1", "nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_SM,), {}),
        ("nvmlDeviceGetClockInfo:2", "nvmlDeviceGetClockInfo", (pynvml.NVML_CLOCK_MEM,), {}),
        ("nvmlDeviceGetTemperature:0", "nvmlDeviceGetTemperature", (pynvml.NVML_TEMPERATURE_GPU,), {}),
        ("nvmlDeviceGetPowerUsage", "nvmlDeviceGetPowerUsage", (), {}),
        ("nvmlDeviceGetTotalEnergyConsumption", "nvmlDeviceGetTotalEnergyConsumption", (), {}),
        ("nvmlDeviceGetMemoryInfo:v2", "nvmlDeviceGetMemoryInfo", (), {"version": pynvml.nvmlMemory_v2}),
        ("nvmlDeviceGetCurrPcieLinkGeneration", "nvmlDeviceGetCurrPcieLinkGeneration", (), {}),
        ("nvmlDeviceGetCurrPcieLinkWidth", "nvmlDeviceGetCurrPcieLinkWidth", (), {}),
        (
            "nvmlDeviceGetPcieThroughput:0",
            "nvmlDeviceGetPcieThroughput",
            (pynvml.NVML_PCIE_UTIL_TX_BYTES,),
            {},
        ),
        (
            "nvmlDeviceGetPcieThroughput:1",
            "nvmlDeviceGetPcieThroughput",
            (pynvml.NVML_PCIE_UTIL_RX_BYTES,),
            {},
        ),
        ("nvmlDeviceGetEncoderUtilization", "nvmlDeviceGetEncoderUtilization", (), {}),
        ("nvmlDeviceGetDecoderUtilization", "nvmlDeviceGetDecoderUtilization", (), {}),
        ("nvmlDeviceGetCurrentClocksEventReasons", "nvmlDeviceGetCurrentClocksEventReasons", (), {}),
        ("nvmlDeviceGetRemappedRows", "nvmlDeviceGetRemappedRows", (), {}),
        ("nvmlGpmQueryDeviceSupport", "nvmlGpmQueryDeviceSupport", (), {}),
        ("nvmlDeviceGetComputeRunningProcesses", "nvmlDeviceGetComputeRunningProcesses", (), {}),
        ("nvmlDeviceGetSupportedEventTypes", "nvmlDeviceGetSupportedEventTypes", (), {}),
    ]


_MIG_CALLS = ("nvmlDeviceGetName", "nvmlDeviceGetUUID", "nvmlDeviceGetGpuInstanceId")


class Recorder:
    def __init__(self, backend: Any, pynvml: Any, timeout: float) -> None:
        from fleetscope.exporters.gpu.deadline import DeadlineWorker

        self.b = backend
        self.pynvml = pynvml
        self.timeout = timeout
        self.worker = DeadlineWorker("record-gpu")

    def ask(self, fn: Any, *args: Any, **kwargs: Any) -> Any:
        """One call's answer as JSON, or ``{"error": code}``; a hang is recorded as GpuIsLost."""
        from fleetscope.exporters.gpu.deadline import Busy, DeadlineExceeded

        try:
            return plain(self.worker.run(self.timeout, lambda: fn(*args, **kwargs)))
        except self.pynvml.NVMLError as exc:
            return {"error": int(exc.value)}
        except (DeadlineExceeded, Busy):
            return {"error": int(self.pynvml.NVML_ERROR_GPU_IS_LOST), "note": "timed out"}

    def fields(self, handle: Any) -> dict[str, Any]:
        from fleetscope.exporters.gpu.collector import ALL_LINKS, FIELD_METRICS, NVLINK_THROUGHPUT_FIELDS

        ids: list[Any] = list(FIELD_METRICS) + [(f, ALL_LINKS) for f in NVLINK_THROUGHPUT_FIELDS]
        answers = self.ask(self.b.field_values, handle, ids)
        if isinstance(answers, dict):  # the whole call failed
            return {str(f if isinstance(f, int) else f[0]): answers for f in ids}
        out: dict[str, Any] = {}
        for fid, (ret, value) in zip(ids, answers, strict=True):
            key = str(fid if isinstance(fid, int) else fid[0])
            out[key] = {"error": ret} if ret else (int(value) if float(value).is_integer() else value)
        return out

    def gpm(self, handle: Any, gpu_instance_id: int | None, interval: float) -> dict[str, Any] | None:
        """GPM metrics over two samples ``interval`` apart; None when GPM is not supported."""
        from fleetscope.exporters.gpu.collector import GPM_IDS
        from fleetscope.exporters.gpu.deadline import Busy, DeadlineExceeded
        from fleetscope.exporters.gpu.nvml import UNSUPPORTED_CODES

        def take() -> dict:
            s1 = self.b.gpm_sample(handle, gpu_instance_id)
            try:
                time.sleep(interval)
                s2 = self.b.gpm_sample(handle, gpu_instance_id)
                try:
                    return self.b.gpm_metrics(s1, s2, GPM_IDS)
                finally:
                    self.b.gpm_free(s2)
            finally:
                self.b.gpm_free(s1)

        try:
            metrics = self.worker.run(self.timeout + interval, take)
        except self.pynvml.NVMLError as exc:
            if exc.value in UNSUPPORTED_CODES:
                return None
            return {str(i): {"error": int(exc.value)} for i in GPM_IDS}
        except (DeadlineExceeded, Busy):
            return None
        return {str(i): ({"error": ret} if ret else value) for i, (ret, value) in metrics.items()}

    def device(self, index: int, interval: float) -> dict[str, Any]:
        p = self.pynvml
        handle = self.b.nvmlDeviceGetHandleByIndex(index)
        calls = {
            key: self.ask(getattr(self.b, fn), handle, *args, **kw) for key, fn, args, kw in _device_calls(p)
        }
        device: dict[str, Any] = {"calls": calls, "fields": self.fields(handle)}
        mig_mode = calls.get("nvmlDeviceGetMigMode")
        mig_on = isinstance(mig_mode, list) and mig_mode and mig_mode[0] == p.NVML_DEVICE_MIG_ENABLE
        support = calls.get("nvmlGpmQueryDeviceSupport")
        gpm_ok = isinstance(support, dict) and support.get("isSupportedDevice")
        if gpm_ok and not mig_on:
            gpm = self.gpm(handle, None, interval)
            if gpm is not None:
                device["gpm"] = gpm
        if mig_on:
            migs: list[Any] = []
            slots = calls.get("nvmlDeviceGetMaxMigDeviceCount")
            for i in range(slots if isinstance(slots, int) else 0):
                try:
                    mh = self.b.nvmlDeviceGetMigDeviceHandleByIndex(handle, i)
                except p.NVMLError:
                    migs.append(None)
                    continue
                mcalls = {k: self.ask(getattr(self.b, k), mh) for k in _MIG_CALLS}
                mcalls["nvmlDeviceGetMemoryInfo:v2"] = self.ask(
                    self.b.nvmlDeviceGetMemoryInfo, mh, version=p.nvmlMemory_v2
                )
                mig: dict[str, Any] = {"calls": mcalls}
                gi = mcalls.get("nvmlDeviceGetGpuInstanceId")
                if gpm_ok and isinstance(gi, int):
                    gpm = self.gpm(handle, gi, interval)
                    if gpm is not None:
                        mig["gpm"] = gpm
                migs.append(mig)
            while migs and migs[-1] is None:
                migs.pop()
            device["mig_devices"] = migs
        return device


def run(args: argparse.Namespace) -> int:
    try:
        import pynvml
    except ImportError:
        raise FleetscopeError("nvidia-ml-py is not installed (pip install nvidia-ml-py)") from None
    from fleetscope.exporters.gpu.nvml import REPLAY_FORMAT, RealNvml, text

    out = Path(args.output)
    if not out.parent.is_dir():
        raise FleetscopeError(f"output directory {out.parent} does not exist")
    backend = RealNvml()
    try:
        backend.nvmlInit()
    except pynvml.NVMLError as exc:
        raise FleetscopeError(f"NVML could not start on this machine: {exc}") from None
    try:
        rec = Recorder(backend, pynvml, args.timeout)
        count = backend.nvmlDeviceGetCount()
        devices = []
        for i in range(count):
            log.info("recording GPU %d of %d", i + 1, count)
            devices.append(rec.device(i, args.gpm_interval))
        data = {
            "format": REPLAY_FORMAT,
            "source": f"fleetscope record-gpu on {_hostname()} at {rfc3339(time.time())}"
            + (f": {args.note}" if args.note else ""),
            "synthetic": [],
            "system": {
                "nvmlSystemGetDriverVersion": text(backend.nvmlSystemGetDriverVersion()),
                "nvmlSystemGetNVMLVersion": rec.ask(backend.nvmlSystemGetNVMLVersion),
            },
            "devices": devices,
        }
    finally:
        try:
            backend.nvmlShutdown()
        except pynvml.NVMLError:
            pass
    out.write_text(strictjson.dumps(data, indent=1) + "\n")
    print(f"recorded {len(devices)} GPU(s) into {out}")
    return 0


def _hostname() -> str:
    import socket

    return socket.gethostname()
