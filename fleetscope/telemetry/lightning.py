"""PyTorch Lightning integration: ``Trainer(callbacks=[FleetscopeCallback(flops_per_token=fpt)])``.

Importing this module imports Lightning (``lightning.pytorch`` when installed, else
``pytorch_lightning``); ``fleetscope.telemetry`` itself never does. Install with the ``lightning``
extra.

What is timed, from Lightning's hooks (wall time on the CPU unless ``cuda_sync=True``):

* ``data``: from the previous batch's end (or the epoch's start) to ``on_train_batch_start``;
* ``forward``: ``on_train_batch_start`` to ``on_before_backward`` (your ``training_step``);
* ``backward``: ``on_before_backward`` to ``on_after_backward``;
* ``optimizer``: ``on_before_optimizer_step`` to ``on_train_batch_end``.

A step is an optimizer step (``trainer.global_step`` advancing), so with gradient accumulation its
tokens and time cover all its micro-batches; its time runs from the data wait of its first
micro-batch to the end of its last. Validation is excluded. Tokens per batch come from
``tokens_per_batch`` (a number, or a function of the batch), else from ``batch["input_ids"]`` or an
integer tensor batch.
"""

from __future__ import annotations

import importlib
from time import perf_counter
from typing import Any

from fleetscope.telemetry._integration import MonitorHolder, TokenCount
from fleetscope.telemetry.monitor import TrainingMonitor


def _lightning() -> Any:
    try:
        return importlib.import_module("lightning.pytorch")
    except ImportError:
        return importlib.import_module("pytorch_lightning")


pl = _lightning()


class FleetscopeCallback(pl.Callback):  # type: ignore[misc,name-defined]
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

    @property
    def monitor(self) -> TrainingMonitor | None:
        return self._holder.monitor

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._holder.ensure(rank=trainer.global_rank, local_rank=trainer.local_rank)

    def teardown(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self._holder.release()

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        self._last_global_step = trainer.global_step
        if self.monitor is not None:
            self.monitor.set_global_step(trainer.global_step)

    def on_train_epoch_start(self, trainer: Any, pl_module: Any) -> None:
        self._mark = perf_counter()

    def on_validation_end(self, trainer: Any, pl_module: Any) -> None:
        self._mark = perf_counter()  # validation time is not the next batch's data wait

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
        m.record_step(now - t0, self._tokens, loss=loss, global_step=trainer.global_step)
        self._step_t0 = None
        self._tokens = 0.0
