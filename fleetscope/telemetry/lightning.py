"""PyTorch Lightning integration: ``Trainer(callbacks=[FleetscopeCallback(flops_per_token=fpt)])``.

Importing this module imports Lightning (``lightning.pytorch`` when installed, else
``pytorch_lightning``); ``fleetscope.telemetry`` itself never does. Install with the ``lightning``
extra.

What is timed, from Lightning's hooks (wall time on the CPU unless ``cuda_sync=True``):

* ``data``: from the previous batch's end (or the epoch's start) to ``on_train_batch_start``;
* ``forward``: ``on_train_batch_start`` to ``on_before_backward`` (your ``training_step``);
* ``backward``: ``on_before_backward`` to ``on_after_backward``;
* ``optimizer``: ``on_before_optimizer_step`` to ``on_train_batch_end``.

Pauses (``contract.PAUSE_PHASES``), never part of a step's time nor of ``data``:

* ``eval``: validation loops (the sanity check included), from the last training batch's end (or
  ``on_validation_start`` when there is none) to ``on_validation_end``;
* ``checkpoint``: every ``trainer.save_checkpoint`` call (what ``ModelCheckpoint`` uses), timed
  around the call: gathering the state, writing it and the barrier after it.

Checkpoints and restarts (``training_checkpoint_*``, ``training_resumed_from_step``):

* every ``trainer.save_checkpoint`` call is one save of ``trainer.global_step``, a failure when it
  raises; the global-zero rank counts the size of the file (or directory) it wrote, the others none
  (a sharded strategy's ranks each write a shard but the path names the whole checkpoint);
* ``fit(ckpt_path=...)`` is a load: ``trainer.strategy.load_checkpoint`` is timed, and the
  checkpoint's ``global_step`` becomes the resumed-from step;
* the restart attempt and the startup time come from the monitor (:mod:`..process`).

A step is an optimizer step (``trainer.global_step`` advancing), so with gradient accumulation its
tokens and time cover all its micro-batches; its time runs from the data wait of its first
micro-batch to the end of its last, less any pause in between. Tokens per batch come from
``tokens_per_batch`` (a number, or a function of the batch), else from ``batch["input_ids"]`` or an
integer tensor batch. Under ``ModelParallelStrategy`` the strategy's device mesh gives the
parallel layout (``training_info{pipeline_stage, data_parallel_rank, ...}``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Callable
from time import perf_counter
from typing import Any

from fleetscope.telemetry._integration import MonitorHolder, TokenCount
from fleetscope.telemetry.monitor import TrainingMonitor, add_checkpoint_size_later


def _lightning() -> Any:
    try:
        return importlib.import_module("lightning.pytorch")
    except ImportError:
        return importlib.import_module("pytorch_lightning")


pl = _lightning()
log = logging.getLogger("fleetscope.telemetry")


class FleetscopeCallback(pl.Callback):  # type: ignore[name-defined]
    """Feeds a :class:`~fleetscope.telemetry.TrainingMonitor` from Lightning's training hooks.

    ``monitor``: an existing monitor; otherwise one is created at ``setup`` with the trainer's global
    and local rank and ``monitor_kwargs`` (``flops_per_token``, ``job_id``, ``directory``...), and
    closed at ``teardown``.
    """

    def __init__(
        self,
        monitor: TrainingMonitor | None = None,
        tokens_per_batch: TokenCount = None,
        **monitor_kwargs: Any,
    ) -> None:
        super().__init__()
        self._holder = MonitorHolder(monitor, tokens_per_batch, monitor_kwargs)
        self._mark: float | None = None
        self._step_t0: float | None = None
        self._phase_t0 = 0.0
        self._opt_t0: float | None = None
        self._tokens = 0.0
        self._last_global_step = 0
        self._eval_t0: float | None = None
        self._paused = 0.0  # pause seconds inside the open step
        self._trainer: Any = None
        self._save: Callable[..., Any] | None = None
        self._shadowed: Callable[..., Any] | None = None  # an instance attribute we replaced
        self._strategy: Any = None
        self._load: Callable[..., Any] | None = None
        self._load_shadowed: Callable[..., Any] | None = None

    @property
    def monitor(self) -> TrainingMonitor | None:
        return self._holder.monitor

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage != "fit":
            return
        m = self._holder.ensure(rank=trainer.global_rank, local_rank=trainer.local_rank)
        try:
            mesh = trainer.strategy.device_mesh  # ModelParallelStrategy; others have none
        except Exception:  # noqa: BLE001 - AttributeError, or RuntimeError before the mesh exists
            mesh = None
        if mesh is not None:
            m.set_layout(mesh)
        self._time_checkpoint_saves(trainer)
        self._time_checkpoint_loads(trainer)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._restore_save_checkpoint()
            self._restore_load_checkpoint()
            self._holder.release()

    # ---- pauses ---------------------------------------------------------------------------
    def _pause(self, phase: str, seconds: float) -> None:
        m = self.monitor
        if m is None:
            return
        m.add_phase_time(phase, seconds)
        if self._step_t0 is not None:  # validation or a save between micro-batches of one step
            self._paused += seconds

    def _time_checkpoint_saves(self, trainer: Any) -> None:
        """Wrap this trainer's ``save_checkpoint`` (the instance's, not the class's) to time it."""
        if self._save is not None:
            return
        try:
            original = trainer.save_checkpoint
            shadowed = vars(trainer).get("save_checkpoint")  # someone else's wrapper, to put back
        except (AttributeError, TypeError):
            return

        @functools.wraps(original)
        def save_checkpoint(*args: Any, **kwargs: Any) -> Any:
            t0 = perf_counter()
            ok = False
            try:
                result = original(*args, **kwargs)
                ok = True
                return result
            finally:
                now = perf_counter()
                if self._eval_t0 is None:  # a save inside validation is validation time already
                    self._pause("checkpoint", now - t0)
                    self._mark = now
                elif self.monitor is not None:
                    self.monitor.add_phase_time("checkpoint", now - t0)
                self._count_save(trainer, now - t0, ok, args[0] if args else kwargs.get("filepath"))

        try:
            trainer.save_checkpoint = save_checkpoint
        except Exception as exc:  # noqa: BLE001 - a trainer that forbids it: no checkpoint phase
            log.warning("fleetscope: cannot time checkpoint saves on this trainer: %s", exc)
            return
        self._trainer, self._save, self._shadowed = trainer, save_checkpoint, shadowed

    def _count_save(self, trainer: Any, seconds: float, ok: bool, path: Any) -> None:
        m = self.monitor
        if m is None:
            return
        measure = None
        try:
            if ok and path is not None and trainer.is_global_zero:
                measure = os.fspath(path)  # a remote path (s3://...) has no local size: absent
            step = trainer.global_step
        except Exception as exc:  # noqa: BLE001 - a trainer without these must not break training
            log.debug("fleetscope: checkpoint step unknown: %s", exc)
            step = None
        m.record_checkpoint_save(seconds, success=ok, step=step)
        if measure is not None:  # measured off the training thread
            add_checkpoint_size_later(m, measure)

    def _time_checkpoint_loads(self, trainer: Any) -> None:
        """Wrap this trainer's strategy's ``load_checkpoint`` (what ``fit(ckpt_path=...)`` calls)."""
        if self._load is not None:
            return
        try:
            strategy = trainer.strategy
            original = strategy.load_checkpoint
            shadowed = vars(strategy).get("load_checkpoint")
        except (AttributeError, TypeError):
            return

        @functools.wraps(original)
        def load_checkpoint(*args: Any, **kwargs: Any) -> Any:
            t0 = perf_counter()
            loaded = original(*args, **kwargs)
            m = self.monitor
            if m is not None:
                step = loaded.get("global_step") if isinstance(loaded, dict) else None
                m.checkpoint_loaded(step, perf_counter() - t0)
            return loaded

        try:
            strategy.load_checkpoint = load_checkpoint
        except Exception as exc:  # noqa: BLE001 - a strategy that forbids it: no load telemetry
            log.warning("fleetscope: cannot time checkpoint loads on this strategy: %s", exc)
            return
        self._strategy, self._load, self._load_shadowed = strategy, load_checkpoint, shadowed

    def _restore_load_checkpoint(self) -> None:
        strategy, self._strategy = self._strategy, None
        if strategy is not None and vars(strategy).get("load_checkpoint") is self._load:
            if self._load_shadowed is not None:
                strategy.load_checkpoint = self._load_shadowed
            else:
                del strategy.load_checkpoint
        self._load = self._load_shadowed = None

    def _restore_save_checkpoint(self) -> None:
        trainer, self._trainer = self._trainer, None
        if trainer is not None and vars(trainer).get("save_checkpoint") is self._save:
            if self._shadowed is not None:
                trainer.save_checkpoint = self._shadowed
            else:
                del trainer.save_checkpoint  # the class's method again
        self._save = self._shadowed = None

    def on_validation_start(self, trainer: Any, pl_module: Any) -> None:
        self._eval_t0 = self._mark if self._mark is not None else perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        now = perf_counter()
        if self._eval_t0 is not None:
            self._pause("eval", now - self._eval_t0)
        self._eval_t0 = None
        self._mark = now  # validation time is not the next batch's data wait

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._last_global_step = trainer.global_step
        if self.monitor is not None:
            self.monitor.set_global_step(trainer.global_step)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._mark = perf_counter()

    def on_train_batch_start(self, trainer: Any, pl_module: Any, batch: Any, batch_idx: int) -> None:
        m = self.monitor
        if m is None:
            return
        now = perf_counter()
        if self._mark is not None:
            m.add_phase_time("data", now - self._mark)
        if self._step_t0 is None:
            self._step_t0 = self._mark if self._mark is not None else now
        self._tokens += self._holder.tokens_of(batch)
        self._phase_t0 = now
        self._opt_t0 = None

    def on_before_backward(self, trainer: Any, pl_module: Any, loss: Any) -> None:
        if self.monitor is not None:
            now = perf_counter()
            self.monitor.add_phase_time("forward", now - self._phase_t0)
            self._phase_t0 = now

    def on_after_backward(self, trainer: Any, pl_module: Any) -> None:
        if self.monitor is not None:
            now = perf_counter()
            self.monitor.add_phase_time("backward", now - self._phase_t0)
            self._phase_t0 = now

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        self._opt_t0 = perf_counter()

    def on_train_batch_end(
        self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int
    ) -> None:
        m = self.monitor
        if m is None:
            return
        now = perf_counter()
        if self._opt_t0 is not None:
            m.add_phase_time("optimizer", now - self._opt_t0)
            self._opt_t0 = None
        self._mark = now
        if trainer.global_step == self._last_global_step:
            return  # a micro-batch of gradient accumulation: the step goes on
        self._last_global_step = trainer.global_step
        loss = outputs.get("loss") if isinstance(outputs, dict) else outputs
        t0 = self._step_t0 if self._step_t0 is not None else now
        seconds = max(now - t0 - self._paused, 0.0)
        m.record_step(seconds, self._tokens, loss=loss, global_step=trainer.global_step)
        self._step_t0 = None
        self._paused = 0.0
        self._tokens = 0.0
