"""Who is this rank: job id, rank, local rank and GPU index, read from the launcher's environment.

Launchers export their identity in environment variables; the first one found wins:

============  ==================================================================================
job_id        ``FLEETSCOPE_JOB_ID``, ``SLURM_JOB_ID``, ``TORCHELASTIC_RUN_ID`` (unless ``none``),
              ``JOBSET_NAME`` (Kubernetes JobSet), ``JOB_NAME``; else ``local-<pid>`` (see below)
rank          ``FLEETSCOPE_RANK``, ``RANK`` (torchrun), ``SLURM_PROCID``, ``OMPI_COMM_WORLD_RANK``,
              ``PMI_RANK``, ``JOB_COMPLETION_INDEX`` (Kubernetes indexed Job); else 0
local_rank    ``FLEETSCOPE_LOCAL_RANK``, ``LOCAL_RANK``, ``SLURM_LOCALID``,
              ``OMPI_COMM_WORLD_LOCAL_RANK``; else 0
gpu           ``FLEETSCOPE_GPU``; else the ``local_rank``-th entry of ``CUDA_VISIBLE_DEVICES`` when
              it lists indices (the only entry when it lists one); else ``local_rank``
============  ==================================================================================

The ``gpu`` label must be the device index the node exporter (and dcgm-exporter) uses, so that MFU
can join on ``(Hostname, gpu)``. When ``CUDA_VISIBLE_DEVICES`` holds UUIDs, or a container sees
renumbered devices, pass ``gpu=`` (or ``FLEETSCOPE_GPU``) explicitly.

Without any job id the fallback is ``local-<pid>``, where the pid is the parent's when a launcher
set ``RANK`` (``torch.multiprocessing.spawn`` and ``torchrun`` children share a parent on one
node), else the process's own.
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping
from dataclasses import dataclass

_JOB_ID_VARS = ("FLEETSCOPE_JOB_ID", "SLURM_JOB_ID", "TORCHELASTIC_RUN_ID", "JOBSET_NAME", "JOB_NAME")
_RANK_VARS = (
    "FLEETSCOPE_RANK",
    "RANK",
    "SLURM_PROCID",
    "OMPI_COMM_WORLD_RANK",
    "PMI_RANK",
    "JOB_COMPLETION_INDEX",
)
_LOCAL_RANK_VARS = ("FLEETSCOPE_LOCAL_RANK", "LOCAL_RANK", "SLURM_LOCALID", "OMPI_COMM_WORLD_LOCAL_RANK")


@dataclass(frozen=True)
class RankIdentity:
    """The label values of one rank (``Hostname`` is added by the exporter, not here)."""

    job_id: str
    rank: int
    local_rank: int
    gpu: str

    def file_stem(self) -> str:
        """``<job_id>-rank<rank>`` with every character outside ``[A-Za-z0-9_.-]`` replaced by ``_``."""
        safe = re.sub(r"[^A-Za-z0-9_.-]", "_", self.job_id).lstrip(".") or "_"
        return f"{safe}-rank{self.rank}"


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> str | None:
    for name in names:
        value = env.get(name, "").strip()
        if value and not (name == "TORCHELASTIC_RUN_ID" and value == "none"):
            return value
    return None


def _int(value: str | None, what: str) -> int | None:
    if value is None:
        return None
    try:
        number = int(value)
    except ValueError:
        raise ValueError(f"{what} must be an integer, got {value!r}") from None
    if number < 0:
        raise ValueError(f"{what} must not be negative, got {number}")
    return number


def gpu_from_env(local_rank: int, env: Mapping[str, str]) -> str:
    """The GPU index of a rank: ``FLEETSCOPE_GPU``, else ``CUDA_VISIBLE_DEVICES``, else ``local_rank``."""
    explicit = env.get("FLEETSCOPE_GPU", "").strip()
    if explicit:
        return explicit
    visible = [d.strip() for d in env.get("CUDA_VISIBLE_DEVICES", "").split(",") if d.strip()]
    if visible and all(d.isdigit() for d in visible):
        if len(visible) == 1:
            return visible[0]
        if local_rank < len(visible):
            return visible[local_rank]
    return str(local_rank)


def detect(
    job_id: str | None = None,
    rank: int | None = None,
    local_rank: int | None = None,
    gpu: int | str | None = None,
    env: Mapping[str, str] | None = None,
) -> RankIdentity:
    """The rank's identity: explicit arguments first, then the environment (see the module doc)."""
    env = os.environ if env is None else env
    rank_value = rank if rank is not None else _int(_first(env, _RANK_VARS), "rank")
    local = local_rank if local_rank is not None else _int(_first(env, _LOCAL_RANK_VARS), "local rank")
    local = local if local is not None else 0
    if job_id is None:
        job_id = _first(env, _JOB_ID_VARS)
    if not job_id:
        launched = "RANK" in env or "LOCAL_RANK" in env
        job_id = f"local-{os.getppid() if launched else os.getpid()}"
    return RankIdentity(
        job_id=str(job_id),
        rank=int(rank_value) if rank_value is not None else 0,
        local_rank=int(local),
        gpu=str(gpu) if gpu is not None else gpu_from_env(int(local), env),
    )
