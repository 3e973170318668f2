"""The window's series aligned per GPU and per rank: what every signal and detector reads.

Computed once per analysis from :class:`~fleetscope.window.frames.Frames`. The signals derived
from these (slowness, MFU, hardware evidence, ...) live in :mod:`fleetscope.analyzers.signals`,
which reads this module (never the other way); the detectors only compare and decide.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
import pandas as pd

from fleetscope import contract as c
from fleetscope import labels as label_rules
from fleetscope.analyzers.carry import Carry
from fleetscope.analyzers.config import DetectorConfig
from fleetscope.analyzers.nanstats import nanmedian
from fleetscope.window.frames import Frames, increase_steps, rolling_sum, row_codes

#: Inter-token latency under either name (V1 from v0.11; V0 and early V1): ``new or old``.
ITL_NAMES = (c.VLLM_INTER_TOKEN_LATENCY, c.VLLM_TIME_PER_OUTPUT_TOKEN)
KV_NAMES = (c.VLLM_KV_CACHE_USAGE, c.VLLM_GPU_CACHE_USAGE)
SERVING_HISTOGRAMS = (c.VLLM_TIME_TO_FIRST_TOKEN, *ITL_NAMES)

#: Every serving series the analyzers read (appended to :data:`METRICS_USED`; the serving signals,
#: :mod:`fleetscope.analyzers.signals.serving`, read them).
SERVING_METRICS: tuple[str, ...] = (
    c.VLLM_NUM_REQUESTS_RUNNING,
    c.VLLM_NUM_REQUESTS_WAITING,
    *KV_NAMES,
    c.VLLM_NUM_PREEMPTIONS,
    c.VLLM_PROMPT_TOKENS,
    c.VLLM_GENERATION_TOKENS,
    c.VLLM_REQUEST_SUCCESS,
    *(s for h in SERVING_HISTOGRAMS for s in (h.bucket, h.sum, h.observations)),
)

#: Every metric the analyzers read (the loaders fetch only these).
METRICS_USED: tuple[str, ...] = (
    c.GPU_UP,
    c.GPU_XID_ERRORS_TOTAL,
    c.DCGM_FI_DEV_XID_ERRORS,
    c.GPU_PEAK_FLOPS,
    c.DCGM_FI_DEV_SM_CLOCK,
    c.DCGM_FI_DEV_GPU_UTIL,
    c.DCGM_FI_DEV_GPU_TEMP,
    c.DCGM_FI_DEV_POWER_USAGE,
    c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS,
    c.DCGM_FI_DEV_POWER_VIOLATION,
    c.DCGM_FI_DEV_THERMAL_VIOLATION,
    c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE,
    c.DCGM_FI_DEV_PCIE_LINK_WIDTH,
    c.DCGM_FI_DEV_ECC_DBE_VOL_TOTAL,
    c.DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS,
    c.DCGM_FI_DEV_ROW_REMAP_FAILURE,
    c.DCGM_FI_DEV_GPU_RECOVERY_ACTION,
    c.TRAINING_STEPS,
    c.TRAINING_STEP_SECONDS,
    c.TRAINING_PHASE_SECONDS,
    c.TRAINING_TOKENS,
    c.TRAINING_MODEL_FLOPS,
    c.TRAINING_INFO,
    c.EFA_TX_PKTS,
    c.EFA_RETRANS_PKTS,
    c.EFA_RETRANS_TIMEOUT_EVENTS,
    c.EFA_IMPAIRED_REMOTE_CONN_EVENTS,
    c.EFA_UNRESPONSIVE_REMOTE_EVENTS,
    c.LUSTRE_CLIENT_READ_BYTES,
    c.LUSTRE_CLIENT_WRITE_BYTES,
    c.NEURON_HW_ECC_EVENTS,
    c.NEURON_EXECUTION_ERRORS,
    c.NEURON_EXECUTION_LATENCY,
    c.NEURON_DEVICES,
    *SERVING_METRICS,
)

GPU_KEY = (c.NODE_LABEL, "gpu")
RANK_KEY = ("job_id", "rank", c.NODE_LABEL, "gpu")


@dataclass
class GpuSignals:
    """One column per GPU (Hostname, gpu), one row per grid time."""

    keys: pd.DataFrame
    clock: np.ndarray
    util: np.ndarray
    temp: np.ndarray
    power: np.ndarray
    reasons: np.ndarray
    tensor: np.ndarray
    pcie_width: np.ndarray
    thermal_viol: np.ndarray  # ns throttled per ns (share of time)
    power_viol: np.ndarray
    index: dict[tuple[str, str], int] = field(default_factory=dict)

    def col(self, node: str, gpu: str) -> int | None:
        return self.index.get((node, gpu))


#: The longest wall time one training step can take: a step's time is counted when it ends, so one
#: interval may add a whole step begun long before it (a first step compiling for an hour).
MAX_STEP_S = 86_400.0
#: What one rank can add per second of wall time, at most. Step and phase seconds: one second (a
#: rank's steps run one after another). Model FLOPs: 1e17 FLOP/s, over seven times the largest
#: dense peak in fleetscope's table (B300 fp4, 13.5e15; docs/design.md). Steps: 1e4 a second (a
#: step of 100 us computes nothing a cluster is needed for). Tokens: 1e8 a second.
PHYSICAL_PER_S: dict[str, float] = {
    c.TRAINING_STEPS: 1e4,
    c.TRAINING_STEP_SECONDS: 1.0,
    c.TRAINING_PHASE_SECONDS: 1.0,
    c.TRAINING_MODEL_FLOPS: 1e17,
    c.TRAINING_TOKENS: 1e8,
}


def physical_increase(
    raw: np.ndarray, times: np.ndarray, per_s: float, rejected: dict[str, int], name: str
) -> np.ndarray:
    """:func:`increase_steps` of the counters ``raw`` (T x S), with the increases no rank can make
    left out (NaN) and counted in ``rejected[name]``: negative ones, and those beyond ``per_s``
    times the wall time since the series' first sample in the window plus :data:`MAX_STEP_S`
    (a step-seconds counter of 1.7e308 made every goodput sum infinite, and the jobs API 500)."""
    d = increase_steps(raw)
    if not d.size:
        return d
    present = ~np.isnan(raw)
    first = np.where(present.any(axis=0), present.argmax(axis=0), 0)
    elapsed = np.asarray(times, dtype=float)[:, None] - np.asarray(times, dtype=float)[first][None, :]
    with np.errstate(invalid="ignore", over="ignore"):
        bad = (d < 0) | (d > per_s * (elapsed + MAX_STEP_S))
    if bad.any():
        rejected[name] = rejected.get(name, 0) + int(bad.sum())
        d = np.where(bad, np.nan, d)
    return d


@dataclass
class RankSignals:
    """One column per rank series (job_id, rank, Hostname, gpu)."""

    keys: pd.DataFrame
    steps: np.ndarray  # per-step increments
    compute: np.ndarray  # forward+backward seconds, per-step increments
    phases: dict[str, np.ndarray]
    step_seconds: np.ndarray
    flops: np.ndarray
    tokens: np.ndarray
    present: np.ndarray  # bool, series has a sample
    #: Per counter, the increases left out as impossible (:func:`physical_increase`).
    rejected: dict[str, int] = field(default_factory=dict)


@dataclass
class Features:
    frames: Frames
    config: DetectorConfig
    #: Grid steps behind every rate (``rate_window_s``, at least four samples).
    rate_window_steps: int
    #: Grid steps a condition must hold to be reported (``persistence_s``).
    persistence_steps: int
    gpus: GpuSignals
    ranks: RankSignals
    jobs: list[str]
    #: What the chunks before this one learnt, in a streamed window (None: a window on its own).
    #: The detectors read it; what they learn of this window they return (``Detection.learnt``).
    carry: Carry | None = None

    @property
    def times(self) -> np.ndarray:
        return self.frames.times

    @property
    def step(self) -> float:
        return self.frames.step


def row_positions(keys: pd.DataFrame, lab: pd.DataFrame, columns: Sequence[str]) -> np.ndarray:
    """For every row of ``lab``, the position of the row of ``keys`` with the same ``columns``
    values (-1 where none); ``keys``' rows are unique in those columns."""
    if not len(lab):
        return np.zeros(0, dtype=np.int64)
    if not len(keys):
        return np.full(len(lab), -1, dtype=np.int64)
    n = len(keys)
    codes, _ = row_codes(
        [np.concatenate([keys[k].to_numpy(dtype=object), lab[k].to_numpy(dtype=object)]) for k in columns]
    )
    at = np.full(int(codes.max()) + 1, -1, dtype=np.int64)
    at[codes[:n]] = np.arange(n)
    return at[codes[n:]]


def place_columns(out: np.ndarray, positions: np.ndarray, vals: np.ndarray) -> np.ndarray:
    """``out[:, positions[j]] = vals[:, j]`` for every ``j`` with a position (positions are unique:
    they come from :func:`row_positions` of grouped, hence unique, rows)."""
    if positions.size == out.shape[1] and np.array_equal(positions, np.arange(positions.size)):
        out[...] = vals  # the same rows in the same order (most metrics): no scatter over columns
        return out
    hit = positions >= 0
    if hit.any():
        out[:, positions[hit]] = vals[:, hit]
    return out


def _align(frames: Frames, name: str, keys: pd.DataFrame, how: str = "max") -> np.ndarray:
    T = len(frames.times)
    out = np.full((T, len(keys)), np.nan)
    if not frames.has(name):
        return out
    lab, vals = frames.get(name).group(GPU_KEY, how)
    return place_columns(out, row_positions(keys, lab, GPU_KEY), vals)


def _viol_share(frames: Frames, name: str, keys: pd.DataFrame, w: int) -> np.ndarray:
    raw = _align(frames, name, keys)
    return rolling_sum(increase_steps(raw), w) / (w * frames.step * 1e9)


def gpu_signals(frames: Frames, w: int) -> GpuSignals:
    seen: dict[tuple[str, str], None] = {}
    for name in (c.GPU_UP, c.DCGM_FI_DEV_SM_CLOCK, c.DCGM_FI_DEV_GPU_UTIL, c.GPU_XID_ERRORS_TOTAL):
        if frames.has(name):
            m = frames.get(name)
            for n, g in zip(m.column(c.NODE_LABEL), m.column("gpu"), strict=True):
                seen[(str(n), str(g))] = None
    keys = pd.DataFrame(list(seen), columns=list(GPU_KEY)) if seen else pd.DataFrame(columns=list(GPU_KEY))
    index = {k: i for i, k in enumerate(seen)}
    return GpuSignals(
        keys=keys,
        clock=_align(frames, c.DCGM_FI_DEV_SM_CLOCK, keys),
        util=_align(frames, c.DCGM_FI_DEV_GPU_UTIL, keys),
        temp=_align(frames, c.DCGM_FI_DEV_GPU_TEMP, keys),
        power=_align(frames, c.DCGM_FI_DEV_POWER_USAGE, keys),
        reasons=_align(frames, c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS, keys),
        tensor=_align(frames, c.DCGM_FI_PROF_PIPE_TENSOR_ACTIVE, keys),
        pcie_width=_align(frames, c.DCGM_FI_DEV_PCIE_LINK_WIDTH, keys),
        thermal_viol=_viol_share(frames, c.DCGM_FI_DEV_THERMAL_VIOLATION, keys, w),
        power_viol=_viol_share(frames, c.DCGM_FI_DEV_POWER_VIOLATION, keys, w),
        index=index,
    )


log = logging.getLogger(__name__)


def _valid_ranks(keys: pd.DataFrame, steps: np.ndarray) -> tuple[pd.DataFrame, np.ndarray]:
    """The rank series whose ``rank`` label is an index (ASCII digits, :func:`parse_index`); any
    other is left out with one warning, so one bad label skips one series, never the cycle."""
    bound = label_rules.MAX_RANK
    ok = np.array([label_rules.parse_index(str(r), bound) is not None for r in keys["rank"]], dtype=bool)
    if ok.all():
        return keys, steps
    bad = keys["rank"][~ok].astype(str)
    log.warning(
        "skipped %d rank series whose rank label is not an ASCII integer below %d (first: %r)",
        int((~ok).sum()),
        bound,
        bad.iloc[0][:40],
    )
    return keys[ok].reset_index(drop=True), steps[:, ok]


def rank_signals(frames: Frames) -> RankSignals:
    steps_f = frames.get(c.TRAINING_STEPS)
    T = len(frames.times)
    if not len(steps_f):
        empty = np.zeros((T, 0))
        return RankSignals(
            pd.DataFrame(columns=list(RANK_KEY)),
            empty,
            empty,
            {},
            empty,
            empty,
            empty,
            np.zeros((T, 0), dtype=bool),
        )
    keys, steps_raw = steps_f.group(RANK_KEY)
    keys, steps_raw = _valid_ranks(keys, steps_raw)

    def aligned(name: str, **match: str) -> np.ndarray:
        out = np.full((T, len(keys)), np.nan)
        f = frames.get(name)
        if not len(f):
            return out
        if match:
            f = f.select(**match)
        lab, vals = f.group(
            RANK_KEY, "sum" if match.get("phase") and not isinstance(match["phase"], str) else "max"
        )
        return place_columns(out, row_positions(keys, lab, RANK_KEY), vals)

    rejected: dict[str, int] = {}

    def increase(name: str, raw: np.ndarray) -> np.ndarray:
        return physical_increase(raw, frames.times, PHYSICAL_PER_S[name], rejected, name)

    phases = {}
    for ph in c.TRAINING_PHASES:
        phases[ph] = increase(c.TRAINING_PHASE_SECONDS, aligned(c.TRAINING_PHASE_SECONDS, phase=ph))
    compute = phases["forward"] + phases["backward"]
    out = RankSignals(
        keys=keys,
        steps=increase(c.TRAINING_STEPS, steps_raw),
        compute=compute,
        phases=phases,
        step_seconds=increase(c.TRAINING_STEP_SECONDS, aligned(c.TRAINING_STEP_SECONDS)),
        flops=increase(c.TRAINING_MODEL_FLOPS, aligned(c.TRAINING_MODEL_FLOPS)),
        tokens=increase(c.TRAINING_TOKENS, aligned(c.TRAINING_TOKENS)),
        present=~np.isnan(steps_raw),
        rejected=rejected,
    )
    if rejected:
        log.warning(
            "left out %s increase(s) of training counters that no rank can make (negative, or beyond "
            "its wall time, or beyond any accelerator's peak): %s",
            f"{sum(rejected.values()):,}",
            ", ".join(f"{name} {n:,}" for name, n in sorted(rejected.items())),
        )
    return out


def build_features(frames: Frames, config: DetectorConfig, carry: Carry | None = None) -> Features:
    """The window's aligned signals, complete: ``carry`` is what the chunks before learnt (None: a
    window on its own)."""
    # At least four samples behind each rate: with 60 s scrapes, two samples whose scrape times
    # drift across the grid's make a rate swing by a whole step's worth.
    w = max(4, round(config.rate_window_s / frames.step))
    p = max(1, round(config.persistence_s / frames.step))
    ranks = rank_signals(frames)
    jobs = sorted({str(j) for j in ranks.keys["job_id"]}) if len(ranks.keys) else []
    return Features(frames, config, w, p, gpu_signals(frames, w), ranks, jobs, carry)


def robust_z(x: np.ndarray, axis: int = 1, mad_floor: float = 0.005) -> tuple[np.ndarray, np.ndarray]:
    """(ratio to the median, modified z-score) of every value against its row's peers."""
    with np.errstate(all="ignore"):
        med = nanmedian(x, axis=axis, keepdims=True)
        mad = nanmedian(np.abs(x - med), axis=axis, keepdims=True)
        mad = np.maximum(mad, mad_floor * np.abs(med))
        return x / med, 0.6745 * (x - med) / mad


def fmt_time(ts: float | np.floating) -> str:
    from fleetscope.times import rfc3339

    return rfc3339(float(ts)) or ""
