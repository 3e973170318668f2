"""The background side: render a rank's totals in the Prometheus text format and write them atomically.

Every ``interval`` seconds a daemon thread takes a snapshot from the monitor, renders it, writes it to
a hidden temporary file in the target directory and renames it over ``<job_id>-rank<rank>.prom``, so
the exporter only ever reads complete files. A failing write (full or read-only disk, missing or
foreign directory) is logged once per kind of failure, skipped, and retried at the next interval;
nothing is ever raised into the training loop.

The first line of the file says who wrote it, so the exporter can drop the file once the writer is
gone even if the pid has been reused::

    # fleetscope-training v1 pid=4242 starttime=123456 boot_id=0f6e... pidns=4026531836

``starttime`` is field 22 of ``/proc/<pid>/stat`` (clock ticks after boot), ``boot_id`` comes from
``/proc/sys/kernel/random/boot_id`` and ``pidns`` is the inode of the writer's pid namespace.
"""

from __future__ import annotations

import errno
import logging
import os
import re
import threading
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

from prometheus_client.utils import floatToGoString

from fleetscope import contract
from fleetscope.telemetry.identity import RankIdentity
from fleetscope.textformat import escape_label_value

if TYPE_CHECKING:
    from fleetscope.telemetry.monitor import Snapshot

log = logging.getLogger("fleetscope.telemetry")

HEADER_PREFIX = "# fleetscope-training v1"
FILE_SUFFIX = ".prom"


def process_identity(procfs: str = "/proc") -> dict[str, str]:
    """pid, start time, boot id and pid namespace of this process (what the header records)."""
    info = {"pid": str(os.getpid())}
    try:
        with open(f"{procfs}/self/stat", encoding="ascii", errors="replace") as f:
            stat = f.read()
        info["starttime"] = stat.rsplit(")", 1)[1].split()[19]
    except (OSError, IndexError):
        pass
    try:
        with open(f"{procfs}/sys/kernel/random/boot_id", encoding="ascii") as f:
            info["boot_id"] = f.read().strip()
    except OSError:
        pass
    try:
        info["pidns"] = str(os.stat(f"{procfs}/self/ns/pid").st_ino)
    except OSError:
        pass
    return info


def nccl_ras_addr(env: Mapping[str, str]) -> str | None:
    """Where this process's NCCL RAS listens (``NCCL_RAS_ADDR``, NCCL's default ``localhost:28028``),
    for the exporter's nccl_ras collector to find; None when RAS is off or the value is not one
    ``host:port`` word."""
    if env.get("NCCL_RAS_ENABLE", "1").strip() == "0":
        return None
    addr = env.get("NCCL_RAS_ADDR", "").strip() or "localhost:28028"
    return addr if re.fullmatch(r"[A-Za-z0-9_.:\[\]-]{1,200}", addr) else None


#: One sample of a rank file: (metric, its labels besides the rank's own as (key, value) pairs, value).
Sample = tuple[contract.Metric, tuple[tuple[str, str], ...], float]


def rank_samples(snap: Snapshot, flops_convention: str) -> list[Sample]:
    """The samples of a rank's file in file order, without the rank's own labels.

    What a rank file holds, decided once: :func:`render` writes these, and the simulator serves
    them as the exporter would (``fleetscope.simulate.jobs``), so both follow the same rules.
    ``training_info`` carries the known layout labels only and comes last.
    """
    out: list[Sample] = [
        (contract.TRAINING_STEPS, (), snap.steps),
        (contract.TRAINING_STEP_SECONDS, (), snap.step_seconds),
    ]
    out += [
        (contract.TRAINING_PHASE_SECONDS, (("phase", p),), v) for p, v in sorted(snap.phase_seconds.items())
    ]
    out.append((contract.TRAINING_TOKENS, (), snap.tokens))
    out.append((contract.TRAINING_MODEL_FLOPS, (), snap.flops))
    if snap.loss is not None:
        out.append((contract.TRAINING_LOSS, (), snap.loss))
    out.append((contract.TRAINING_GLOBAL_STEP, (), snap.global_step))
    if snap.last_step_timestamp is not None:
        out.append((contract.TRAINING_LAST_STEP_TIMESTAMP, (), snap.last_step_timestamp))
    out += [
        (
            contract.TRAINING_CHECKPOINT_SAVES,
            ((contract.CHECKPOINT_RESULT_LABEL, r),),
            snap.checkpoint_saves.get(r, 0),
        )
        for r in contract.CHECKPOINT_RESULTS
    ]
    out.append((contract.TRAINING_CHECKPOINT_SAVE_SECONDS, (), snap.checkpoint_save_seconds))
    out.append((contract.TRAINING_CHECKPOINT_SAVE_BYTES, (), snap.checkpoint_save_bytes))
    if snap.checkpoint_last_success_timestamp is not None:
        out.append(
            (contract.TRAINING_CHECKPOINT_LAST_SUCCESS_TIMESTAMP, (), snap.checkpoint_last_success_timestamp)
        )
    if snap.checkpoint_last_success_step is not None:
        out.append((contract.TRAINING_CHECKPOINT_LAST_SUCCESS_STEP, (), snap.checkpoint_last_success_step))
    out.append((contract.TRAINING_CHECKPOINT_LOADS, (), snap.checkpoint_loads))
    out.append((contract.TRAINING_CHECKPOINT_LOAD_SECONDS, (), snap.checkpoint_load_seconds))
    out.append((contract.TRAINING_RESTART_ATTEMPT, (), snap.restart_attempt))
    if snap.resumed_from_step is not None:
        out.append((contract.TRAINING_RESUMED_FROM_STEP, (), snap.resumed_from_step))
    if snap.startup_seconds is not None:
        out.append((contract.TRAINING_STARTUP_SECONDS, (), snap.startup_seconds))
    info = (("flops_convention", flops_convention),) + tuple(
        (key, snap.layout[key]) for key in contract.LAYOUT_LABELS if key in snap.layout
    )
    out.append((contract.TRAINING_INFO, info, 1))  # last: a file without it is incomplete
    return out


def render(identity: RankIdentity, snap: Snapshot, flops_convention: str, header: dict[str, str]) -> str:
    """The rank file: a header comment, then the contract's training series for this rank
    (:func:`rank_samples`), each family with its HELP and TYPE.

    ``Hostname`` is left out: the exporter adds its own node label.
    """
    base = (
        f'job_id="{escape_label_value(identity.job_id)}",rank="{identity.rank}",'
        f'local_rank="{identity.local_rank}",gpu="{escape_label_value(identity.gpu)}"'
    )
    head = " ".join(f"{k}={v}" for k, v in header.items())
    lines = [f"{HEADER_PREFIX} {head}".rstrip()]
    current: contract.Metric | None = None
    for metric, extra, value in rank_samples(snap, flops_convention):
        if metric is not current:
            current = metric
            lines.append(f"# HELP {metric} {metric.help}")
            lines.append(f"# TYPE {metric} {metric.type}")
        labels = base + "".join(f',{k}="{escape_label_value(v)}"' for k, v in extra)
        lines.append(f"{metric}{{{labels}}} {floatToGoString(value)}")
    return "\n".join(lines) + "\n"


class RankFileWriter:
    """Writes one rank's file every ``interval`` seconds on a daemon thread."""

    def __init__(
        self,
        directory: str,
        identity: RankIdentity,
        snapshot: Callable[[], Snapshot],
        interval: float,
        flops_convention: str,
    ) -> None:
        self.directory = directory
        self.identity = identity
        self.name = identity.file_stem() + FILE_SUFFIX
        self.path = os.path.join(directory, self.name)
        self._snapshot = snapshot
        self.interval = interval
        self.flops_convention = flops_convention
        self._stop = threading.Event()
        self._write_lock = threading.Lock()
        self._thread: threading.Thread | None = None
        self._header: dict[str, str] | None = None
        self._failing: set[str] = set()
        self.writes = 0
        self.failures = 0

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="fleetscope-telemetry-writer", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        self.write_now()
        while not self._stop.wait(self.interval):
            self.write_now()

    def stop(self, remove: bool = True, timeout: float = 5.0) -> None:
        """Stop the thread; then remove the file (a finished rank), or write it one last time."""
        self._stop.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(timeout)
        if remove:
            with self._write_lock:
                try:
                    os.unlink(self.path)
                except OSError:
                    pass
        else:
            self.write_now()

    def write_now(self) -> bool:
        """Render and atomically replace the rank file; never raises. True when written."""
        try:
            with self._write_lock:
                if self._header is None:
                    self._header = process_identity()
                    if ras := nccl_ras_addr(os.environ):
                        self._header["nccl_ras_addr"] = ras
                text = render(self.identity, self._snapshot(), self.flops_convention, self._header)
                self._write(text.encode())
        except OSError as exc:
            self.failures += 1
            kind = errno.errorcode.get(exc.errno or 0, type(exc).__name__)
            if kind not in self._failing:
                self._failing.add(kind)
                log.warning(
                    "fleetscope telemetry: cannot write %s (%s); skipping until it works again",
                    self.path,
                    exc,
                )
            return False
        except Exception as exc:  # the writer must never die or reach the training loop
            self.failures += 1
            if "render" not in self._failing:
                self._failing.add("render")
                log.exception("fleetscope telemetry: cannot render the rank file: %s", exc)
            return False
        self.writes += 1
        if self._failing:
            log.warning("fleetscope telemetry: writing %s works again", self.path)
            self._failing.clear()
        return True

    def _write(self, data: bytes) -> None:
        tmp = os.path.join(self.directory, f".{self.name}.tmp{os.getpid()}")
        try:
            os.unlink(tmp)  # a leftover from a crash; never follow or reuse it
        except FileNotFoundError:
            pass
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC
        try:
            fd = os.open(tmp, flags, 0o644)
        except FileNotFoundError:
            os.makedirs(self.directory, exist_ok=True)
            fd = os.open(tmp, flags, 0o644)
        try:
            try:
                os.fchmod(fd, 0o644)  # readable by the exporter whatever the umask
                view = memoryview(data)
                while view:
                    view = view[os.write(fd, view) :]
            finally:
                os.close(fd)
            os.replace(tmp, self.path)
        except BaseException:
            try:
                os.unlink(tmp)
            except OSError:
                pass
            raise
