"""Hardware evidence: what a GPU's own counters say about why it runs slower than it could.

Read by the straggler detector (ranks, GPUs and nodes of a training job) and the inference detector
(serving replicas) alike.
"""

from __future__ import annotations

import warnings

import numpy as np

from fleetscope import contract as c
from fleetscope import hardware
from fleetscope.analyzers.features import Features
from fleetscope.analyzers.nanstats import mean_or_nan
from fleetscope.analyzers.signals.gpu_errors import GpuErrors
from fleetscope.analyzers.signals.network import NetTrouble

THERMAL_BITS = hardware.CLOCK_EVENT_SW_THERMAL | hardware.CLOCK_EVENT_HW_THERMAL


def _bits_share(reasons: np.ndarray, a: int, b: int, bits: int) -> float:
    v = reasons[a : b + 1]
    v = v[~np.isnan(v)].astype(np.int64)
    return float(np.mean((v & bits) != 0)) if v.size else 0.0


def gpu_throttle_evidence(feat: Features) -> np.ndarray:
    """Per GPU column and time: the hardware says this GPU runs slower than it could.

    A HW/SW thermal, HW power-brake or HW-slowdown clock-event bit, a violation counter counting at
    least ``violation_share`` of the time. A SW power cap alone is normal under load and never
    counts. (The clock deficit against busy peers is checked where a GPU has no rank telemetry.)
    """
    cfg = feat.config
    gs = feat.gpus
    if not gs.clock.size:
        return np.zeros((len(feat.times), len(gs.keys)), dtype=bool)
    bits = np.nan_to_num(gs.reasons).astype(np.int64)
    return (
        (
            (bits & (THERMAL_BITS | hardware.CLOCK_EVENT_HW_POWER_BRAKE | hardware.CLOCK_EVENT_HW_SLOWDOWN))
            != 0
        )
        | (np.nan_to_num(gs.thermal_viol) >= cfg.violation_share)
        | (np.nan_to_num(gs.power_viol) >= cfg.violation_share)
    )


def _link_cause(
    feat: Features, gcol: int, node: str, a: int, b: int, errors: GpuErrors | None
) -> tuple[str, dict[str, str]] | None:
    """The GPU's link or memory as the cause over a..b: a PCIe link narrower than its node's widest
    (``pcie``), else replays or corrected ECC errors counting on it alone (``pcie``,
    ``ecc_correctable``; :mod:`~fleetscope.analyzers.signals.gpu_errors`)."""
    gs = feat.gpus
    w = gs.pcie_width[:, gcol]
    node_cols = gs.keys[c.NODE_LABEL].to_numpy() == node
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        if np.nanmin(w[a : b + 1], initial=np.inf) < np.nanmax(gs.pcie_width[:, node_cols], initial=0):
            return "pcie", {c.DCGM_FI_DEV_PCIE_LINK_WIDTH: f"x{np.nanmin(w[a : b + 1]):.0f}"}
    return errors.cause(gcol, a, b, feat.config.reason_share) if errors is not None else None


def slowdown_cause(
    feat: Features,
    gcol: int | None,
    node: str,
    a: int,
    b: int,
    net: NetTrouble,
    errors: GpuErrors | None = None,
) -> tuple[str, dict[str, str]]:
    """Why the GPU at column ``gcol`` of ``node`` ran slow over grid times a..b, and the numbers.

    Its own signals first: thermal bits or violation time -> ``thermal_throttle``; power brake or
    power violation -> ``power_brake``; HW slowdown -> ``hw_slowdown``; a narrowed PCIe link ->
    ``pcie``; PCIe replays or corrected ECC errors counting on it alone (``errors``) -> ``pcie`` or
    ``ecc_correctable``; then EFA trouble on its node (``net``) -> ``network``; else ``unknown``.
    """
    cfg = feat.config
    gs = feat.gpus
    ev: dict[str, str] = {}
    if gcol is not None and gs.clock.size:
        before = gs.clock[max(0, a - 3 * feat.rate_window_steps) : max(1, a - feat.rate_window_steps), gcol]
        during = gs.clock[a : b + 1, gcol]
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", RuntimeWarning)
            peer = np.nanmedian(gs.clock[a : b + 1])
        if np.isfinite(mean_or_nan(during)):
            ref = mean_or_nan(before) if np.isfinite(mean_or_nan(before)) else peer
            ev[c.DCGM_FI_DEV_SM_CLOCK] = f"{ref:.0f} -> {mean_or_nan(during):.0f} MHz (peers {peer:.0f} MHz)"
        r = gs.reasons[a : b + 1, gcol]
        r = r[~np.isnan(r)]
        if r.size:
            bits = int(np.bitwise_or.reduce(r.astype(np.int64)))
            ev[c.DCGM_FI_DEV_CLOCKS_EVENT_REASONS] = f"0x{bits:x}"
        if np.isfinite(mean_or_nan(gs.temp[a : b + 1, gcol])):
            ev[c.DCGM_FI_DEV_GPU_TEMP] = f"{mean_or_nan(gs.temp[a : b + 1, gcol]):.0f} C"
        tv = mean_or_nan(gs.thermal_viol[a : b + 1, gcol])
        pv = mean_or_nan(gs.power_viol[a : b + 1, gcol])
        if np.isfinite(tv) and tv > 0:
            ev[c.DCGM_FI_DEV_THERMAL_VIOLATION] = f"{tv:.0%} of the time"
        if np.isfinite(pv) and pv > 0:
            ev[c.DCGM_FI_DEV_POWER_VIOLATION] = f"{pv:.0%} of the time"
        if (
            _bits_share(gs.reasons[:, gcol], a, b, THERMAL_BITS) >= cfg.reason_share
            or tv >= cfg.violation_share
        ):
            return "thermal_throttle", ev
        if _bits_share(
            gs.reasons[:, gcol], a, b, hardware.CLOCK_EVENT_HW_POWER_BRAKE
        ) >= cfg.reason_share or (pv >= cfg.violation_share):
            return "power_brake", ev
        if _bits_share(gs.reasons[:, gcol], a, b, hardware.CLOCK_EVENT_HW_SLOWDOWN) >= cfg.reason_share:
            return "hw_slowdown", ev
        named = _link_cause(feat, gcol, node, a, b, errors)
        if named is not None:
            ev.update(named[1])
            return named[0], ev
    if node in net and net[node][0][a : b + 1].any():
        ev.update(net[node][1])
        return "network", ev
    return "unknown", ev
