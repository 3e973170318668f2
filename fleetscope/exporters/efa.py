"""The ``efa`` collector: AWS Elastic Fabric Adapter hardware counters from sysfs.

Every EFA device under ``<sysfs>/class/infiniband`` has two counter directories (driver r1.14.0
split them): device-level ``hw_counters/`` (admin and verbs errors, exported with ``port=""``) and
port-level ``ports/<n>/hw_counters/`` (traffic and, on Nitro v4+ with driver r2.17.0+, the SRD
retransmit and impaired-connection counters). Every numeric file becomes
``efa_<file>_total{Hostname, device, port}`` with the kernel's name kept verbatim, including counters
the contract does not list yet; ``lifespan`` (the kernel's cache window, in ms) becomes the gauge
``efa_lifespan_seconds``. A counter file that is absent (older drivers lack the SRD counters) gives no
series, never a 0.

Other RDMA devices (Mellanox ``mlx5_*`` and the like) are ignored: a device is EFA when its
``device/driver`` link points at the ``efa`` driver, else when its PCI vendor is Amazon's ``0x1d0f``,
else (no PCI information, as in some containers) when its name looks like an EFA device.

Speed: a p5.48xlarge has 32 EFA devices and about 1,200 counter files. The directory layout is
listed once and cached; each scrape re-lists only ``class/infiniband`` itself (one ``listdir``) and
rebuilds the layout when the device set changes (hot-plug, driver reload), when a read says a file
vanished, or every :data:`RELIST_SECONDS`. Counter files stay open and are re-read with ``pread`` at offset 0
(one syscall each) in one tight loop, which also keeps the values of one device close in time (the kernel
refreshes a whole counter group at most once per ``lifespan``).
"""

from __future__ import annotations

import errno
import os
import re
import stat
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily
from prometheus_client.samples import Sample

from fleetscope import contract
from fleetscope.exporters import safe_read
from fleetscope.exporters.base import Collector, NodeContext

#: Rebuild the cached layout at least this often, even when nothing seems to have changed.
RELIST_SECONDS = 300.0
#: After a read error that suggests the layout changed, relist at most this often.
STALE_RELIST_SECONDS = 10.0

#: PCI vendor id of Amazon (``PCI_VENDOR_ID_AMAZON`` in the EFA driver).
AMAZON_PCI_VENDOR = "0x1d0f"
#: Names EFA devices get: ``rdmap<bus>s<slot>`` (rdma-core's PCI naming) or ``efa_<n>``/``efa<n>``.
EFA_NAME = re.compile(r"^(rdmap\d+s\d+(f\d+)?|efa_?\d+)$")
_COUNTER_NAME = re.compile(r"^[a-zA-Z_][a-zA-Z0-9_]*$")
_LIFESPAN = "lifespan"
_OPEN_FLAGS = os.O_RDONLY | os.O_NONBLOCK | getattr(os, "O_CLOEXEC", 0)
#: Counter files read per scrape: a p5.48xlarge has about 1,200; a tree with more (a hostile or
#: broken sysfs) is cut here and the rest counted as ``series_limit``.
MAX_COUNTER_FILES = 8192
#: Bytes read of one counter file: a u64 in decimal and a newline fit in 21.
_COUNTER_BYTES = 64
#: errnos that mean "this file or device is gone": relist soon.
_GONE = {errno.ENOENT, errno.ENODEV, errno.ENXIO}


@dataclass(frozen=True)
class _CounterFile:
    """One counter file, with its sample name and label set rendered once per layout."""

    path: str
    counter: str
    sample_name: str
    labels: dict[str, str]


@dataclass(frozen=True)
class _Layout:
    """What to read on each scrape: every counter file of every EFA device."""

    devices: tuple[str, ...]
    files: tuple[_CounterFile, ...]


def _natural_key(name: str) -> tuple:
    """``rdmap79s0`` before ``rdmap113s0``."""
    return tuple(int(part) if part.isdigit() else part for part in re.split(r"(\d+)", name))


def is_efa_device(dev_dir: str, name: str) -> bool:
    """Decide whether ``<sysfs>/class/infiniband/<name>`` is an EFA device (see module docstring)."""
    try:
        driver = os.path.basename(os.readlink(os.path.join(dev_dir, "device", "driver")))
    except OSError:
        driver = ""
    if driver:
        return driver == "efa"
    try:
        vendor = safe_read.read_text(os.path.join(dev_dir, "device", "vendor"), 64).strip().lower()
    except OSError:  # absent, or refused (not a regular file, too long): no vendor to go by
        vendor = ""
    if vendor:
        return vendor == AMAZON_PCI_VENDOR
    return bool(EFA_NAME.match(name))


class EfaCollector(Collector):
    """EFA hw counters of every EFA device on this node."""

    name = "efa"
    description = "AWS EFA hw counters from sysfs (class/infiniband/*/[ports/*/]hw_counters)"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.root = os.path.join(str(ctx.sysfs), "class", "infiniband")
        self._layout: _Layout | None = None
        self._listed_names: frozenset[str] = frozenset()
        self._listed_at = 0.0
        self._stale = False
        #: Open descriptors of counter files, re-read with ``pread`` at offset 0: sysfs attributes
        #: are seq_files, and ``seq_read_iter`` (fs/seq_file.c) drops its buffer and runs the
        #: attribute's show() again for a read at offset 0, so the value is fresh. One syscall per
        #: counter instead of three. Bounded by :attr:`_fd_budget`; beyond it files are opened per read.
        #: (A file replaced by rename, which sysfs never does, is seen again at the next relist.)
        self._fds: dict[str, int] = {}
        self._fd_budget = _fd_budget()

    # --- layout ---------------------------------------------------------------------------
    def _current_layout(self) -> _Layout:
        try:
            names = frozenset(os.listdir(self.root))
        except FileNotFoundError:
            names = frozenset()  # no RDMA devices on this node: nothing to report, not an error
        now = time.monotonic()
        layout = self._layout
        if (
            layout is None
            or names != self._listed_names
            or now - self._listed_at > RELIST_SECONDS
            or (self._stale and now - self._listed_at > STALE_RELIST_SECONDS)
        ):
            layout = self._scan(names)
            self._layout, self._listed_names, self._listed_at, self._stale = layout, names, now, False
            keep = {cf.path for cf in layout.files}
            for path in [p for p in self._fds if p not in keep]:
                self._forget(path)
        return layout

    def _scan(self, names: Iterable[str]) -> _Layout:
        devices: list[str] = []
        files: list[_CounterFile] = []
        for name in sorted(names, key=_natural_key):
            dev_dir = os.path.join(self.root, name)
            if not is_efa_device(dev_dir, name):
                continue
            devices.append(name)
            files.extend(self._counter_files(os.path.join(dev_dir, "hw_counters"), name, ""))
            ports_dir = os.path.join(dev_dir, "ports")
            try:
                ports = sorted(os.listdir(ports_dir), key=_natural_key)
            except OSError:
                ports = []
            for port in ports:
                files.extend(self._counter_files(os.path.join(ports_dir, port, "hw_counters"), name, port))
        if len(files) > MAX_COUNTER_FILES:
            self.skip(
                "series_limit",
                f"{self.root}: {len(files)} counter files; reading the first {MAX_COUNTER_FILES}",
            )
            files = files[:MAX_COUNTER_FILES]
        return _Layout(tuple(devices), tuple(files))

    def _counter_files(self, directory: str, device: str, port: str) -> list[_CounterFile]:
        try:
            entries = sorted(os.listdir(directory))
        except FileNotFoundError:
            return []  # e.g. device-level hw_counters before driver r1.14.0
        except OSError as exc:
            self.skip("unreadable", f"{directory}: {exc.strerror or exc}")
            return []
        labels = {self.ctx.node_label: self.ctx.node_name, "device": device, "port": port}
        out = []
        for entry in entries:
            if not _COUNTER_NAME.match(entry):
                self.skip("invalid_name", os.path.join(directory, entry))
                continue
            sample = contract.EFA_LIFESPAN if entry == _LIFESPAN else contract.efa_metric_name(entry)
            out.append(_CounterFile(os.path.join(directory, entry), entry, sample, labels))
        return out

    # --- scrape ---------------------------------------------------------------------------
    def collect(self) -> Iterator[MetricFamily]:
        layout = self._current_layout()
        labelnames = (self.ctx.node_label, "device", "port")
        counters: dict[str, CounterMetricFamily] = {}
        lifespan = GaugeMetricFamily(contract.EFA_LIFESPAN, contract.EFA_LIFESPAN.help, labels=labelnames)
        for cf in layout.files:
            raw = self._read(cf.path)
            if raw is None:
                continue
            text = raw.strip()
            if not text.isdigit():  # bytes.isdigit(): ASCII digits only
                # The driver prints a u64 in decimal: "1_000_000", "1.5e3", "+5" or "nan" is no reading.
                special = text.lstrip(b"+-").lower() in (b"nan", b"inf", b"infinity")
                negative = text[:1] == b"-" and text[1:].isdigit()
                self.skip("out_of_range" if special or negative else "unparsable", f"{cf.path}: {raw[:40]!r}")
                continue
            value: float = int(text) if len(text) <= 20 else 2**64
            if not safe_read.kernel_u64(value):
                # The driver prints u64 counters: nan, inf, negative or huge is not a reading.
                self.skip("out_of_range", f"{cf.path}: {raw[:40]!r}")
                continue
            if cf.counter == _LIFESPAN:
                lifespan.samples.append(Sample(cf.sample_name, cf.labels, value / 1000.0))
                continue
            family = counters.get(cf.counter)
            if family is None:
                known = contract.METRICS.get(cf.sample_name)
                help_text = known.help if known is not None else f"EFA hw counter {cf.counter}."
                family = CounterMetricFamily(cf.sample_name, help_text, labels=labelnames)
                counters[cf.counter] = family
            # Samples built directly: the label dict is rendered once per layout, not per scrape.
            family.samples.append(Sample(cf.sample_name, cf.labels, value))
        yield from counters.values()
        if lifespan.samples:
            yield lifespan

    def _read(self, path: str) -> bytes | None:
        """The file's content, or None (counted as skipped) when it cannot be read."""
        fd = self._fds.get(path)
        if fd is not None:
            try:
                return os.pread(fd, _COUNTER_BYTES, 0)
            except OSError as exc:
                self._forget(path)
                self._read_failed(path, exc)
                return None
        try:
            fd = os.open(path, _OPEN_FLAGS)
        except OSError as exc:
            self._read_failed(path, exc)
            return None
        keep = False
        try:
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                # A FIFO, socket or directory where a counter should be: never block on it.
                self.skip("not_regular_file", f"{path}: not a regular file")
                return None
            raw = os.pread(fd, _COUNTER_BYTES, 0)
            keep = len(self._fds) < self._fd_budget
            if keep:
                self._fds[path] = fd
            return raw
        except OSError as exc:
            self._read_failed(path, exc)
            return None
        finally:
            if not keep:
                os.close(fd)

    def _read_failed(self, path: str, exc: OSError) -> None:
        self.skip("unreadable", f"{path}: {exc.strerror or exc}")
        if exc.errno in _GONE:
            self._stale = True

    def _forget(self, path: str) -> None:
        fd = self._fds.pop(path, None)
        if fd is not None:
            try:
                os.close(fd)
            except OSError:
                pass

    def close(self) -> None:
        for path in list(self._fds):
            self._forget(path)


def _fd_budget() -> int:
    """How many counter files may stay open: half the descriptors left under the soft limit."""
    try:
        import resource

        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
    except (ImportError, OSError, ValueError):
        return 0
    if soft == resource.RLIM_INFINITY:
        soft = 1 << 20
    return max(0, (soft - 256) // 2)
