"""fleetscope.telemetry: per-rank training telemetry for the ``training`` collector.

Needs only the standard library and prometheus_client; torch is imported only by the optional
integrations (:mod:`.lightning`, :mod:`.hf`) and by ``cuda_sync=True``. See docs/telemetry.md.
"""

from fleetscope.telemetry.flops import (
    FlopsPerToken,
    dense_decoder_params,
    flops_per_token,
    non_embedding_params,
)
from fleetscope.telemetry.identity import RankIdentity, detect
from fleetscope.telemetry.layout import Layout
from fleetscope.telemetry.monitor import Snapshot, TrainingMonitor

Monitor = TrainingMonitor

__all__ = [
    "FlopsPerToken",
    "Layout",
    "Monitor",
    "RankIdentity",
    "Snapshot",
    "TrainingMonitor",
    "dense_decoder_params",
    "detect",
    "flops_per_token",
    "non_embedding_params",
]
