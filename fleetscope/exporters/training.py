"""``training`` collector: serve the rank files that ``fleetscope.telemetry`` writes.

Each training rank atomically rewrites ``<job_id>-rank<rank>.prom`` in a directory shared with the
exporter (``--collector.training.directory``, default ``/run/fleetscope/training``). On every scrape
this collector reads the fresh files of live writers and serves their ``training_*`` series with
the exporter's own node label (whatever a file says), so they join with the GPU series on
``(Hostname, gpu)``.

A file is dropped, silently, when its writer is gone (the header's pid no longer runs, or runs with
another start time, i.e. the pid was reused; or it was written before the last boot) or when it is
older than ``--collector.training.ttl``. When the writer lives in another pid namespace than the
one ``--path.procfs`` shows the exporter (a training container, or an exporter in a pod without
``hostPID``), its pid means nothing here and only the TTL applies.

A file is rejected, counted in ``fleetscope_collector_errors_total{collector="training",reason}``,
without affecting the other files, when it is:

* ``symlink``: a symbolic link (opened with ``O_NOFOLLOW``);
* ``not_regular``: a FIFO, socket, device or directory; ``hardlink``: a file with several links;
* ``insecure_file``: world-writable; ``owner``: not owned by root or an allowed uid
  (``--collector.training.owner-uids``, default: any owner);
* ``oversize``: larger than ``--collector.training.max-file-bytes`` (default 1 MiB; never read);
* ``malformed``: no fleetscope header, not UTF-8, not the text format, a name outside the
  contract's ``training_*`` series, missing or unexpected labels, a layout label that is not a
  non-negative integer, samples of more than one rank, duplicate series, a negative or non-finite
  counter, a ``result`` label other than ``success`` or ``failure``, no ``training_info`` (the
  writer's last series, so its absence means an incomplete file), a last line without its newline
  (a cut-off file: ``... 987`` may have been ``... 98765``); ``too_many_series``: over 512 samples;
* ``duplicate``: a second live file for the same ``(job_id, rank)`` (the newer one is served);
* ``unreadable``: any other error opening or reading it.

The whole directory is refused (``insecure_directory``) when it is world-writable without the
sticky bit, since anyone could then replace anyone's rank files. Nothing a file contains is
written to the log.

The layout labels of ``training_info`` (``contract.LAYOUT_LABELS``: pipeline stage and the data,
tensor, context and expert parallel ranks) are optional in a file: a writer that does not know
them leaves them out, and they are served empty, which Prometheus stores as absent.
"""

from __future__ import annotations

import argparse
import errno
import math
import os
import stat
import time
from collections.abc import Iterable
from dataclasses import dataclass

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily
from prometheus_client.metrics_core import Metric as MetricFamily
from prometheus_client.parser import text_string_to_metric_families

from fleetscope import contract
from fleetscope.argtypes import positive_float, positive_int
from fleetscope.exporters.base import Collector, NodeContext
from fleetscope.labels import MAX_LABEL_CHARS, MAX_RANK, cap, parse_index

HEADER_PREFIX = "# fleetscope-training v1"  # as written by fleetscope.telemetry.writer
FILE_SUFFIX = ".prom"
MAX_SAMPLES_PER_FILE = 512
DEFAULT_TTL = 120.0
DEFAULT_MAX_FILE_BYTES = 1 << 20

_METRICS: dict[str, contract.Metric] = {m.name: m for m in contract.metrics_by_origin("training")}
#: Labels of the rank itself, as they appear in a file (the node label is the exporter's).
_RANK_KEYS: tuple[str, ...] = tuple(k for k in contract.TRAINING_LABELS if k != contract.NODE_LABEL)
#: Labels a file may leave out (served empty); their values, when given, are non-negative integers.
_OPTIONAL_KEYS: frozenset[str] = frozenset(contract.LAYOUT_LABELS)


class Rejected(Exception):
    """A rank file that must not be served; ``reason`` is the error counter's label."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


@dataclass(frozen=True)
class RankFile:
    """What one accepted file holds: its rank's label values and its samples."""

    rank_labels: dict[str, str]
    #: (metric name, extra label values in the metric's order, value)
    samples: tuple[tuple[str, tuple[str, ...], float], ...]
    header: dict[str, str]
    mtime: float


def parse_header(line: str) -> dict[str, str]:
    if not line.startswith(HEADER_PREFIX):
        raise Rejected("malformed", "no fleetscope-training header")
    fields: dict[str, str] = {}
    for token in line[len(HEADER_PREFIX) :].split():
        key, sep, value = token.partition("=")
        if sep:
            fields[key] = value
    if parse_index(fields.get("pid", ""), 1 << 32) is None:
        raise Rejected("malformed", "header without a pid")
    return fields


def _split_labels(metric: contract.Metric, labels: dict[str, str]) -> tuple[dict[str, str], tuple[str, ...]]:
    """One sample's labels checked against ``metric``: (its rank's label values, its extra values)."""
    labels.pop(contract.NODE_LABEL, None)  # the exporter owns the node label
    extra_keys = tuple(k for k in metric.labels if k not in contract.TRAINING_LABELS)
    required = (set(_RANK_KEYS) | set(extra_keys)) - _OPTIONAL_KEYS
    if not required <= set(labels) <= set(_RANK_KEYS) | set(extra_keys):
        raise Rejected("malformed", f"{metric}: labels {sorted(labels)[:10]} are not the contract's")
    result = labels.get(contract.CHECKPOINT_RESULT_LABEL)
    if result is not None and result not in contract.CHECKPOINT_RESULTS:
        raise Rejected("malformed", f"{metric}: result is not one of {contract.CHECKPOINT_RESULTS}")
    for key in _OPTIONAL_KEYS.intersection(labels):
        if labels[key] and parse_index(labels[key], MAX_RANK) is None:
            raise Rejected("malformed", f"{metric}: {key} is not an ASCII integer below {MAX_RANK}")
    return {k: labels[k] for k in _RANK_KEYS}, tuple(labels.get(k, "") for k in extra_keys)


def _value(metric: contract.Metric, raw: float) -> float:
    value = float(raw)
    if metric.type == "counter" and not (math.isfinite(value) and value >= 0):
        raise Rejected("malformed", f"{metric}: counter value {value} is negative or not finite")
    return value


def parse_rank_file(
    text: str,
) -> tuple[dict[str, str], dict[str, str], list[tuple[str, tuple[str, ...], float]]]:
    """Strictly parse a rank file: (header, rank label values, samples). Raises :class:`Rejected`."""
    first, _, _ = text.partition("\n")
    header = parse_header(first)
    if not text.endswith("\n"):
        raise Rejected("malformed", "the last line has no newline (the file is cut off)")
    rank_labels: dict[str, str] | None = None
    samples: list[tuple[str, tuple[str, ...], float]] = []
    seen: set[tuple[str, tuple[str, ...]]] = set()
    try:
        families = list(text_string_to_metric_families(text))
    except Exception as exc:  # noqa: BLE001 - the parser raises ValueError, IndexError, ...
        raise Rejected("malformed", f"not the Prometheus text format ({type(exc).__name__})") from None
    for family in families:
        for sample in family.samples:
            metric = _METRICS.get(sample.name)
            if metric is None:
                raise Rejected("malformed", f"series {sample.name[:80]!r} is not a training_* contract name")
            if sample.timestamp is not None:
                raise Rejected("malformed", f"{metric}: samples must not carry timestamps")
            own, extra = _split_labels(metric, dict(sample.labels))
            if rank_labels is None:
                rank_labels = own
            elif own != rank_labels:
                raise Rejected("malformed", "samples of more than one rank in one file")
            if (metric, extra) in seen:
                raise Rejected("malformed", f"{metric}: duplicate series")
            seen.add((metric, extra))
            samples.append((metric.name, extra, _value(metric, sample.value)))
            if len(samples) > MAX_SAMPLES_PER_FILE:
                raise Rejected("too_many_series", f"more than {MAX_SAMPLES_PER_FILE} samples")
    return header, _complete(rank_labels, samples), samples


def _complete(
    rank_labels: dict[str, str] | None, samples: list[tuple[str, tuple[str, ...], float]]
) -> dict[str, str]:
    """The file's rank labels, once the whole file is read and holds a whole rank's series."""
    if rank_labels is None:
        raise Rejected("malformed", "no training series")
    if not any(name == contract.TRAINING_INFO for name, _, _ in samples):
        raise Rejected("malformed", f"no {contract.TRAINING_INFO} (written last: the file is incomplete)")
    for key in ("rank", "local_rank"):
        value = rank_labels.get(key, "")
        if (value or key == "rank") and parse_index(value, MAX_RANK) is None:
            raise Rejected("malformed", f"{key} is not an ASCII integer below {MAX_RANK}")
    return rank_labels


def _capped(
    rank_labels: dict[str, str], samples: list[tuple[str, tuple[str, ...], float]]
) -> tuple[dict[str, str], list[tuple[str, tuple[str, ...], float]], int]:
    """The labels cut to :data:`~fleetscope.labels.MAX_LABEL_CHARS`: (labels, samples, values cut)."""
    cut = 0

    def one(value: str) -> str:
        nonlocal cut
        short, was_cut = cap(value)
        cut += was_cut
        return short

    labels = {k: one(v) for k, v in rank_labels.items()}
    return labels, [(name, tuple(one(v) for v in extra), value) for name, extra, value in samples], cut


def _starttime(stat_text: str) -> str | None:
    """Field 22 of ``/proc/<pid>/stat``: when the process started, in clock ticks after boot."""
    try:
        return stat_text.rsplit(")", 1)[1].split()[19]
    except IndexError:
        return None


def _uid_list(text: str) -> str:
    try:
        _parse_uids(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def _parse_uids(value: str) -> frozenset[int] | None:
    value = (value or "").strip()
    if not value:
        return None
    try:
        return frozenset(int(v) for v in value.split(",") if v.strip())
    except ValueError:
        raise ValueError(
            f"--collector.training.owner-uids must be comma-separated uids, got {value!r}"
        ) from None


class TrainingCollector(Collector):
    name = "training"
    description = "per-rank training telemetry files written by fleetscope.telemetry"

    @classmethod
    def add_arguments(cls, parser: argparse.ArgumentParser) -> None:
        parser.add_argument(
            "--collector.training.directory",
            dest="training_directory",
            metavar="DIR",
            default=contract.TRAINING_DIR_DEFAULT,
            help="directory of the rank files (default %(default)s)",
        )
        parser.add_argument(
            "--collector.training.ttl",
            dest="training_ttl",
            metavar="SECONDS",
            type=positive_float,
            default=DEFAULT_TTL,
            help="drop rank files not rewritten for this many seconds (default %(default)s)",
        )
        parser.add_argument(
            "--collector.training.max-file-bytes",
            dest="training_max_file_bytes",
            metavar="BYTES",
            type=positive_int,
            default=DEFAULT_MAX_FILE_BYTES,
            help="reject rank files larger than this (default %(default)s)",
        )
        parser.add_argument(
            "--collector.training.owner-uids",
            dest="training_owner_uids",
            metavar="UIDS",
            type=_uid_list,
            default="",
            help="comma-separated uids whose rank files are accepted besides root's (default: any owner)",
        )

    def __init__(self, ctx: NodeContext) -> None:
        super().__init__(ctx)
        self.directory = str(ctx.option("training_directory", contract.TRAINING_DIR_DEFAULT))
        self.ttl = ctx.option_float("training_ttl", DEFAULT_TTL)
        self.max_bytes = ctx.option_int("training_max_file_bytes", DEFAULT_MAX_FILE_BYTES)
        self.owner_uids = _parse_uids(str(ctx.option("training_owner_uids", "") or ""))
        if self.ttl <= 0 or self.max_bytes <= 0:
            raise ValueError(
                "--collector.training.ttl and --collector.training.max-file-bytes must be positive"
            )
        self._boot_id = self._read_text(os.path.join(ctx.procfs, "sys/kernel/random/boot_id"))
        self._pidns = self._pid_namespace()
        self._cache: dict[str, tuple[tuple[int, int, int, int], RankFile]] = {}
        self._noted: set[str] = set()

    # ---- collection ---------------------------------------------------------------------------
    def collect(self) -> Iterable[MetricFamily]:
        files = self.read_files()
        node_key = self.ctx.node_label
        families: dict[str, CounterMetricFamily | GaugeMetricFamily] = {}
        for name, metric in _METRICS.items():
            labels = [node_key if k == contract.NODE_LABEL else k for k in metric.labels]
            if metric.type == "counter":
                families[name] = CounterMetricFamily(name.removesuffix("_total"), metric.help, labels=labels)
            else:
                families[name] = GaugeMetricFamily(name, metric.help, labels=labels)
        for rank_file in files:
            base = [
                self.ctx.node_name if k == contract.NODE_LABEL else rank_file.rank_labels[k]
                for k in contract.TRAINING_LABELS
            ]
            for name, extra, value in rank_file.samples:
                families[name].add_metric([*base, *extra], value)
        return [f for f in families.values() if f.samples]

    def read_files(self) -> list[RankFile]:
        """The accepted, fresh rank files of live writers (one per (job_id, rank), newest wins)."""
        try:
            dfd = os.open(self.directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        except FileNotFoundError:
            self._note(
                "missing-dir", "directory %s does not exist (no training on this node yet)", self.directory
            )
            return []
        except OSError as exc:
            self.skip("unreadable", f"directory {self.directory}: {exc.strerror}")
            return []
        try:
            st = os.fstat(dfd)
            if st.st_mode & stat.S_IWOTH and not st.st_mode & stat.S_ISVTX:
                self.skip("insecure_directory", f"{self.directory} is world-writable without the sticky bit")
                return []
            accepted: dict[tuple[str, str], tuple[RankFile, str]] = {}
            now = time.time()
            names = sorted(os.listdir(dfd))
            seen_paths = set()
            for name in names:
                if name.startswith(".") or not name.endswith(FILE_SUFFIX):
                    continue
                seen_paths.add(name)
                try:
                    rank_file = self._read_one(dfd, name)
                except Rejected as rej:
                    self.skip(rej.reason, f"{os.path.join(self.directory, name)}: {rej}")
                    continue
                if rank_file is None:
                    continue
                if now - rank_file.mtime > self.ttl:
                    self._note(f"ttl:{name}", "dropping %s: not rewritten for over %gs", name, self.ttl)
                    continue
                if not self._writer_alive(rank_file.header, name):
                    continue
                key = (rank_file.rank_labels["job_id"], rank_file.rank_labels["rank"])
                previous = accepted.get(key)
                if previous is not None:
                    older, newer = sorted([previous, (rank_file, name)], key=lambda p: p[0].mtime)
                    self.skip("duplicate", f"{older[1]}: same job_id and rank as {newer[1]}")
                    accepted[key] = newer
                else:
                    accepted[key] = (rank_file, name)
            for gone in set(self._cache) - seen_paths:
                del self._cache[gone]
            return [rf for rf, _ in accepted.values()]
        finally:
            os.close(dfd)

    def _read_one(self, dfd: int, name: str) -> RankFile | None:
        flags = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        try:
            fd = os.open(name, flags, dir_fd=dfd)
        except FileNotFoundError:
            return None  # replaced or removed between listing and opening
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise Rejected("symlink", "is a symbolic link") from None
            raise Rejected("unreadable", exc.strerror or str(exc)) from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode):
                raise Rejected("not_regular", "is not a regular file")
            if st.st_nlink != 1:
                raise Rejected("hardlink", f"has {st.st_nlink} hard links")
            if st.st_mode & stat.S_IWOTH:
                raise Rejected("insecure_file", "is world-writable")
            if self.owner_uids is not None and st.st_uid != 0 and st.st_uid not in self.owner_uids:
                raise Rejected("owner", f"owned by uid {st.st_uid}, not an allowed uid")
            if st.st_size > self.max_bytes:
                raise Rejected("oversize", f"{st.st_size} bytes > {self.max_bytes}")
            key = (st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size)
            cached = self._cache.get(name)
            if cached is not None and cached[0] == key:
                return cached[1]
            data = self._read_capped(fd)
        finally:
            os.close(fd)
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise Rejected("malformed", "not UTF-8") from None
        header, rank_labels, samples = parse_rank_file(text)
        rank_labels, samples, cut = _capped(rank_labels, samples)
        if cut:
            path = os.path.join(self.directory, name)
            self.skip("label_too_long", f"{path}: label values over {MAX_LABEL_CHARS} characters; cut", cut)
        rank_file = RankFile(rank_labels, tuple(samples), header, st.st_mtime)
        self._cache[name] = (key, rank_file)
        return rank_file

    def _read_capped(self, fd: int) -> bytes:
        chunks: list[bytes] = []
        total = 0
        while True:
            try:
                chunk = os.read(fd, min(65536, self.max_bytes + 1 - total))
            except OSError as exc:
                raise Rejected("unreadable", exc.strerror or str(exc)) from None
            if not chunk:
                return b"".join(chunks)
            chunks.append(chunk)
            total += len(chunk)
            if total > self.max_bytes:
                raise Rejected("oversize", f"more than {self.max_bytes} bytes")

    # ---- writer liveness ----------------------------------------------------------------------
    def _writer_alive(self, header: dict[str, str], name: str) -> bool:
        boot_id = header.get("boot_id")
        if boot_id and self._boot_id and boot_id != self._boot_id:
            self._note(f"boot:{name}", "dropping %s: written before the last boot", name)
            return False
        if self._pidns is None or header.get("pidns") != self._pidns:
            self._note(
                f"ns:{name}", "%s: writer's pid not visible in our pid namespace, liveness by TTL only", name
            )
            return True
        pid = header["pid"]
        stat_text = self._read_text(os.path.join(self.ctx.procfs, pid, "stat"))
        if stat_text is None:
            self._note(f"dead:{name}:{pid}", "dropping %s: writer pid %s is gone", name, pid)
            return False
        starttime = header.get("starttime")
        if starttime:
            running_since = _starttime(stat_text)
            if running_since is not None and running_since != starttime:
                self._note(
                    f"reused:{name}:{pid}", "dropping %s: pid %s now belongs to another process", name, pid
                )
                return False
        return True

    def _pid_namespace(self) -> str | None:
        """Our pid namespace, when ``--path.procfs`` shows it (else pids there mean nothing to us).

        The procfs root shows our namespace when it lists this very process (same pid, same start
        time). Only writers in that namespace can be checked by pid; the others (a training pod
        in its own pid namespace) are judged by the TTL alone. Nothing here needs privileges.
        """
        ours = self._read_text("/proc/self/stat")
        seen = self._read_text(os.path.join(self.ctx.procfs, str(os.getpid()), "stat"))
        if ours is None or seen is None or _starttime(ours) != _starttime(seen):
            return None
        try:
            return str(os.stat("/proc/self/ns/pid").st_ino)
        except OSError:
            return None

    @staticmethod
    def _read_text(path: str | os.PathLike[str]) -> str | None:
        try:
            with open(path, encoding="ascii", errors="replace") as f:
                return f.read().strip()
        except OSError:
            return None

    def _note(self, key: str, msg: str, *args: object) -> None:
        """Log a normal event (dead writer, expired file) once, at info level."""
        if key not in self._noted and len(self._noted) < 10000:
            self._noted.add(key)
            self.log.info(msg, *args)
