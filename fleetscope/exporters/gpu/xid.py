"""The ``xid`` collector: XID errors from NVML critical-XID events and from ``/dev/kmsg``.

Two background threads feed one tally:

* NVML events (``nvmlEventTypeXidCriticalError``) on every GPU, through the shared NVML session.
* The kernel log: lines ``NVRM: Xid (PCI:0000:53:00): 79, pid=..., GPU has fallen off the bus.``
  NVML cannot deliver some XIDs (79: the GPU is gone; 119/120 when GSP hangs), so DCGM tails the
  kernel log too. ``--collector.xid.kmsg-path`` points the reader elsewhere (a fixture file or FIFO
  in tests). On the ``/dev/kmsg`` character device reading starts at the end (only new records);
  a regular file or FIFO is read from its beginning and then followed.

One XID often shows up in both sources; a second report of the same XID on the same GPU from the
other source within ``DEDUPE_SECONDS`` is not counted again. XID 79 marks the GPU as fallen off the
bus in the shared session, so the gpu collector reports ``fleetscope_gpu_up 0`` for it and stops
calling NVML on it.

Series: ``fleetscope_gpu_xid_errors_total{<gpu labels>, xid}`` (count since the exporter started)
and ``DCGM_FI_DEV_XID_ERRORS{<gpu labels>, err_code, err_msg}`` (the last XID, dcgm-exporter's
compatibility gauge). An XID whose PCI address matches no known GPU is kept with empty GPU labels
and its ``pci_bus_id``.
"""

from __future__ import annotations

import argparse
import errno
import os
import re
import select
import stat
import threading
import time
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import pynvml
from prometheus_client.metrics_core import Metric as MetricFamily
from prometheus_client.samples import Sample

from fleetscope import contract as c
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.exporters.gpu import session as sessions
from fleetscope.exporters.gpu.session import NvmlUnavailable
from fleetscope.xids import message

KMSG_DEFAULT = "/dev/kmsg"
#: Longest kmsg line kept while waiting for its newline (the kernel's records are under 1 KiB).
_MAX_LINE = 64 * 1024
DEDUPE_SECONDS = 5.0
XID_FALLEN_OFF_BUS = 79

#: ``NVRM: Xid (PCI:0000:53:00): 79, pid=...`` anywhere in a kmsg record or a dmesg line.
#: The XID is at most 10 digits (an XID is a small number; a longer run is no XID line).
KMSG_XID = re.compile(r"NVRM: Xid \(PCI:([0-9A-Fa-f:.]{1,64})\): (\d{1,10})(?!\d)")


def parse_kmsg_line(line: str) -> tuple[str, int] | None:
    """``(pci address, xid)`` of an NVRM Xid line, else None."""
    m = KMSG_XID.search(line)
    if not m:
        return None
    return m.group(1), int(m.group(2))


@dataclass
class _Gpu:
    """The label values of the GPU an XID belongs to."""

    key: str
    labels: tuple[str, str, str, str, str]


class XidTally:
    """XID counts per GPU, the last XID per GPU, and cross-source de-duplication."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.counts: dict[tuple[str, int], int] = {}
        self.last: dict[str, int] = {}
        self.gpus: dict[str, _Gpu] = {}
        self._recent: list[tuple[float, str, int, str]] = []  # (time, gpu key, xid, source)

    def record(self, gpu: _Gpu, xid: int, source: str, now: float | None = None) -> bool:
        """Count one XID; False when it is the other source's report of one already counted."""
        now = time.monotonic() if now is None else now
        with self._lock:
            self._recent = [r for r in self._recent if now - r[0] <= DEDUPE_SECONDS]
            for i, (_t, key, code, src) in enumerate(self._recent):
                if key == gpu.key and code == xid and src != source:
                    del self._recent[i]
                    return False
            self._recent.append((now, gpu.key, xid, source))
            self.gpus[gpu.key] = gpu
            self.counts[(gpu.key, xid)] = self.counts.get((gpu.key, xid), 0) + 1
            self.last[gpu.key] = xid
            return True

    def snapshot(self) -> tuple[dict[tuple[str, int], int], dict[str, int], dict[str, _Gpu]]:
        with self._lock:
            return dict(self.counts), dict(self.last), dict(self.gpus)


class XidCollector(Collector):
    name = "xid"
    description = "XID errors from NVML events and the kernel log (/dev/kmsg)"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        g = parser.add_argument_group("xid collector")
        g.add_argument(
            "--collector.xid.kmsg-path",
            dest="xid_kmsg_path",
            default=KMSG_DEFAULT,
            metavar="PATH",
            help="kernel log to follow for 'NVRM: Xid' lines (default /dev/kmsg; a file or "
            "FIFO is read from its start); empty to disable",
        )
        g.add_argument(
            "--collector.xid.no-nvml-events",
            dest="xid_no_nvml_events",
            action="store_true",
            help="do not listen for NVML critical-XID events",
        )

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.session = sessions.session_from_options(ctx.options)
        self.tally = XidTally()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self.kmsg_path = str(ctx.option("xid_kmsg_path", KMSG_DEFAULT) or "")
        if self.kmsg_path:
            self._start_thread(self._kmsg_loop, "xid-kmsg")
        if not ctx.option("xid_no_nvml_events", False):
            self._start_thread(self._nvml_loop, "xid-nvml")

    def _start_thread(self, target: Any, name: str) -> None:
        t = threading.Thread(target=target, name=name, daemon=True)
        t.start()
        self._threads.append(t)

    # -- sources ---------------------------------------------------------------------------------
    def _gpu_for_bus(self, pci: str) -> _Gpu:
        dev = None
        try:
            self.session.ensure_started()
            dev = self.session.by_bus_id(pci)
        except NvmlUnavailable:
            pass
        if dev is None:
            return _Gpu(key=f"pci:{pci.lower()}", labels=("", "", pci, "", ""))
        return _Gpu(key=f"gpu:{dev.index}", labels=dev.identity_labels())

    def handle_kmsg_line(self, line: str) -> None:
        parsed = parse_kmsg_line(line)
        if parsed is None:
            return
        pci, xid = parsed
        gpu = self._gpu_for_bus(pci)
        counted = self.tally.record(gpu, xid, "kmsg")
        self.log.warning(
            "XID %d on GPU %s (PCI %s) from the kernel log%s: %s",
            xid,
            gpu.labels[0] or "?",
            pci,
            "" if counted else " (already counted from NVML)",
            message(xid),
        )
        if xid == XID_FALLEN_OFF_BUS and gpu.key.startswith("gpu:"):
            self.session.mark_fallen_off(int(gpu.labels[0]))

    def _kmsg_loop(self) -> None:
        path = self.kmsg_path
        while not self._stop.is_set():
            try:
                st = os.stat(path)
            except OSError as exc:
                self.skip("kmsg_unreadable", f"{path}: {exc.strerror}")
                if self._stop.wait(10):
                    return
                continue
            try:
                if stat.S_ISCHR(st.st_mode):
                    self._follow_kmsg_device(path)
                else:
                    self._follow_file(path, fifo=stat.S_ISFIFO(st.st_mode))
            except OSError as exc:
                self.skip("kmsg_unreadable", f"{path}: {exc.strerror or exc}")
                if self._stop.wait(10):
                    return

    def _follow_kmsg_device(self, path: str) -> None:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
        try:
            os.lseek(fd, 0, os.SEEK_END)  # only records written from now on
            while not self._stop.is_set():
                ready, _, _ = select.select([fd], [], [], 0.5)
                if not ready:
                    continue
                try:
                    record = os.read(fd, 8192)
                except BlockingIOError:
                    continue
                except OSError as exc:
                    if exc.errno == errno.EPIPE:  # the ring buffer overwrote records we had not read
                        continue
                    raise
                self.handle_kmsg_line(record.decode(errors="replace"))
        finally:
            os.close(fd)

    def _follow_file(self, path: str, fifo: bool) -> None:
        with open(path, errors="replace") as f:
            pending = ""
            while not self._stop.is_set():
                chunk = f.readline(_MAX_LINE)
                if chunk:
                    pending = (pending + chunk)[-_MAX_LINE:]  # an endless line costs 64 KiB, no more
                    if pending.endswith("\n"):
                        self.handle_kmsg_line(pending)
                        pending = ""
                    continue
                if fifo:
                    if pending:
                        self.handle_kmsg_line(pending)
                    return  # writer closed; reopen and wait for the next one
                if self._stop.wait(0.2):
                    return

    def _nvml_loop(self) -> None:
        while not self._stop.is_set():
            try:
                self.session.ensure_started()
                break
            except NvmlUnavailable:
                if self._stop.wait(sessions.RETRY_AFTER):
                    return
        b = self.session.backend
        if b is None:
            return
        event_set = None
        try:
            event_set = b.nvmlEventSetCreate()
            if self._register_xid_events(b, event_set):
                self._wait_for_events(b, event_set)
        except pynvml.NVMLError as exc:
            self.log.warning("NVML XID events unavailable: %s; kmsg still watched", exc)
        finally:
            if event_set is not None:
                try:
                    b.nvmlEventSetFree(event_set)
                except pynvml.NVMLError:
                    pass

    def _register_xid_events(self, b: Any, event_set: Any) -> int:
        """Registers every GPU that supports XID events in ``event_set``; how many were registered."""
        registered = 0
        for dev in self.session.devices:
            if dev.handle is None:
                continue
            try:
                supported = b.nvmlDeviceGetSupportedEventTypes(dev.handle)
            except pynvml.NVMLError:
                supported = pynvml.nvmlEventTypeXidCriticalError
            mask = supported & pynvml.nvmlEventTypeXidCriticalError
            if not mask:
                continue
            try:
                b.nvmlDeviceRegisterEvents(dev.handle, mask, event_set)
                registered += 1
            except pynvml.NVMLError as exc:
                self.log.info("GPU %d: no NVML XID events (%s); kmsg still watched", dev.index, exc)
        return registered

    def _wait_for_events(self, b: Any, event_set: Any) -> None:
        while not self._stop.is_set():
            try:
                data = b.nvmlEventSetWait(event_set, 500)
            except pynvml.NVMLError as exc:
                if exc.value == pynvml.NVML_ERROR_TIMEOUT:
                    continue
                self.skip("nvml_event_error", f"nvmlEventSetWait: {exc}")
                if self._stop.wait(5):
                    return
                continue
            if not data.eventType & pynvml.nvmlEventTypeXidCriticalError:
                continue
            dev = self.session.by_handle(data.device)
            xid = int(data.eventData)
            gpu = (
                _Gpu(key=f"gpu:{dev.index}", labels=dev.identity_labels())
                if dev
                else _Gpu(key="gpu:?", labels=("", "", "", "", ""))
            )
            self.tally.record(gpu, xid, "nvml")
            self.log.warning("XID %d on GPU %s from NVML: %s", xid, gpu.labels[0] or "?", message(xid))
            if xid == XID_FALLEN_OFF_BUS and dev is not None:
                self.session.mark_fallen_off(dev.index)

    # -- exposition ------------------------------------------------------------------------------
    def _labels(self, gpu: _Gpu) -> dict[str, str]:
        index, uuid, bus, device, model = gpu.labels
        return {
            "gpu": index,
            "UUID": uuid,
            "pci_bus_id": bus,
            "device": device,
            "modelName": model,
            self.ctx.node_label: self.ctx.node_name,
            "DCGM_FI_DRIVER_VERSION": self.session.driver_version,
        }

    def collect(self) -> Iterable[MetricFamily]:
        counts, last, gpus = self.tally.snapshot()
        total = MetricFamily(
            c.GPU_XID_ERRORS_TOTAL.removesuffix("_total"), c.GPU_XID_ERRORS_TOTAL.help, "counter"
        )
        for (key, xid), n in sorted(counts.items()):
            labels = {**self._labels(gpus[key]), "xid": str(xid)}
            total.samples.append(Sample(c.GPU_XID_ERRORS_TOTAL, labels, float(n), None, None))
        gauge = MetricFamily(c.DCGM_FI_DEV_XID_ERRORS, c.DCGM_FI_DEV_XID_ERRORS.help, "gauge")
        for key, xid in sorted(last.items()):
            labels = {**self._labels(gpus[key]), "err_code": str(xid), "err_msg": message(xid)}
            gauge.samples.append(Sample(c.DCGM_FI_DEV_XID_ERRORS, labels, float(xid), None, None))
        return [f for f in (total, gauge) if f.samples]

    def close(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=1.0)
