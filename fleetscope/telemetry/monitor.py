"""The training-thread side: cheap accumulators behind ``with monitor.step()`` and ``monitor.phase()``.

Evaluation and checkpointing (``contract.PAUSE_PHASES``) are pauses, not work: their time goes to
``training_phase_seconds_total{phase="eval"|"checkpoint"}`` and is taken out of any step it
happens inside, so a job that validates every 1000 steps shows no slow step and no stall.

The hot path does arithmetic on plain floats under one uncontended ``threading.Lock`` and calls
``time.perf_counter``; it never touches a file, a socket or a prometheus_client object. A
background thread (:mod:`fleetscope.telemetry.writer`) snapshots the totals every few seconds and
writes the rank file. ``docs/benchmarks.md`` has the measured cost per step.
"""

from __future__ import annotations

import atexit
import importlib
import logging
import math
import os
import sys
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from time import perf_counter, time
from types import TracebackType
from typing import Any

from fleetscope import contract
from fleetscope.telemetry import identity as _identity
from fleetscope.telemetry import process as _process
from fleetscope.telemetry import stall_dump as _stall
from fleetscope.telemetry.flops import CUSTOM
from fleetscope.telemetry.layout import Layout, LayoutResolver
from fleetscope.telemetry.sizes import checkpoint_size as checkpoint_size  # re-exported
from fleetscope.telemetry.sizes import measure_later, wait_for_sizes
from fleetscope.telemetry.stall_dump import StallDumper
from fleetscope.telemetry.writer import RankFileWriter

log = logging.getLogger("fleetscope.telemetry")

#: More distinct phase names than this are ignored (logged once): each is a series.
MAX_PHASES = 32
_PAUSES: frozenset[str] = frozenset(contract.PAUSE_PHASES)


@dataclass
class Snapshot:
    """A consistent copy of one rank's totals (what the writer renders)."""

    steps: int = 0
    step_seconds: float = 0.0
    tokens: float = 0.0
    flops: float = 0.0
    phase_seconds: dict[str, float] = field(default_factory=dict)
    loss: Any = None
    global_step: int = 0
    last_step_timestamp: float | None = None
    #: ``training_info`` layout label values (only the known ones).
    layout: dict[str, str] = field(default_factory=dict)
    #: Checkpoint saves by result (``contract.CHECKPOINT_RESULTS``).
    checkpoint_saves: dict[str, int] = field(default_factory=dict)
    checkpoint_save_seconds: float = 0.0
    checkpoint_save_bytes: float = 0.0
    checkpoint_last_success_timestamp: float | None = None
    checkpoint_last_success_step: int | None = None
    checkpoint_loads: int = 0
    checkpoint_load_seconds: float = 0.0
    restart_attempt: int = 0
    resumed_from_step: int | None = None
    startup_seconds: float | None = None


def _number(value: Any) -> float | None:
    """``value`` as a finite, non-negative float, else None (NaN, infinity, negative, not a number,
    an int beyond float range such as ``10**400``)."""
    try:
        number = float(value)
    except (TypeError, ValueError, RuntimeError, OverflowError):
        return None
    return number if 0.0 <= number < math.inf else None


def _sum(total: float, delta: float, what: str, overflowed: list[str]) -> float:
    """``total + delta``, or ``total`` (with ``what`` noted in ``overflowed``) when the sum would not
    be finite: a running total never becomes ``+Inf`` (the exporter refuses a rank that has one)."""
    new = total + delta
    if math.isfinite(new):
        return new
    overflowed.append(what)
    return total


class _Phase:
    __slots__ = ("_monitor", "_name", "_t0")

    def __init__(self, monitor: TrainingMonitor, name: str) -> None:
        self._monitor = monitor
        self._name = name
        self._t0 = 0.0

    def __enter__(self) -> _Phase:
        sync = self._monitor._sync
        if sync is not None:
            sync()
        self._t0 = self._monitor._perf()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        m = self._monitor
        if m._sync is not None:
            m._sync()
        m.add_phase_time(self._name, m._perf() - self._t0)


class _Pause:
    """``with monitor.evaluation()`` / ``monitor.checkpoint()``: time that is no step's time.

    Never raises into the training loop (an exception of the block itself goes on unchanged).
    """

    __slots__ = ("_monitor", "_name", "_t0", "seconds")

    def __init__(self, monitor: TrainingMonitor, name: str) -> None:
        self._monitor = monitor
        self._name = name
        self._t0 = 0.0
        self.seconds = 0.0

    def __enter__(self) -> _Pause:
        m = self._monitor
        try:
            if m._sync is not None:
                m._sync()
        except Exception as exc:  # noqa: BLE001 - telemetry must not break an evaluation
            m._warn_once(
                "pause-sync", "fleetscope telemetry: synchronize before %s failed: %s", self._name, exc
            )
        with m._lock:
            m._pause_depth += 1
        self._t0 = m._perf()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        m = self._monitor
        try:
            if m._sync is not None:
                m._sync()
        except Exception as exc:  # noqa: BLE001
            m._warn_once(
                "pause-sync", "fleetscope telemetry: synchronize after %s failed: %s", self._name, exc
            )
        seconds = self.seconds = m._perf() - self._t0
        now = m._now()
        with m._lock:
            m._pause_depth -= 1
            if m._last_progress is not None:
                m._last_progress = now
        m.add_phase_time(self._name, seconds)


class _CheckpointSave(_Pause):
    """``with monitor.checkpoint(step=..., nbytes=...) as save``: a pause that also counts a save.

    The save succeeded when the block exits without an exception (which goes on unchanged).
    ``save.nbytes`` may be set inside the block; else the size of ``path`` (a file, or a directory
    of shards, walked once after the save) when given. Only the outermost of nested saves counts.
    """

    __slots__ = ("_outer", "nbytes", "path", "step")

    def __init__(
        self,
        monitor: TrainingMonitor,
        step: int | None,
        nbytes: float | None,
        path: str | os.PathLike[str] | None,
    ) -> None:
        super().__init__(monitor, "checkpoint")
        self.step = step
        self.nbytes = nbytes
        self.path = path
        self._outer = False

    def __enter__(self) -> _CheckpointSave:
        m = self._monitor
        self._outer = m._save_depth == 0
        m._save_depth += 1
        super().__enter__()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        m = self._monitor
        super().__exit__(et, ev, tb)
        m._save_depth -= 1
        if not self._outer:
            return
        m.record_checkpoint_save(self.seconds, success=et is None, step=self.step, nbytes=self.nbytes)
        if self.nbytes is None and self.path is not None and et is None:
            add_checkpoint_size_later(m, self.path)


def add_checkpoint_size_later(monitor: TrainingMonitor, path: str | os.PathLike[str]) -> None:
    """Add the size of the saved ``path`` to ``monitor``'s checkpoint bytes once it is measured,
    off the training thread (:mod:`fleetscope.telemetry.sizes`)."""
    measure_later(path, monitor._add_checkpoint_bytes)


class _Step:
    """What ``with monitor.step(...) as s`` yields; set ``s.loss``, ``s.tokens``... inside the block."""

    __slots__ = ("_monitor", "_p0", "_t0", "flops", "global_step", "loss", "tokens")

    def __init__(
        self,
        monitor: TrainingMonitor,
        tokens: float,
        flops: float | None,
        loss: Any,
        global_step: int | None,
    ) -> None:
        self._monitor = monitor
        self.tokens = tokens
        self.flops = flops
        self.loss = loss
        self.global_step = global_step
        self._t0 = 0.0
        self._p0 = 0.0

    def __enter__(self) -> _Step:
        m = self._monitor
        if m._sync is not None:
            m._sync()
        self._p0 = m._pause_seconds
        self._t0 = m._perf()
        return self

    def __exit__(
        self, et: type[BaseException] | None, ev: BaseException | None, tb: TracebackType | None
    ) -> None:
        if et is not None:  # a step that raised is not a completed step; its phases stay counted
            return
        m = self._monitor
        if m._sync is not None:
            m._sync()
        seconds = m._perf() - self._t0 - (m._pause_seconds - self._p0)  # pauses are no step time
        m.record_step(max(seconds, 0.0), self.tokens, self.flops, self.loss, self.global_step)


def _env_float(env: Mapping[str, str], name: str, default: float) -> float:
    raw = env.get(name, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ValueError(f"{name} must be a number of seconds, got {raw!r}") from None
    if not value > 0:
        raise ValueError(f"{name} must be positive, got {raw!r}")
    return value


class TrainingMonitor:
    """Per-rank training telemetry. Create once per process; use from the training loop::

        monitor = TrainingMonitor(flops_per_token=fpt)      # job id and rank from the environment
        for batch in loader:
            with monitor.step(tokens=batch.numel()) as step:
                with monitor.phase("forward"):
                    loss = model(batch)
                with monitor.phase("backward"):
                    loss.backward()
                with monitor.phase("optimizer"):
                    opt.step(); opt.zero_grad()
                step.loss = loss                           # a tensor is read by the writer thread

    Arguments (all optional):

    ``job_id``, ``rank``, ``local_rank``, ``gpu``
        Label values; default from the launcher's environment (:mod:`.identity`).
    ``directory``
        Where the rank file goes: ``$FLEETSCOPE_TRAINING_DIR``, else ``/run/fleetscope/training``.
    ``interval``
        Seconds between writes: ``$FLEETSCOPE_TELEMETRY_INTERVAL``, else 5.
    ``flops_per_token`` / ``flops_per_step``
        Model FLOPs added per token and per step (see :mod:`.flops`); a step may pass ``flops=``
        directly instead. A :class:`~.flops.FlopsPerToken` carries its convention into
        ``training_info{flops_convention}``.
    ``layout``
        The rank's place in the parallel layout (``training_info{pipeline_stage,
        data_parallel_rank, ...}``): a :class:`~.layout.Layout`, a mapping of those label keys to
        ranks, or an object to read it from (a ``torch.distributed.DeviceMesh``, a DeepSpeed
        engine, ``PipelineModule`` or grid, Megatron's ``parallel_state``). Unknown fields come
        from Megatron-LM/NeMo or DeepSpeed when they are in use, else from
        ``FLEETSCOPE_PIPELINE_STAGE`` and friends (:mod:`.layout`); see also :meth:`set_layout`.
    ``restart_attempt``
        ``training_restart_attempt``: 0 for the first run, +1 per restart; default from
        ``FLEETSCOPE_RESTART_ATTEMPT``, ``TORCHELASTIC_RESTART_COUNT`` or ``SLURM_RESTART_COUNT``
        (:mod:`.process`). See also :meth:`restart`.
    ``cuda_sync``
        Call ``torch.cuda.synchronize()`` at each phase and step boundary so times cover the GPU
        work, not only the kernel launches. Off by default: every sync drains the GPU queue and
        stalls the CPU until it is empty, which removes the CPU/GPU overlap (see docs/telemetry.md).
    ``start``
        Start the writer thread now (default). ``False`` keeps everything in memory (tests).
    ``stall_dump_after``
        Seconds without a completed step (outside checkpoints and evaluations) after which a
        watchdog thread asks PyTorch for a Flight Recorder dump, once per stall, by writing to its
        dump pipe (``TORCH_NCCL_DEBUG_INFO_PIPE_FILE``; :mod:`.stall_dump`). Default
        ``FLEETSCOPE_STALL_DUMP_AFTER``, else off.
    ``clock``
        A clock in Unix seconds for every time the monitor reads (durations, the last step's and
        the last save's timestamps; the process start is the clock's time at construction).
        Default: ``time.perf_counter`` for durations and ``time.time`` for timestamps. A virtual
        clock lets a simulator or a test drive the monitor through hours in milliseconds.
    """

    def __init__(
        self,
        job_id: str | None = None,
        rank: int | None = None,
        local_rank: int | None = None,
        gpu: int | str | None = None,
        *,
        directory: str | os.PathLike[str] | None = None,
        interval: float | None = None,
        flops_per_token: float = 0.0,
        flops_per_step: float = 0.0,
        flops_convention: str | None = None,
        layout: Any = None,
        restart_attempt: int | None = None,
        cuda_sync: bool = False,
        remove_on_close: bool = True,
        start: bool = True,
        env: Mapping[str, str] | None = None,
        clock: Callable[[], float] | None = None,
        stall_dump_after: float | None = None,
    ) -> None:
        env = os.environ if env is None else env
        self.identity = _identity.detect(job_id, rank, local_rank, gpu, env)
        self.directory = os.fspath(
            directory
            if directory is not None
            else (env.get("FLEETSCOPE_TRAINING_DIR") or contract.TRAINING_DIR_DEFAULT)
        )
        self.interval = (
            float(interval) if interval is not None else _env_float(env, "FLEETSCOPE_TELEMETRY_INTERVAL", 5.0)
        )
        if not self.interval > 0:
            raise ValueError(f"interval must be positive, got {interval}")
        if flops_per_token < 0 or flops_per_step < 0:
            raise ValueError("flops_per_token and flops_per_step must not be negative")
        self._fpt = float(flops_per_token)
        self._fps = float(flops_per_step)
        self.flops_convention: str = flops_convention or str(getattr(flops_per_token, "convention", CUSTOM))
        self._lock = threading.Lock()
        self._steps = 0
        self._step_seconds = 0.0
        self._tokens = 0.0
        self._flops = 0.0
        #: The pause phases are there from the start (at 0): a series born at a pause's end would
        #: lose that pause (a new series' first sample is no increase to ``rate()``).
        self._phase_seconds: dict[str, float] = dict.fromkeys(contract.PAUSE_PHASES, 0.0)
        self._loss: Any = None
        self._global_step = 0
        self._last_step: float | None = None
        #: The last step's end or pause's end (the stall dump's clock).
        self._last_progress: float | None = None
        self._step_t0: float | None = None
        self._step_p0 = 0.0
        #: Wall time of outermost pauses so far; steps subtract what passed while they ran.
        self._pause_seconds = 0.0
        self._pause_depth = 0
        self._layout = LayoutResolver(layout, env)
        self._warned: set[str] = set()
        #: Inputs refused at the call (NaN, infinite, negative, not a number), by argument name.
        self.rejected_inputs: dict[str, int] = {}
        self._saves = dict.fromkeys(contract.CHECKPOINT_RESULTS, 0)
        self._save_seconds = 0.0
        self._save_bytes = 0.0
        self._last_save: float | None = None
        self._last_save_step: int | None = None
        self._save_depth = 0
        self._loads = 0
        self._load_seconds = 0.0
        self._resumed_from: int | None = None
        self._attempt = _process.restart_attempt(env)
        self._perf: Callable[[], float] = perf_counter if clock is None else clock
        self._now: Callable[[], float] = time if clock is None else clock
        self._process_start = _process.process_start_time() if clock is None else clock()
        self._startup: float | None = None
        self._sync: Callable[[], None] | None = _cuda_synchronizer() if cuda_sync else None
        self._pid = os.getpid()
        self._closed = False
        self._remove_on_close = remove_on_close
        self.writer = RankFileWriter(
            self.directory, self.identity, self.snapshot, self.interval, self.flops_convention
        )
        if restart_attempt is not None:
            self.restart(restart_attempt)
        #: Flight Recorder dump on a stall (opt-in); None when off.
        self.stall_dumper = self._stall_dumper(stall_dump_after, env)
        if start:
            self.writer.start()
            if self.stall_dumper is not None:
                self.stall_dumper.start()
        atexit.register(self.close)
        log.info(
            "fleetscope telemetry: job_id=%s rank=%d local_rank=%d gpu=%s -> %s every %gs (flops: %s)",
            self.identity.job_id,
            self.identity.rank,
            self.identity.local_rank,
            self.identity.gpu,
            self.writer.path,
            self.interval,
            self.flops_convention,
        )

    def _stall_dumper(self, after: float | None, env: Mapping[str, str]) -> StallDumper | None:
        seconds = after if after is not None else _env_float(env, _stall.AFTER_ENV, 0.0) or None
        if seconds is None:
            return None
        path = _stall.pipe_path(env, self.identity.rank)
        if path is None:
            log.warning("fleetscope telemetry: stall dump asked for but %s is not set; off", _stall.PIPE_ENV)
            return None
        return StallDumper(path, float(seconds), self.last_progress, self._now)

    def last_progress(self) -> float | None:
        """When the last step or pause (checkpoint, evaluation) ended; None inside a pause or
        before the first step."""
        with self._lock:
            return None if self._pause_depth > 0 else self._last_progress

    # ---- hot path -------------------------------------------------------------------------
    def step(
        self,
        tokens: float = 0,
        flops: float | None = None,
        loss: Any = None,
        global_step: int | None = None,
    ) -> _Step:
        """Time one optimizer step; counts it when the block exits without an exception."""
        return _Step(self, tokens, flops, loss, global_step)

    def phase(self, name: str) -> _Phase | _Pause:
        """Time a part of the step (``data``, ``forward``, ``backward``, ``optimizer``...).

        ``eval`` and ``checkpoint`` are pauses (as :meth:`evaluation` and :meth:`checkpoint`).
        """
        if name in _PAUSES:
            return _Pause(self, name)
        return _Phase(self, name)

    def evaluation(self) -> _Pause:
        """Time an evaluation/validation loop: ``phase="eval"``, taken out of any open step."""
        return _Pause(self, "eval")

    def checkpoint(
        self,
        step: int | None = None,
        nbytes: float | None = None,
        path: str | os.PathLike[str] | None = None,
    ) -> _CheckpointSave:
        """Time a checkpoint save: ``phase="checkpoint"``, taken out of any open step, and one save.

        The save of global ``step`` (default: the current global step) succeeded when the block
        exits without an exception; ``nbytes`` (or ``save.nbytes`` set inside the block, or the
        size of ``path`` after the save) is what this rank wrote. See :meth:`record_checkpoint_save`.
        """
        return _CheckpointSave(self, step, nbytes, path)

    def record_checkpoint_save(
        self,
        seconds: float,
        success: bool = True,
        step: int | None = None,
        nbytes: float | None = None,
    ) -> None:
        """Count one checkpoint save that took ``seconds`` (for callbacks that time it themselves).

        Only the ``training_checkpoint_*`` series: a caller that did not time the save inside
        :meth:`checkpoint` adds its ``checkpoint`` phase time with :meth:`add_phase_time`.
        """
        overflowed: list[str] = []  # inputs that would make a running total infinite
        secs = _number(seconds)
        if secs is None:
            self._reject("checkpoint seconds", seconds)
            secs = 0.0
        size = None if nbytes is None else _number(nbytes)
        if nbytes is not None and size is None:
            self._reject("checkpoint nbytes", nbytes)
        saved_step = None if step is None else self._step_number("checkpoint step", step)
        now = self._now()
        with self._lock:
            result = "success" if success else "failure"
            self._saves[result] += 1
            self._save_seconds = _sum(self._save_seconds, secs, "checkpoint seconds", overflowed)
            if success:
                self._save_bytes = _sum(self._save_bytes, size or 0.0, "checkpoint nbytes", overflowed)
                self._last_save = now
                self._last_save_step = self._global_step if saved_step is None else saved_step
        self._reject_all(overflowed)

    def _add_checkpoint_bytes(self, nbytes: float) -> None:
        """Bytes of a save measured after it was counted (the size thread calls this)."""
        overflowed: list[str] = []
        with self._lock:
            self._save_bytes = _sum(self._save_bytes, float(nbytes), "checkpoint nbytes", overflowed)
        self._reject_all(overflowed)

    def _reject_all(self, whats: list[str]) -> None:
        """Count inputs that would have made a running total infinite (the total is kept)."""
        for what in whats:
            self._reject(what, None, "a value that would make its running total infinite")

    def checkpoint_loaded(self, step: int | None = None, seconds: float | None = None) -> None:
        """Count one checkpoint load (a resume) of global ``step`` that took ``seconds``.

        Sets ``training_resumed_from_step`` and the global step (steps count on from it).
        ``seconds=None`` when the load could not be timed (it then shows in the startup time only).
        """
        secs = 0.0 if seconds is None else _number(seconds)
        if secs is None:
            self._reject("load seconds", seconds)
            secs = 0.0
        resumed = None if step is None else self._step_number("load step", step)
        overflowed: list[str] = []
        with self._lock:
            self._loads += 1
            self._load_seconds = _sum(self._load_seconds, secs, "load seconds", overflowed)
            if resumed is not None:
                self._resumed_from = resumed
                self._global_step = resumed
        self._reject_all(overflowed)

    def restart(self, attempt: int) -> None:
        """Set ``training_restart_attempt`` (0 for the first run, +1 per restart of the job)."""
        number = self._step_number("restart attempt", attempt)
        if number is not None:
            with self._lock:
                self._attempt = number

    def _step_number(self, what: str, value: Any) -> int | None:
        """A step or attempt number: a non-negative integer, else refused (counted, logged once)."""
        number = _number(value)
        if number is None or number != int(number):
            self._reject(what, value)
            return None
        return int(number)

    def _reject(self, what: str, value: Any, why: str = "not a finite non-negative number") -> None:
        """Refuse one input at the call: counted in :attr:`rejected_inputs`, logged once per kind.
        The value is shown cut to 40 characters (it may be anything the caller passed); ``why`` is
        our own text, shown whole."""
        with self._lock:
            self.rejected_inputs[what] = self.rejected_inputs.get(what, 0) + 1
        shown = "" if value is None else f"={value!r:.40}"
        self._warn_once(
            f"reject:{what}",
            "fleetscope telemetry: ignoring %s%s (%s); later ones are counted in monitor.rejected_inputs,"
            " not logged",
            what,
            shown,
            why,
        )

    def add_phase_time(self, name: str, seconds: float) -> None:
        """Add measured seconds to a phase (for callbacks that time spans themselves).

        Seconds of a pause phase (``eval``, ``checkpoint``) are also taken out of an open step.
        """
        checked = _number(seconds)
        if checked is None:
            self._reject("phase seconds", seconds)
            return
        seconds = checked
        overflowed: list[str] = []
        with self._lock:
            if name in _PAUSES and self._pause_depth == 0:
                self._pause_seconds = _sum(self._pause_seconds, seconds, "phase seconds", overflowed)
            phases = self._phase_seconds
            total = phases.get(name)
            known = total is not None or len(phases) < MAX_PHASES
            if known:
                phases[name] = _sum(total or 0.0, seconds, "phase seconds", overflowed)
        self._reject_all(overflowed)
        if not known:
            self._warn_once("phases", "more than %d phase names; ignoring phase %r", MAX_PHASES, name)

    def record_step(
        self,
        seconds: float,
        tokens: float = 0,
        flops: float | None = None,
        loss: Any = None,
        global_step: int | None = None,
    ) -> None:
        """Count one completed step that took ``seconds`` (what ``with step()`` calls on exit).

        A NaN, infinite or negative ``seconds``, ``tokens`` or ``flops`` is refused (counted in
        :attr:`rejected_inputs`, logged once) and counts as 0: the step still counts, and the rank
        file stays valid. A loss may be anything (a NaN loss is news, not bad telemetry).
        """
        overflowed: list[str] = []  # inputs that would make a running total infinite
        secs = _number(seconds)
        if secs is None:
            self._reject("seconds", seconds)
            secs = 0.0
        ntokens = _number(tokens)
        if ntokens is None:
            self._reject("tokens", tokens)
            ntokens = 0.0
        nflops: float
        if flops is None:
            nflops = ntokens * self._fpt + self._fps
            if not math.isfinite(nflops):  # 1e300 tokens x FLOPs per token
                self._reject("flops", f"{ntokens:g} tokens x {self._fpt:g} FLOPs per token")
                nflops = 0.0
        else:
            checked = _number(flops)
            if checked is None:
                self._reject("flops", flops)
            nflops = 0.0 if checked is None else checked
        step = None if global_step is None else self._step_number("global_step", global_step)
        if loss is not None and not isinstance(loss, float | int):
            detach = getattr(loss, "detach", None)  # keep a tensor, not its autograd graph
            if detach is not None:
                loss = detach()
        now = self._now()
        with self._lock:
            self._steps += 1
            self._step_seconds = _sum(self._step_seconds, secs, "seconds", overflowed)
            self._tokens = _sum(self._tokens, ntokens, "tokens", overflowed)
            self._flops = _sum(self._flops, nflops, "flops", overflowed)
            if loss is not None:
                self._loss = loss
            self._global_step = self._global_step + 1 if step is None else step
            self._last_step = self._last_progress = now
            if self._startup is None:
                self._startup = max(now - self._process_start, 0.0)
        self._reject_all(overflowed)

    def begin_step(self) -> None:
        """Mark the start of a step (for loops that cannot wrap the step in ``with``)."""
        if self._sync is not None:
            self._sync()
        self._step_p0 = self._pause_seconds
        self._step_t0 = self._perf()

    def end_step(
        self,
        tokens: float = 0,
        flops: float | None = None,
        loss: Any = None,
        global_step: int | None = None,
    ) -> None:
        """Count the step begun by :meth:`begin_step` (ignored if none is open)."""
        t0 = self._step_t0
        if t0 is None:
            return
        if self._sync is not None:
            self._sync()
        self._step_t0 = None
        seconds = self._perf() - t0 - (self._pause_seconds - self._step_p0)
        self.record_step(max(seconds, 0.0), tokens, flops, loss, global_step)

    def set_loss(self, loss: Any) -> None:
        """Set the loss gauge outside a step (a tensor is read later by the writer thread)."""
        detach = getattr(loss, "detach", None)
        with self._lock:
            self._loss = detach() if detach is not None else loss

    def set_layout(self, source: Any = None, **ranks: Any) -> None:
        """Set the rank's parallel layout: ``set_layout(pipeline_stage=1, data_parallel_rank=3,
        tensor_parallel_rank=0)`` (also ``context_parallel_rank``, ``expert_parallel_rank``), or an
        object to read it from (``set_layout(device_mesh)``, a DeepSpeed engine...). Values given
        here win over discovered ones; bad values are logged and ignored, never raised."""
        try:
            self._layout.set(source, **ranks)
        except Exception as exc:  # noqa: BLE001 - telemetry must not break training
            self._warn_once("layout", "fleetscope telemetry: cannot use layout %r: %s", source, exc)

    @property
    def layout(self) -> Layout:
        """The layout as known now (may ask the frameworks)."""
        return self._layout.resolve()

    def set_global_step(self, global_step: int) -> None:
        """Set the global step (e.g. after resuming from a checkpoint); steps then count on from it."""
        step = self._step_number("global_step", global_step)
        if step is not None:
            with self._lock:
                self._global_step = step

    # ---- writer side ------------------------------------------------------------------------
    def snapshot(self) -> Snapshot:
        """A consistent copy of the totals (called by the writer thread)."""
        with self._lock:
            snap = Snapshot(
                steps=self._steps,
                step_seconds=self._step_seconds,
                tokens=self._tokens,
                flops=self._flops,
                phase_seconds=dict(self._phase_seconds),
                loss=self._loss,
                global_step=self._global_step,
                last_step_timestamp=self._last_step,
                checkpoint_saves=dict(self._saves),
                checkpoint_save_seconds=self._save_seconds,
                checkpoint_save_bytes=self._save_bytes,
                checkpoint_last_success_timestamp=self._last_save,
                checkpoint_last_success_step=self._last_save_step,
                checkpoint_loads=self._loads,
                checkpoint_load_seconds=self._load_seconds,
                restart_attempt=self._attempt,
                resumed_from_step=self._resumed_from,
                startup_seconds=self._startup,
            )
        snap.loss = _to_float(snap.loss)
        try:
            snap.layout = self._layout.resolve().labels()
        except Exception as exc:  # noqa: BLE001 - the layout is optional; the file is not
            self._warn_once("layout-resolve", "fleetscope telemetry: parallel layout unknown: %s", exc)
        return snap

    def flush(self) -> bool:
        """Write the rank file now, from the calling thread; True when it was written."""
        return self.writer.write_now()

    def close(self) -> None:
        """Stop the writer thread and remove the rank file (unless ``remove_on_close=False``)."""
        if self._closed or os.getpid() != self._pid:  # a forked child must not touch the parent's file
            return
        self._closed = True
        if self.stall_dumper is not None:
            self.stall_dumper.stop()
        wait_for_sizes(5.0)  # checkpoint sizes still being measured go into the last rank file
        self.writer.stop(remove=self._remove_on_close)
        try:
            atexit.unregister(self.close)
        except Exception:  # noqa: BLE001 - interpreter shutdown
            pass

    def __enter__(self) -> TrainingMonitor:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _warn_once(self, key: str, msg: str, *args: object) -> None:
        if key not in self._warned:
            self._warned.add(key)
            log.warning(msg, *args)


def _to_float(value: Any) -> float | None:
    """A loss as float; a tensor is read here, on the writer thread (``.item()`` may wait for the GPU)."""
    if value is None:
        return None
    try:
        number = float(value.item()) if hasattr(value, "item") else float(value)
    except Exception as exc:  # noqa: BLE001 - a bad loss value must never break the writer
        log.debug("loss value %r unreadable: %s", value, exc)
        return None
    return number


def _cuda_synchronizer() -> Callable[[], None] | None:
    """``torch.cuda.synchronize`` when torch and a GPU are there, else None (with a warning)."""
    torch = sys.modules.get("torch")
    if torch is None:
        try:
            torch = importlib.import_module("torch")  # only when the user asked for cuda_sync
        except ImportError:
            log.warning("cuda_sync requested but torch is not installed; phase times are CPU times")
            return None
    if not torch.cuda.is_available():
        log.warning("cuda_sync requested but no CUDA device is available; phase times are CPU times")
        return None
    return torch.cuda.synchronize
