"""Facts about this run that the launcher or the kernel knows: when the process started, which restart.

``training_startup_seconds`` runs from the process start (not the monitor's creation, which may
come after imports, model construction and a checkpoint load) to the first completed step. The
start is read from ``/proc/self/stat`` (field 22, clock ticks after boot) and ``/proc/stat``
(``btime``, the boot's Unix time); where there is no procfs, the import time of this module stands in.

``training_restart_attempt`` comes from the first of ``FLEETSCOPE_RESTART_ATTEMPT``,
``TORCHELASTIC_RESTART_COUNT`` (torchrun sets it for every worker group it restarts) and
``SLURM_RESTART_COUNT`` (Slurm sets it when a job is requeued); 0 when none is set.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping
from time import time

log = logging.getLogger("fleetscope.telemetry")

RESTART_VARS: tuple[str, ...] = (
    "FLEETSCOPE_RESTART_ATTEMPT",
    "TORCHELASTIC_RESTART_COUNT",
    "SLURM_RESTART_COUNT",
)

_IMPORTED_AT = time()


def process_start_time(procfs: str = "/proc") -> float:
    """Unix time this process started (the import time of this module when procfs cannot tell)."""
    try:
        with open(f"{procfs}/self/stat", encoding="ascii", errors="replace") as f:
            ticks = int(f.read().rsplit(")", 1)[1].split()[19])
        with open(f"{procfs}/stat", encoding="ascii", errors="replace") as f:
            btime = next(int(line.split()[1]) for line in f if line.startswith("btime "))
        hz = os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return _IMPORTED_AT
    start = btime + ticks / hz
    # btime has whole-second resolution and NTP may step the clock: never after the import
    return min(start, _IMPORTED_AT)


def restart_attempt(env: Mapping[str, str]) -> int:
    """The restart attempt the launcher exported (0 for the first run); a bad value is logged, 0."""
    for name in RESTART_VARS:
        raw = env.get(name, "").strip()
        if not raw:
            continue
        if raw.isascii() and raw.isdigit():
            return int(raw)
        log.warning("fleetscope telemetry: %s=%r is not a restart count; using 0", name, raw[:40])
        return 0
    return 0
