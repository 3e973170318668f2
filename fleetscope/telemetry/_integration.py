"""What the framework callbacks share: owning or borrowing a monitor, and counting a batch's tokens."""

from __future__ import annotations

import logging
from collections.abc import Callable, Mapping
from typing import Any

from fleetscope.telemetry.monitor import TrainingMonitor

log = logging.getLogger("fleetscope.telemetry")

TokenCount = int | Callable[[Any], float] | None


def count_tokens(batch: Any) -> float | None:
    """Tokens in a batch when it is recognisable: ``input_ids`` of a mapping, else an integer tensor
    (token ids), first element of a tuple or list. None when unknown."""
    if isinstance(batch, Mapping):
        ids = batch.get("input_ids")
        return float(ids.numel()) if ids is not None and hasattr(ids, "numel") else None
    if isinstance(batch, tuple | list) and batch:
        batch = batch[0]
    dtype = getattr(batch, "dtype", None)
    if dtype is not None and hasattr(batch, "numel") and not getattr(dtype, "is_floating_point", True):
        return float(batch.numel())
    return None


class MonitorHolder:
    """A callback's monitor: the one given, or one it creates (and closes) itself."""

    def __init__(
        self, monitor: TrainingMonitor | None, tokens: TokenCount, monitor_kwargs: dict[str, Any]
    ) -> None:
        self.monitor = monitor
        self._owned = False
        self._tokens = tokens
        self._monitor_kwargs = monitor_kwargs
        self._warned = False

    def ensure(self, **identity: Any) -> TrainingMonitor:
        if self.monitor is None:
            kwargs = {k: v for k, v in identity.items() if v is not None}
            kwargs.update(self._monitor_kwargs)
            self.monitor = TrainingMonitor(**kwargs)
            self._owned = True
        return self.monitor

    def release(self) -> None:
        if self._owned and self.monitor is not None:
            self.monitor.close()
            self.monitor = None
            self._owned = False

    def tokens_of(self, batch: Any) -> float:
        tokens = self._tokens
        if isinstance(tokens, int | float):
            return float(tokens)
        if callable(tokens):
            return float(tokens(batch))
        n = count_tokens(batch)
        if n is None:
            if not self._warned:
                self._warned = True
                log.warning("fleetscope: cannot count the tokens of this batch; pass tokens_per_batch=")
            return 0.0
        return n
