"""Hugging Face transformers integration: ``Trainer(..., callbacks=[FleetscopeTrainerCallback(...)])``.

Importing this module imports ``transformers``; ``fleetscope.telemetry`` itself never does. Install
with the ``hf`` extra.

What is timed (wall time on the CPU unless ``cuda_sync=True``):

* ``data``: from the previous step's end (or the training start) to ``on_step_begin``, i.e. the
  Trainer fetching the step's batches;
* ``forward``: the model's own ``forward`` calls inside the step, timed by forward hooks on the
  model the Trainer passes to ``on_train_begin``;
* ``backward``: the rest of ``on_step_begin`` to ``on_pre_optimizer_step`` (backward passes and
  gradient clipping);
* ``optimizer``: ``on_pre_optimizer_step`` to ``on_step_end``.

Pauses (``contract.PAUSE_PHASES``), never part of a step's time nor of ``data``; the Trainer runs
them after a step's ``on_step_end``, in the order log, evaluate, save:

* ``eval``: from the step's end to ``on_evaluate`` (the whole evaluation loop, with its
  ``on_prediction_step`` batches and the logging of its metrics);
* ``checkpoint``: from the step's end, or the evaluation's, to ``on_save`` (the save is done when
  the Trainer calls it).

Only evaluations during ``train()`` count; ``trainer.evaluate()`` outside training is no pause.

Checkpoints and restarts (``training_checkpoint_*``, ``training_resumed_from_step``):

* each ``on_save`` is one successful save of ``state.global_step`` that took the ``checkpoint``
  pause; the world-process-zero rank counts the size of ``<output_dir>/checkpoint-<step>``. A save
  that raises ends ``train()`` before any callback event, so failed saves are not seen here;
* a ``train(resume_from_checkpoint=...)`` is a load of the restored ``state.global_step``. The
  Trainer loads before its first callback event, so the load is not timed: its time shows in
  ``training_startup_seconds`` (process start to the first step), which the monitor measures;
* the restart attempt comes from the launcher's environment (:mod:`..process`).

Tokens per step: the increase of ``state.num_input_tokens_seen`` divided by the world size when the
Trainer counts tokens (``include_num_input_tokens_seen=True``, which counts every rank's), else
``tokens_per_step``. The loss gauge follows the Trainer's logged ``loss``.
"""

from __future__ import annotations

import logging
import os
from time import perf_counter
from typing import Any

from transformers import TrainerCallback
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR

from fleetscope.telemetry._integration import MonitorHolder
from fleetscope.telemetry.monitor import TrainingMonitor, add_checkpoint_size_later

log = logging.getLogger("fleetscope.telemetry")


class FleetscopeTrainerCallback(TrainerCallback):
    """Feeds a :class:`~fleetscope.telemetry.TrainingMonitor` from the Trainer's callback events.

    ``monitor``: an existing monitor; otherwise one is created at ``on_train_begin`` with the
    Trainer's process index and ``monitor_kwargs`` (``flops_per_token``, ``job_id``, ...), and
    closed at ``on_train_end``.
    """

    def __init__(
        self,
        monitor: TrainingMonitor | None = None,
        tokens_per_step: float | None = None,
        **monitor_kwargs: Any,
    ) -> None:
        self._holder = MonitorHolder(monitor, None, monitor_kwargs)
        self.tokens_per_step = tokens_per_step
        self._mark: float | None = None
        self._step_t0: float | None = None
        self._phase_t0 = 0.0
        self._forward_seconds = 0.0
        self._forward_t0: float | None = None
        self._in_step = False
        self._tokens_seen = 0
        self._hooks: list[Any] = []
        self._training = False

    @property
    def monitor(self) -> TrainingMonitor | None:
        return self._holder.monitor

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, **kwargs: Any) -> None:
        m = self._holder.ensure(rank=args.process_index, local_rank=max(args.local_process_index, 0))
        m.set_global_step(state.global_step)
        if state.global_step > 0:  # the Trainer restored its state from a checkpoint
            m.checkpoint_loaded(state.global_step)
        self._tokens_seen = state.num_input_tokens_seen
        if model is not None and hasattr(model, "register_forward_hook"):
            self._hooks = [
                model.register_forward_pre_hook(self._before_forward),
                model.register_forward_hook(self._after_forward),
            ]
        self._mark = perf_counter()
        self._training = True

    def _before_forward(self, module: Any, inputs: Any) -> None:
        if self._in_step:
            self._forward_t0 = perf_counter()

    def _after_forward(self, module: Any, inputs: Any, output: Any) -> None:
        if self._in_step and self._forward_t0 is not None:
            self._forward_seconds += perf_counter() - self._forward_t0
            self._forward_t0 = None

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        m = self.monitor
        if m is None:
            return
        now = perf_counter()
        if self._mark is not None:
            m.add_phase_time("data", now - self._mark)
        self._step_t0 = self._mark if self._mark is not None else now
        self._phase_t0 = now
        self._forward_seconds = 0.0
        self._in_step = True

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        m = self.monitor
        if m is None or not self._in_step:
            return
        now = perf_counter()
        forward_backward = now - self._phase_t0
        forward = min(self._forward_seconds, forward_backward)
        m.add_phase_time("forward", forward)
        m.add_phase_time("backward", forward_backward - forward)
        self._phase_t0 = now
        self._in_step = False

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        m = self.monitor
        if m is None:
            return
        now = perf_counter()
        m.add_phase_time("optimizer", now - self._phase_t0)
        seen = state.num_input_tokens_seen
        if seen > self._tokens_seen:
            tokens = (seen - self._tokens_seen) / max(args.world_size, 1)
        else:
            tokens = self.tokens_per_step or 0.0
        self._tokens_seen = seen
        t0 = self._step_t0 if self._step_t0 is not None else now
        m.record_step(now - t0, tokens, global_step=state.global_step)
        self._in_step = False
        self._mark = now

    def _pause(self, phase: str) -> float | None:
        """Count the time since the last mark (the step's end, or the previous pause) as ``phase``."""
        if self.monitor is not None and self._mark is not None and self._training and not self._in_step:
            now = perf_counter()
            seconds = now - self._mark
            self.monitor.add_phase_time(phase, seconds)
            self._mark = now
            return seconds
        return None

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        seconds = self._pause("checkpoint")
        m = self.monitor
        if seconds is None or m is None:
            return
        m.record_checkpoint_save(seconds, success=True, step=state.global_step)
        if state.is_world_process_zero and args.output_dir:  # measured off the training thread
            add_checkpoint_size_later(
                m, os.path.join(args.output_dir, f"{PREFIX_CHECKPOINT_DIR}-{state.global_step}")
            )

    def on_evaluate(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._pause("eval")

    def on_log(
        self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None, **kwargs: Any
    ) -> None:
        if self.monitor is not None and logs and "loss" in logs:
            self.monitor.set_loss(logs["loss"])

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._training = False
        for hook in self._hooks:
            hook.remove()
        self._hooks = []
        self._holder.release()
