"""Link and memory errors: a GPU whose PCIe replays or corrected ECC errors count fast, alone.

A PCIe replay is a packet the link layer had to send again (a bad TLP or DLLP, a lane error);
each one delays the GPU's copies, so a marginal link makes its GPU slow on the steps whose
transfers meet the errors, and only on those. NVIDIA's DCGM health watch (``DCGM_HEALTH_WATCH_PCIE``)
warns when a GPU's replay counter grows by more than 8 in a minute, "the maximum recommended by
RM" (``DCGM_LIMIT_MAX_PCIREPLAY_RATE``, ``dcgm_gpu_hardware_limits.h``). A corrected (single-bit)
ECC error is fixed on the way, at the cost of a retry; DCGM's limit for their rate is 10 a minute
(``DCGM_LIMIT_MAX_SBE_RATE``, marked provisional there). A healthy link logs a few replays in a
day, a healthy HBM stack a corrected error now and then.

Either rate is evidence against one GPU only while it stands alone: a rate that half the GPUs with
data share at once is the platform's (a BIOS setting, a riser, a firmware update), not this GPU's;
and a GPU whose link already trained narrower than its node's widest is the failing-node
detector's (``pcie_width_drop``), which names it, and whose replays that explains.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np

from fleetscope import contract as c
from fleetscope.analyzers.features import GPU_KEY, Features, place_columns, row_positions
from fleetscope.window.frames import rate

#: The counters read, and the cause each names when it is the evidence.
ERROR_COUNTERS: dict[str, str] = {
    c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER: "pcie",
    c.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL: "ecc_correctable",
}


@dataclass(frozen=True)
class GpuErrors:
    """Per grid time and GPU column (``Features.gpus``): each counter's rate per minute over the
    rate window, and where it is evidence against that GPU alone."""

    per_min: dict[str, np.ndarray]
    evidence: dict[str, np.ndarray]

    def any(self) -> np.ndarray | None:
        """Per grid time and GPU: any counter is evidence (None without GPU columns)."""
        flags = list(self.evidence.values())
        if not flags:
            return None
        out = flags[0].copy()
        for f in flags[1:]:
            out |= f
        return out

    def cause(self, gcol: int, a: int, b: int, share: float) -> tuple[str, dict[str, str]] | None:
        """The cause the GPU at ``gcol``'s errors name over grid times a..b, when they were evidence
        at least ``share`` of that time (the larger share wins), and the numbers."""
        best: tuple[float, str, str] | None = None
        for name, flag in self.evidence.items():
            held = float(flag[a : b + 1, gcol].mean()) if b >= a else 0.0
            if held >= share and (best is None or held > best[0]):
                best = (held, name, ERROR_COUNTERS[name])
        if best is None:
            return None
        _, name, cause = best
        x = self.per_min[name]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            own = float(np.nanmean(x[a : b + 1, gcol]))
            peers = float(np.nanmedian(x[a : b + 1]))
        return cause, {name: f"{own:.0f}/min while slow (median GPU {peers:.1f}/min)"}


def gpu_errors(feat: Features) -> GpuErrors:
    """Each error counter's rate per minute and its evidence, per grid time and GPU column."""
    cfg = feat.config
    gs = feat.gpus
    T, G = len(feat.times), len(gs.keys)
    limits: dict[str, float] = {
        c.DCGM_FI_DEV_PCIE_REPLAY_COUNTER: cfg.pcie_replays_per_min,
        c.DCGM_FI_DEV_ECC_SBE_VOL_TOTAL: cfg.ecc_corrected_per_min,
    }
    per_min: dict[str, np.ndarray] = {}
    evidence: dict[str, np.ndarray] = {}
    if not G:
        return GpuErrors(per_min, evidence)
    narrowed = _narrowed(feat)
    for name in ERROR_COUNTERS:
        raw = np.full((T, G), np.nan)
        if feat.frames.has(name):
            lab, vals = feat.frames.get(name).group(GPU_KEY, "max")
            place_columns(raw, row_positions(gs.keys, lab, GPU_KEY), vals)
        x = rate(raw, feat.step, feat.rate_window_steps) * 60
        over = np.nan_to_num(x) >= limits[name]
        seen = np.isfinite(x).sum(axis=1, keepdims=True)
        common = over.sum(axis=1, keepdims=True) >= np.maximum(seen, 1) / 2
        per_min[name] = x
        evidence[name] = over & ~common & ~narrowed
    return GpuErrors(per_min, evidence)


def _narrowed(feat: Features) -> np.ndarray:
    """Per grid time and GPU: its PCIe link is narrower than the widest of its node's GPUs."""
    gs = feat.gpus
    w = gs.pcie_width
    out = np.zeros(w.shape, dtype=bool)
    if not w.size:
        return out
    nodes = gs.keys[c.NODE_LABEL].to_numpy()
    for node in np.unique(nodes):
        cols = nodes == node
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            widest = np.nanmax(w[:, cols], initial=0)
        out[:, cols] = np.nan_to_num(w[:, cols], nan=widest) < widest
    return out
