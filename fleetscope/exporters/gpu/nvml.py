"""The NVML backends: the real one (``pynvml`` from nvidia-ml-py) and a replay of recorded answers.

Both expose the same small surface: the ``pynvml`` functions the GPU collectors use, under their
``pynvml`` names, plus three helpers that hide ctypes structures (:meth:`field_values`,
:meth:`gpm_sample`, :meth:`gpm_metrics`). Errors are ``pynvml.NVMLError`` subclasses in both, so
the collector cannot tell a recorded ``NotSupported`` from a live one.

The replay format (``fleetscope-nvml-replay/1``, written by ``fleetscope record-gpu`` and by
``tests/fixtures/nvml/build_fixtures.py``)::

    {"format": "fleetscope-nvml-replay/1", "source": "...",
     "system": {"nvmlSystemGetDriverVersion": "590.48.01"},
     "devices": [{"calls": {"nvmlDeviceGetName": "NVIDIA H100 80GB HBM3",
                            "nvmlDeviceGetClockInfo:1": 1980,
                            "nvmlDeviceGetRemappedRows": {"error": 3}, ...},
                  "fields": {"82": 55, "94": {"error": 3}},
                  "gpm": {"1": 100.0, "20": {"error": 3}},
                  "per_second": {"nvmlDeviceGetTotalEnergyConsumption": 631950},
                  "mig_devices": [{"calls": {...}, "gpm": {...}}]}],
     "script": [{"from_scrape": 3, "device": 2, "lost": true},
                {"from_scrape": 2, "device": 1, "hang": true},
                {"from_scrape": 2, "device": 0, "set": {"nvmlDeviceGetTemperature:0": 91}},
                {"from_scrape": 2, "device": 0, "xid": 79}]}

A call key is the function name, then ``:`` and its arguments after the handle, comma separated.
An answer is a JSON value, an object for a structure, or ``{"error": <NVML return code>}``. A call
the recording lacks answers ``NotSupported``. ``per_second`` makes a counter grow with wall time
(energy, NVLink throughput) so ``rate()`` works on replayed series.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterable
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pynvml

from fleetscope.errors import FleetscopeError

REPLAY_FORMAT = "fleetscope-nvml-replay/1"

#: NVML return codes that mean "this GPU is gone" (the collector reports it with gpu_up 0).
LOST_CODES = frozenset(
    {
        pynvml.NVML_ERROR_GPU_IS_LOST,
        pynvml.NVML_ERROR_GPU_NOT_FOUND,
        pynvml.NVML_ERROR_RESET_REQUIRED,
        pynvml.NVML_ERROR_UNKNOWN,
    }
)
#: Return codes that mean "never ask this again" (cached by the collector).
UNSUPPORTED_CODES = frozenset(
    {
        pynvml.NVML_ERROR_NOT_SUPPORTED,
        pynvml.NVML_ERROR_FUNCTION_NOT_FOUND,
        pynvml.NVML_ERROR_NO_PERMISSION,
        pynvml.NVML_ERROR_DEPRECATED,
    }
)

_VALUE_FIELD = {
    pynvml.NVML_VALUE_TYPE_DOUBLE: "dVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_INT: "uiVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG: "ulVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_LONG_LONG: "ullVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_LONG_LONG: "sllVal",
    pynvml.NVML_VALUE_TYPE_SIGNED_INT: "siVal",
    pynvml.NVML_VALUE_TYPE_UNSIGNED_SHORT: "usVal",
}

#: A field answer: ``(nvml return code, value or None)``.
FieldAnswer = tuple[int, float | None]


def call_key(name: str, args: Iterable[Any] = ()) -> str:
    """The replay key of one call: ``nvmlDeviceGetClockInfo:1``."""
    args = list(args)
    return name if not args else name + ":" + ",".join(str(a) for a in args)


def text(value: Any) -> str:
    """pynvml returns ``bytes`` or ``str`` depending on its version; labels want ``str``."""
    return value.decode(errors="replace") if isinstance(value, bytes | bytearray) else str(value)


class RealNvml:
    """``pynvml`` itself. Attribute access falls through to the module's functions."""

    replay = False

    def __getattr__(self, name: str) -> Any:
        fn = getattr(pynvml, name)
        if not callable(fn):
            return fn

        def call(*args: Any, **kwargs: Any) -> Any:
            try:
                return fn(*args, **kwargs)
            except pynvml.NVMLLibraryMismatchError:
                # pynvml's "unversioned function missing from this driver": the same as NotFound.
                raise pynvml.NVMLError(pynvml.NVML_ERROR_FUNCTION_NOT_FOUND) from None

        setattr(self, name, call)  # cached: later lookups skip __getattr__
        return call

    def begin_scrape(self) -> None:
        """Replay hook; nothing to do on real hardware."""

    def field_values(self, handle: Any, field_ids: list[tuple[int, int] | int]) -> list[FieldAnswer]:
        """One batched ``nvmlDeviceGetFieldValues``; per-field return codes instead of raising."""
        values = pynvml.nvmlDeviceGetFieldValues(handle, field_ids)
        out: list[FieldAnswer] = []
        for v in values:
            if v.nvmlReturn != pynvml.NVML_SUCCESS:
                out.append((int(v.nvmlReturn), None))
                continue
            attr = _VALUE_FIELD.get(v.valueType, "ullVal")
            out.append((0, float(getattr(v.value, attr))))
        return out

    def gpm_sample(self, handle: Any, gpu_instance_id: int | None = None) -> Any:
        sample = pynvml.nvmlGpmSampleAlloc()
        try:
            if gpu_instance_id is None:
                pynvml.nvmlGpmSampleGet(handle, sample)
            else:
                pynvml.nvmlGpmMigSampleGet(handle, gpu_instance_id, sample)
        except pynvml.NVMLError:
            pynvml.nvmlGpmSampleFree(sample)
            raise
        return sample

    def gpm_free(self, sample: Any) -> None:
        pynvml.nvmlGpmSampleFree(sample)

    def gpm_metrics(self, sample1: Any, sample2: Any, metric_ids: list[int]) -> dict[int, FieldAnswer]:
        """GPM metrics between two samples; per-metric return codes instead of raising."""
        mg = pynvml.c_nvmlGpmMetricsGet_t()
        mg.version = pynvml.NVML_GPM_METRICS_GET_VERSION
        mg.numMetrics = len(metric_ids)
        mg.sample1 = sample1
        mg.sample2 = sample2
        for i, metric_id in enumerate(metric_ids):
            mg.metrics[i].metricId = metric_id
        pynvml.nvmlGpmMetricsGet(mg)
        out: dict[int, FieldAnswer] = {}
        for i, metric_id in enumerate(metric_ids):
            m = mg.metrics[i]
            ret = int(m.nvmlReturn)
            out[metric_id] = (ret, float(m.value) if ret == 0 else None)
        return out

    def same_handle(self, a: Any, b: Any) -> bool:
        import ctypes

        return ctypes.cast(a, ctypes.c_void_p).value == ctypes.cast(b, ctypes.c_void_p).value


class ReplayHandle:
    """An opaque device handle of the replay backend (a GPU or one MIG device of it)."""

    __slots__ = ("data", "index", "mig_index", "parent")

    def __init__(self, index: int, data: dict, mig_index: int | None = None, parent: Any = None) -> None:
        self.index = index
        self.mig_index = mig_index
        self.data = data
        self.parent = parent

    def __repr__(self) -> str:
        return f"ReplayHandle({self.index}, mig={self.mig_index})"


def _answer(value: Any) -> Any:
    """Turn a recorded JSON answer into what pynvml would return (or raise its error)."""
    if isinstance(value, dict):
        if "error" in value:
            raise pynvml.NVMLError(int(value["error"]))
        return SimpleNamespace(**{k: _answer(v) for k, v in value.items()})
    if isinstance(value, list):
        return [_answer(v) for v in value]
    return value


class ReplayNvml:
    """Answers from a recorded JSON fixture, with optional scripted changes per scrape."""

    replay = True

    def __init__(self, data: dict, source: str = "<memory>") -> None:
        if data.get("format") != REPLAY_FORMAT:
            raise FleetscopeError(f"{source}: not an NVML replay fixture (format {data.get('format')!r})")
        self.data = data
        self.source = source
        self.scrape = 0
        self._t0 = time.monotonic()
        self._lock = threading.Lock()
        self._handles = [ReplayHandle(i, d) for i, d in enumerate(data.get("devices", []))]
        self._delivered_xids: set[int] = set()
        self.initialized = False

    @classmethod
    def load(cls, path: str | Path) -> ReplayNvml:
        p = Path(path)
        try:
            data = json.loads(p.read_text())
        except OSError as exc:
            raise FleetscopeError(f"cannot read NVML replay fixture {p}: {exc.strerror}") from None
        except json.JSONDecodeError as exc:
            raise FleetscopeError(f"NVML replay fixture {p} is not valid JSON: {exc}") from None
        return cls(data, str(p))

    # -- scripting ------------------------------------------------------------------------------
    def begin_scrape(self) -> None:
        with self._lock:
            self.scrape += 1

    def _script(self, device: int) -> list[dict]:
        return [
            s
            for s in self.data.get("script", ())
            if s.get("device") == device and self.scrape >= int(s.get("from_scrape", 0))
        ]

    def _device_state(self, handle: ReplayHandle) -> tuple[bool, bool, dict]:
        """(lost, hang, overrides) for the GPU of ``handle`` at the current scrape."""
        lost = hang = False
        overrides: dict = {}
        for step in self._script(handle.index):
            lost = lost or bool(step.get("lost"))
            hang = hang or bool(step.get("hang"))
            overrides.update(step.get("set", {}))
        return lost, hang, overrides

    def _lookup(self, handle: ReplayHandle, key: str) -> Any:
        lost, hang, overrides = self._device_state(handle)
        if hang:
            time.sleep(3600)  # a hung driver call; the collector's deadline abandons this thread
        if lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        calls = handle.data.get("calls", {})
        if handle.mig_index is None and key in overrides:
            value = overrides[key]
        elif key in calls:
            value = calls[key]
        else:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        rate = handle.data.get("per_second", {}).get(key)
        if rate and isinstance(value, int | float):
            value = type(value)(value + rate * (time.monotonic() - self._t0))
        return _answer(value)

    # -- system ---------------------------------------------------------------------------------
    def nvmlInit(self) -> None:
        self.initialized = True

    def nvmlShutdown(self) -> None:
        self.initialized = False

    def nvmlSystemGetDriverVersion(self) -> str:
        return _answer(self.data.get("system", {}).get("nvmlSystemGetDriverVersion", ""))

    def nvmlDeviceGetCount(self) -> int:
        return len(self._handles)

    def nvmlDeviceGetHandleByIndex(self, index: int) -> ReplayHandle:
        if not 0 <= index < len(self._handles):
            raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
        return self._handles[index]

    # -- MIG ------------------------------------------------------------------------------------
    def nvmlDeviceGetMaxMigDeviceCount(self, handle: ReplayHandle) -> int:
        return self._lookup(handle, "nvmlDeviceGetMaxMigDeviceCount")

    def nvmlDeviceGetMigDeviceHandleByIndex(self, handle: ReplayHandle, index: int) -> ReplayHandle:
        self._lookup(handle, "nvmlDeviceGetMigMode")  # a lost parent stays lost
        migs = handle.data.get("mig_devices", [])
        if not 0 <= index < len(migs) or migs[index] is None:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        return ReplayHandle(handle.index, migs[index], index, handle)

    # -- helpers --------------------------------------------------------------------------------
    def field_values(self, handle: ReplayHandle, field_ids: list[tuple[int, int] | int]) -> list[FieldAnswer]:
        lost, hang, overrides = self._device_state(handle)
        if hang:
            time.sleep(3600)
        if lost:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST)
        fields = handle.data.get("fields", {})
        rates = handle.data.get("fields_per_second", {})
        out: list[FieldAnswer] = []
        for fid in field_ids:
            key = str(fid[0] if isinstance(fid, tuple) else fid)
            value = overrides.get(f"field:{key}", fields.get(key, {"error": pynvml.NVML_ERROR_NOT_SUPPORTED}))
            if isinstance(value, dict):
                out.append((int(value.get("error", pynvml.NVML_ERROR_NOT_SUPPORTED)), None))
            else:
                rate = rates.get(key, 0)
                out.append((0, float(value) + rate * (time.monotonic() - self._t0)))
        return out

    def gpm_sample(self, handle: ReplayHandle, gpu_instance_id: int | None = None) -> Any:
        target = handle
        if gpu_instance_id is not None:
            for i, mig in enumerate(handle.data.get("mig_devices", [])):
                if mig and mig.get("calls", {}).get("nvmlDeviceGetGpuInstanceId") == gpu_instance_id:
                    target = ReplayHandle(handle.index, mig, i, handle)
                    break
            else:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_FOUND)
        self._lookup(handle, "nvmlDeviceGetName")  # lost / hang apply to GPM too
        if "gpm" not in target.data:
            raise pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED)
        return SimpleNamespace(handle=target)

    def gpm_free(self, sample: Any) -> None:
        """Nothing to free in a replay."""

    def gpm_metrics(self, sample1: Any, sample2: Any, metric_ids: list[int]) -> dict[int, FieldAnswer]:
        gpm = sample2.handle.data.get("gpm", {})
        out: dict[int, FieldAnswer] = {}
        for metric_id in metric_ids:
            value = gpm.get(str(metric_id), {"error": pynvml.NVML_ERROR_NOT_SUPPORTED})
            if isinstance(value, dict):
                out[metric_id] = (int(value.get("error", pynvml.NVML_ERROR_NOT_SUPPORTED)), None)
            else:
                out[metric_id] = (0, float(value))
        return out

    def same_handle(self, a: Any, b: Any) -> bool:
        return a is b

    # -- events ---------------------------------------------------------------------------------
    def nvmlEventSetCreate(self) -> Any:
        return SimpleNamespace(registered=[])

    def nvmlDeviceRegisterEvents(self, handle: ReplayHandle, mask: int, event_set: Any) -> None:
        event_set.registered.append(handle)

    def nvmlEventSetFree(self, event_set: Any) -> None:
        event_set.registered.clear()

    def nvmlEventSetWait(self, event_set: Any, timeout_ms: int) -> Any:
        """Deliver each scripted ``xid`` step once, when its scrape has come; else time out."""
        deadline = time.monotonic() + timeout_ms / 1000
        while True:
            with self._lock:
                for n, step in enumerate(self.data.get("script", ())):
                    if "xid" not in step or n in self._delivered_xids:
                        continue
                    if self.scrape < int(step.get("from_scrape", 0)):
                        continue
                    handle = self._handles[int(step["device"])]
                    if handle not in event_set.registered:
                        continue
                    self._delivered_xids.add(n)
                    return SimpleNamespace(
                        device=handle,
                        eventType=pynvml.nvmlEventTypeXidCriticalError,
                        eventData=int(step["xid"]),
                        gpuInstanceId=0xFFFFFFFF,
                        computeInstanceId=0xFFFFFFFF,
                    )
            if time.monotonic() >= deadline:
                raise pynvml.NVMLError(pynvml.NVML_ERROR_TIMEOUT)
            time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))

    # -- everything else: the recorded per-device calls -------------------------------------------
    def __getattr__(self, name: str) -> Any:
        if not name.startswith("nvml"):
            raise AttributeError(name)

        def call(handle: ReplayHandle, *args: Any, **kwargs: Any) -> Any:
            if not isinstance(handle, ReplayHandle):
                raise pynvml.NVMLError(pynvml.NVML_ERROR_INVALID_ARGUMENT)
            extra = [f"v{kwargs['version'] >> 24}"] if kwargs.get("version") else []
            return self._lookup(handle, call_key(name, [*args, *extra]))

        return call


def load_backend(replay_path: str | None) -> RealNvml | ReplayNvml:
    """The backend the ``--collector.gpu.nvml-replay`` flag selects (real pynvml by default)."""
    if replay_path:
        return ReplayNvml.load(replay_path)
    return RealNvml()
