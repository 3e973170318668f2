"""``lustre`` collector: FSx for Lustre (any Lustre) client statistics, per mount.

Where the kernel puts the files depends on the Lustre version (see ``docs/lustre.md``):

=========  ==================================================  ==================================
version    llite ``stats`` (per mount, ``<fsname>-<sb id>``)    ``health_check``
=========  ==================================================  ==================================
2.10       ``<procfs>/fs/lustre/llite/<inst>/stats``           ``<sysfs>/fs/lustre/health_check``
                                                               (``<procfs>/fs/lustre/`` before)
2.12+      ``<debugfs>/lustre/llite/<inst>/stats`` (root only)  ``<sysfs>/fs/lustre/health_check``
=========  ==================================================  ==================================

Instances are the union of the ``llite`` directories under the three roots, so a 2.12+ client whose
debugfs this process cannot read still shows up (its stats are then reported as skipped, with the
fix in the message). A node without any of those directories has no Lustre: the collector yields
nothing and succeeds.

The ``mount`` label comes from the mount table (``<procfs>/1/mountinfo``, then ``self/mountinfo``,
then ``mounts``): a Lustre mount's source is ``<nid>[:<nid>]:/<fsname>[/subdir]``, matched to the
instance by file system name. When that is ambiguous (one file system mounted twice, two superblocks)
or the mount is not found, ``mount`` is the instance name.
"""

from __future__ import annotations

import math
import os
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily

from fleetscope import contract
from fleetscope.exporters import safe_read
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.exporters.lprocfs import Stats, parse_stats, units_per_second

#: ``<fsname>-<superblock id>``; the id is a (possibly hashed) kernel pointer in hex.
_INSTANCE = re.compile(r"^(?P<fs>.+)-(?P<sb>[0-9a-f]{8,16})$")
#: llite stats lines that are not VFS operations: ``opencount`` is a per-file open histogram and
#: ``openclosetime`` the time files stayed open (2.14+). Adding them to operation counts or times
#: would swamp the real operations (openclosetime sums run to years), so they are not exported.
_NOT_OPERATIONS = frozenset({"read_bytes", "write_bytes", "opencount", "openclosetime"})
#: Operations exported as 0 while the kernel omits them (it prints no line for 0 samples), so that
#: rate() sees their first increment. They exist in the llite opcode table of every version, and
#: where a version times operations (2.14+) it times all of these.
_ZERO_FILL = contract.LUSTRE_METADATA_OPERATIONS
#: How often an unresolved mount is looked up again, in seconds.
_MOUNT_RETRY_S = 60.0
#: Bytes read of one llite ``stats`` file (about 4 KiB on a real client); a larger one is refused
#: whole (``too_large``), as a cut-off file could pass a truncated number as a valid one.
STATS_LIMIT = 256 * 1024
#: Bytes read of a mount table (a node with thousands of container mounts has a few MB).
MOUNT_TABLE_LIMIT = 16 << 20
#: llite instances read per scrape (a real client has one per mount); more are counted, not read.
MAX_INSTANCES = 64
#: Operation names exported per instance (the llite opcode table has about 40); the rest are
#: counted (``series_limit``), so a stats file full of invented names cannot create series.
MAX_OPERATIONS = 128


@dataclass(frozen=True, slots=True)
class LustreMount:
    """One Lustre entry of the mount table."""

    source: str
    mount_point: str
    fsname: str
    #: Identifies the superblock: ``major:minor`` from mountinfo, else the source string.
    superblock: str
    #: Root of the mount within the file system (mountinfo field 4; ``/`` when unknown).
    root: str = "/"


def fsname_of_source(source: str) -> str | None:
    """``172.31.1.2@tcp:/abcdefgh/sub`` -> ``abcdefgh``; ``None`` if it is not a Lustre source."""
    _, sep, rest = source.rpartition(":/")
    if not sep:
        return None
    name = rest.split("/", 1)[0]
    return name or None


def _unescape(field: str) -> str:
    """Undo the kernel's octal escapes in mount table fields (``\\040`` is a space)."""
    if "\\" not in field:
        return field
    return re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), field)


def parse_mounts(text: str) -> list[LustreMount]:
    """The Lustre mounts of a ``/proc/mounts`` table (``source mountpoint fstype ...``)."""
    mounts = []
    for line in text.splitlines():
        parts = line.split()
        if len(parts) < 3 or parts[2] != "lustre":
            continue
        source = _unescape(parts[0])
        fsname = fsname_of_source(source)
        if fsname:
            mounts.append(LustreMount(source, _unescape(parts[1]), fsname, superblock=source))
    return mounts


def parse_mountinfo(text: str) -> list[LustreMount]:
    """The Lustre mounts of a ``/proc/<pid>/mountinfo`` table (see proc(5))."""
    mounts = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        fields, tail = left.split(), right.split()
        if len(fields) < 5 or len(tail) < 2 or tail[0] != "lustre":
            continue
        source = _unescape(tail[1])
        fsname = fsname_of_source(source)
        if fsname:
            mounts.append(
                LustreMount(
                    source, _unescape(fields[4]), fsname, superblock=fields[2], root=_unescape(fields[3])
                )
            )
    return mounts


def match_mounts(instances: Iterable[str], mounts: list[LustreMount]) -> dict[str, str]:
    """Mount point per llite instance, where the file system name makes the match unambiguous.

    Bind mounts share a superblock (the same ``major:minor``) with the mount they copy; the one
    showing the file system's root (or the first listed) represents that superblock.
    """
    by_fs: dict[str, dict[str, LustreMount]] = {}
    for m in mounts:
        groups = by_fs.setdefault(m.fsname, {})
        best = groups.get(m.superblock)
        if best is None or (best.root != "/" and m.root == "/"):
            groups[m.superblock] = m
    names: dict[str, list[str]] = {}
    for inst in instances:
        match = _INSTANCE.match(inst)
        if match:
            names.setdefault(match["fs"], []).append(inst)
    found = {}
    for fs, insts in names.items():
        groups = by_fs.get(fs, {})
        if len(insts) == 1 and len(groups) == 1:
            found[insts[0]] = next(iter(groups.values())).mount_point
    return found


class LustreCollector(Collector):
    name = "lustre"
    description = "Lustre / FSx for Lustre client stats per mount (llite stats, health_check)"

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        #: One of these exists whenever the Lustre client modules are loaded (sysfs since 2.x, procfs
        #: on 2.10). Checking them first keeps a node without Lustre from ever touching debugfs,
        #: which a non-root exporter cannot read.
        self._module_dirs = (ctx.sysfs / "fs" / "lustre", ctx.procfs / "fs" / "lustre")
        self._llite_dirs = (
            ctx.debugfs / "lustre" / "llite",  # 2.12+
            ctx.procfs / "fs" / "lustre" / "llite",  # 2.10
            ctx.sysfs / "fs" / "lustre" / "llite",  # 2.12+ tunables (and any stats found there)
        )
        self._health_files = (
            ctx.sysfs / "fs" / "lustre" / "health_check",
            ctx.procfs / "fs" / "lustre" / "health_check",
        )
        self._mount_tables = (
            (ctx.procfs / "1" / "mountinfo", parse_mountinfo),
            (ctx.procfs / "self" / "mountinfo", parse_mountinfo),
            (ctx.procfs / "mounts", parse_mounts),
        )
        self._mount_points: dict[str, str] = {}
        self._mounts_for: frozenset[str] | None = None
        self._mounts_read_at = -math.inf

    # ---- inputs --------------------------------------------------------------------------------

    def _instances(self) -> dict[str, list[Path]]:
        """llite instance name -> its directories, in the order the stats file is looked for."""
        found: dict[str, list[Path]] = {}
        for base in self._llite_dirs:
            try:
                with os.scandir(base) as it:
                    entries = [(e.name, e.is_dir()) for e in it]
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                self.skip("unreadable", f"{base}: {exc.strerror or exc}")
                continue
            for name, is_dir in entries:
                if is_dir and _INSTANCE.match(name):
                    found.setdefault(name, []).append(base / name)
        return found

    def _read(self, path: Path, limit: int = safe_read.DEFAULT_LIMIT) -> str | None:
        """The text of a file; ``None`` if it does not exist; skipped (and ``None``) if unreadable.

        Read through :mod:`.safe_read`: a FIFO, a device or an endless file where a Lustre file
        should be is refused (``not_regular_file``, ``too_large``), never waited on.
        """
        try:
            return safe_read.read_text(path, limit)
        except (FileNotFoundError, NotADirectoryError):
            return None
        except OSError as exc:
            self.skip(safe_read.reason(exc), f"{path}: {exc.strerror or exc}")
            return None

    def _stats(self, inst: str, dirs: list[Path]) -> Stats | None:
        for d in dirs:
            path = d / "stats"
            try:
                text = safe_read.read_text(path, STATS_LIMIT)
            except (FileNotFoundError, NotADirectoryError):
                continue
            except OSError as exc:
                self.skip(safe_read.reason(exc), f"{path}: {exc.strerror or exc}")
                return None
            stats = parse_stats(text)
            for p in stats.problems:
                self.skip(f"stats_{p.reason}", f"{path} line {p.line_no}: {p.line[:120]!r}")
            return stats
        self.skip(
            "stats_missing",
            f"llite {inst}: no stats file under {', '.join(str(d) for d in self._llite_dirs[:2])} "
            "(Lustre 2.12+ keeps it in debugfs: mount debugfs and run the exporter as root)",
        )
        return None

    def _health(self) -> float | None:
        for path in self._health_files:
            text = self._read(path)
            if text is not None:
                return 1.0 if text.strip() == "healthy" else 0.0
        return None

    def _mounts(self, instances: Iterable[str]) -> dict[str, str]:
        """Mount point per instance, cached until the set of instances changes.

        An instance whose mount was not found is looked up again at most every minute (the mount
        table may lag the llite directory while a mount is in progress).
        """
        key = frozenset(instances)
        now = time.monotonic()
        stale = key != self._mounts_for
        if not stale and not key <= self._mount_points.keys():
            stale = now - self._mounts_read_at >= _MOUNT_RETRY_S
        if stale:
            self._mount_points = match_mounts(key, self._read_mount_table())
            self._mounts_for = key
            self._mounts_read_at = now
        return self._mount_points

    def _read_mount_table(self) -> list[LustreMount]:
        for path, parse in self._mount_tables:
            try:
                text = safe_read.read_text(path, MOUNT_TABLE_LIMIT)
            except OSError:  # missing (hidepid, fixture tree), not ours to read, refused: the next
                continue
            return parse(text)
        self.log.debug("no readable mount table under %s", self.ctx.procfs)
        return []

    # ---- series --------------------------------------------------------------------------------

    def collect(self) -> Iterable[MetricFamily]:
        if not any(root.is_dir() for root in self._module_dirs):
            return []  # the Lustre modules are not loaded: no Lustre on this node
        instances = self._instances()
        healthy = self._health()
        if not instances and healthy is None:
            return []  # no Lustre on this node
        node = self.ctx.node_name
        labels = [self.ctx.node_label, "fs", "mount"]
        read_bytes = _counter(contract.LUSTRE_CLIENT_READ_BYTES, labels)
        write_bytes = _counter(contract.LUSTRE_CLIENT_WRITE_BYTES, labels)
        operations = _counter(contract.LUSTRE_CLIENT_OPERATIONS, [*labels, "operation"])
        seconds = _counter(contract.LUSTRE_CLIENT_OPERATION_SECONDS, [*labels, "operation"])
        mount_points = self._mounts(instances) if instances else {}
        names = sorted(instances)
        if len(names) > MAX_INSTANCES:
            self.skip("series_limit", f"{len(names)} llite instances; reading the first {MAX_INSTANCES}")
            names = names[:MAX_INSTANCES]
        for inst in names:
            stats = self._stats(inst, instances[inst])
            if stats is None:
                continue
            match = _INSTANCE.match(inst)
            fs = match["fs"] if match else inst
            base = [node, fs, mount_points.get(inst, inst)]
            dropped = _add_llite(stats, base, read_bytes, write_bytes, operations, seconds)
            if dropped:
                self.skip(
                    "series_limit",
                    f"llite {inst}: {dropped} operation names beyond the first {MAX_OPERATIONS} not exported",
                )
        families: list[MetricFamily] = [read_bytes, write_bytes, operations, seconds]
        if healthy is not None:
            health = GaugeMetricFamily(
                contract.LUSTRE_CLIENT_HEALTHY,
                contract.LUSTRE_CLIENT_HEALTHY.help,
                labels=[self.ctx.node_label],
            )
            health.add_metric([node], healthy)
            families.append(health)
        return [f for f in families if f.samples]


def _counter(metric: contract.Metric, labels: list[str]) -> CounterMetricFamily:
    return CounterMetricFamily(metric.removesuffix("_total"), metric.help, labels=labels)


def _operations(stats: Stats) -> tuple[dict[str, float], dict[str, float], bool]:
    """Operation counts and seconds (of the timed counters), and whether any counter is timed."""
    counts: dict[str, float] = {}
    times: dict[str, float] = {}
    timed = False
    for c in stats.counters.values():
        per_second = units_per_second(c.unit)
        timed = timed or per_second is not None
        if c.name in _NOT_OPERATIONS:
            continue
        counts[c.name] = c.samples
        if per_second is not None and c.sum is not None:
            times[c.name] = c.sum / per_second
    return counts, times, timed


def _add_bytes(stats: Stats, name: str, family: CounterMetricFamily, base: list[str], complete: bool) -> None:
    c = stats.get(name)
    if c is not None and c.sum is not None:
        family.add_metric(base, c.sum)
    elif c is None and complete:
        family.add_metric(base, 0)


def _add_llite(
    stats: Stats,
    base: list[str],
    read_bytes: CounterMetricFamily,
    write_bytes: CounterMetricFamily,
    operations: CounterMetricFamily,
    seconds: CounterMetricFamily,
) -> int:
    """Add one llite instance's series; returns how many operation names were over the limit.

    Absent counters are exported as 0 only when the whole file parsed cleanly: a truncated or
    malformed file may have lost the very line, and a false 0 would look like a counter reset.
    """
    complete = not stats.problems
    for name, family in (("read_bytes", read_bytes), ("write_bytes", write_bytes)):
        _add_bytes(stats, name, family, base, complete)
    counts, times, timed = _operations(stats)
    # Up to 2.12 reads and writes are counted only as samples of read_bytes / write_bytes.
    for op in ("read", "write"):
        rw = stats.get(f"{op}_bytes")
        if op not in counts and rw is not None:
            counts[op] = rw.samples
    if complete:
        for op in (*_ZERO_FILL, "read", "write"):
            counts.setdefault(op, 0)
        if timed:
            for op in _ZERO_FILL:
                times.setdefault(op, 0.0)
    kept = sorted(counts)
    dropped = max(0, len(kept) - MAX_OPERATIONS)
    if dropped:
        # The operations every version has come first, then the others in name order.
        known = {*_ZERO_FILL, "read", "write"}
        kept = sorted(kept, key=lambda op: (op not in known, op))[:MAX_OPERATIONS]
    for op in sorted(kept):
        operations.add_metric([*base, op], counts[op])
        if op in times:
            seconds.add_metric([*base, op], times[op])
    return dropped
