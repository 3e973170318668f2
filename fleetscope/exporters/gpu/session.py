"""One NVML session per exporter process, shared by the ``gpu`` and ``xid`` collectors.

It loads the backend (real pynvml or a replay fixture), initialises NVML under a deadline,
discovers the GPUs and their MIG devices once, and keeps what both collectors need: identities
(for labels and for matching a kmsg PCI address to a GPU), one deadline worker per GPU, and the set
of GPUs an XID 79 said have fallen off the bus.
"""

from __future__ import annotations

import logging
import re
import threading
import time
from dataclasses import dataclass, field
from typing import Any

import pynvml

from fleetscope.exporters.gpu.deadline import DeadlineWorker
from fleetscope.exporters.gpu.nvml import LOST_CODES, RealNvml, ReplayNvml, load_backend, text

log = logging.getLogger("fleetscope.exporters.gpu")

DEFAULT_TIMEOUT = 2.0
#: After a failed start (no NVML), how long to wait before trying again.
RETRY_AFTER = 60.0


class NvmlUnavailable(RuntimeError):
    """NVML could not be loaded or initialised: no GPU series from this node."""


@dataclass
class MigDevice:
    """One MIG device (GPU instance) of a GPU."""

    handle: Any
    gpu_instance_id: int
    profile: str
    uuid: str
    #: UUIDs of every MIG device (compute instance) of this GPU instance; pods may hold any of them.
    uuids: list[str] = field(default_factory=list)
    unsupported: set[str] = field(default_factory=set)
    gpm_prev: Any = None


@dataclass
class GpuDevice:
    """What discovery learnt about one GPU, plus per-GPU state the collector keeps."""

    index: int
    handle: Any = None
    uuid: str = ""
    bus_id: str = ""
    name: str = ""
    mig: list[MigDevice] = field(default_factory=list)
    mig_enabled: bool = False
    #: Keys of calls/fields that answered NotSupported: never asked again.
    unsupported: set[str] = field(default_factory=set)
    gpm_supported: bool | None = None
    gpm_prev: Any = None
    nvlink_prev: tuple[float, float] | None = None
    worker: DeadlineWorker | None = None

    def identity_labels(self) -> tuple[str, str, str, str, str]:
        return (str(self.index), self.uuid, self.bus_id, f"nvidia{self.index}", self.name)


def mig_profile(mig_name: str) -> str:
    """``NVIDIA H100 80GB HBM3 MIG 3g.40gb`` -> ``3g.40gb`` (dcgm-exporter's GPU_I_PROFILE).

    A MIG device that is one of several compute instances of a GPU instance is named
    ``... MIG 1c.3g.71gb``; the GPU-instance profile is the part after the ``<n>c.`` prefix.
    """
    _, sep, profile = mig_name.rpartition("MIG ")
    profile = profile.strip() if sep else mig_name.strip()
    return re.sub(r"^\d+c\.", "", profile)


def normalize_bus_id(bus_id: str) -> tuple[int, int, int] | None:
    """``00000000:53:00.0`` and kmsg's ``0000:53:00`` -> ``(0, 0x53, 0)`` (domain, bus, device)."""
    parts = bus_id.strip().lower().split(":")
    if len(parts) < 2:
        return None
    try:
        if len(parts) == 2:  # bus:device.fn
            domain, bus, dev = 0, int(parts[0], 16), int(parts[1].split(".")[0], 16)
        else:
            domain, bus, dev = int(parts[-3], 16), int(parts[-2], 16), int(parts[-1].split(".")[0], 16)
    except ValueError:
        return None
    return domain, bus, dev


class NvmlSession:
    def __init__(self, replay_path: str | None, timeout: float = DEFAULT_TIMEOUT) -> None:
        self.replay_path = replay_path
        self.timeout = timeout
        self.backend: RealNvml | ReplayNvml | None = None
        self.devices: list[GpuDevice] = []
        self.driver_version = ""
        self.started = False
        self._failed_at: float | None = None
        self._failure = ""
        self._lock = threading.Lock()
        self._system = DeadlineWorker("nvml-system")
        self._fallen_off: set[int] = set()

    # -- start ----------------------------------------------------------------------------------
    def ensure_started(self) -> None:
        """Load and initialise NVML and discover GPUs once; raise :class:`NvmlUnavailable` if not."""
        with self._lock:
            if self.started:
                return
            if self._failed_at is not None and time.monotonic() - self._failed_at < RETRY_AFTER:
                raise NvmlUnavailable(self._failure)
            try:
                self._system.run(self.timeout * 5, self._start)
                self.started = True
                self._failed_at = None
            except Exception as exc:  # noqa: BLE001 - any start failure means "no NVML"
                first = self._failed_at is None and not self._failure
                self._failure = _explain(exc)
                self._failed_at = time.monotonic()
                if first:
                    log.error("%s", self._failure)
                raise NvmlUnavailable(self._failure) from None

    def _start(self) -> None:
        backend = load_backend(self.replay_path)
        backend.nvmlInit()
        self.backend = backend
        self.driver_version = text(backend.nvmlSystemGetDriverVersion())
        count = backend.nvmlDeviceGetCount()
        self.devices = [self._discover(i) for i in range(count)]
        log.info(
            "NVML %s: %d GPU(s), driver %s",
            "replay of " + str(self.replay_path) if backend.replay else "ready",
            count,
            self.driver_version,
        )

    def _discover(self, index: int) -> GpuDevice:
        b = self.backend
        assert b is not None
        dev = GpuDevice(index=index, worker=DeadlineWorker(f"nvml-gpu{index}"))
        try:
            dev.handle = b.nvmlDeviceGetHandleByIndex(index)
            dev.name = text(b.nvmlDeviceGetName(dev.handle))
            dev.uuid = text(b.nvmlDeviceGetUUID(dev.handle))
            dev.bus_id = text(b.nvmlDeviceGetPciInfo(dev.handle).busId)
        except pynvml.NVMLError as exc:
            log.warning("GPU %d: discovery failed (%s); reported as lost", index, exc)
            if exc.value in LOST_CODES:
                self._fallen_off.add(index)
            return dev
        try:
            current, _pending = b.nvmlDeviceGetMigMode(dev.handle)
            dev.mig_enabled = current == pynvml.NVML_DEVICE_MIG_ENABLE
        except pynvml.NVMLError:
            dev.mig_enabled = False
        if dev.mig_enabled:
            dev.mig = self._discover_mig(dev)
        return dev

    def _discover_mig(self, dev: GpuDevice) -> list[MigDevice]:
        b = self.backend
        assert b is not None
        migs: list[MigDevice] = []
        try:
            count = b.nvmlDeviceGetMaxMigDeviceCount(dev.handle)
        except pynvml.NVMLError:
            return migs
        by_instance: dict[int, MigDevice] = {}
        for i in range(count):
            try:
                h = b.nvmlDeviceGetMigDeviceHandleByIndex(dev.handle, i)
            except pynvml.NVMLError:
                continue  # an empty slot answers NotFound
            try:
                gi = int(b.nvmlDeviceGetGpuInstanceId(h))
                uuid = text(b.nvmlDeviceGetUUID(h))
                if gi in by_instance:
                    # Another compute instance of the same GPU instance: memory and GPM are per
                    # GPU instance, so it adds no series of its own (that would duplicate them).
                    by_instance[gi].uuids.append(uuid)
                    continue
                mig = MigDevice(
                    handle=h,
                    gpu_instance_id=gi,
                    profile=mig_profile(text(b.nvmlDeviceGetName(h))),
                    uuid=uuid,
                    uuids=[uuid],
                )
                by_instance[gi] = mig
                migs.append(mig)
            except pynvml.NVMLError as exc:
                log.warning("GPU %d MIG device %d: %s", dev.index, i, exc)
        return migs

    # -- state shared with the xid collector ------------------------------------------------------
    def mark_fallen_off(self, index: int) -> None:
        if index not in self._fallen_off:
            log.error("GPU %d has fallen off the bus (XID 79); no more NVML calls to it", index)
        self._fallen_off.add(index)

    def fallen_off(self, index: int) -> bool:
        return index in self._fallen_off

    def by_bus_id(self, bus_id: str) -> GpuDevice | None:
        want = normalize_bus_id(bus_id)
        if want is None:
            return None
        for dev in self.devices:
            if normalize_bus_id(dev.bus_id) == want:
                return dev
        return None

    def by_handle(self, handle: Any) -> GpuDevice | None:
        if self.backend is None:
            return None
        for dev in self.devices:
            if dev.handle is not None and self.backend.same_handle(dev.handle, handle):
                return dev
        return None

    def close(self) -> None:
        for dev in self.devices:
            if dev.worker:
                dev.worker.close()
        self._system.close()


def _explain(exc: BaseException) -> str:
    if isinstance(exc, pynvml.NVMLError):
        if exc.value == pynvml.NVML_ERROR_LIBRARY_NOT_FOUND:
            return (
                "NVML is not available (libnvidia-ml.so.1 not found: no NVIDIA driver on this node?); "
                "the gpu collector reports success 0 and no GPU series"
            )
        if exc.value == pynvml.NVML_ERROR_DRIVER_NOT_LOADED:
            return "NVML: the NVIDIA driver is not loaded; the gpu collector reports no GPU series"
        return f"NVML could not start: {exc}"
    return f"NVML could not start: {exc}"


_sessions: dict[tuple, NvmlSession] = {}
_sessions_lock = threading.Lock()


def session_for(replay_path: str | None, timeout: float) -> NvmlSession:
    """The process-wide session for these options (the gpu and xid collectors share it)."""
    key = (replay_path, timeout)
    with _sessions_lock:
        if key not in _sessions:
            _sessions[key] = NvmlSession(replay_path, timeout)
        return _sessions[key]


def session_from_options(options: Any) -> NvmlSession:
    replay = getattr(options, "gpu_nvml_replay", None)
    timeout = float(getattr(options, "gpu_nvml_timeout", DEFAULT_TIMEOUT) or DEFAULT_TIMEOUT)
    return session_for(replay, timeout)


def forget_sessions() -> None:
    """Drop all sessions (tests that build several exporters in one process)."""
    with _sessions_lock:
        for s in _sessions.values():
            s.close()
        _sessions.clear()
