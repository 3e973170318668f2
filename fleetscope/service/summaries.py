"""What the live page shows beside the findings: each training job's state and each served model's
replicas and SLOs, computed in the analysis process, where the window's features still exist.

:class:`~fleetscope.service.live.LiveAnalysis` reads them off each cycle's signals into its
:class:`~fleetscope.service.live.LiveResult`, as plain dicts (the features are not sent back to the
server process):

* ``jobs``: job id -> ``state`` (``running``, ``stalled``, ``down``), ``since`` (when it stopped
  stepping or reporting): the window's last grid time of
  :meth:`~fleetscope.analyzers.signals.window_signals.Signals.job_states`, the account the
  ``analyze`` reports show too (docs/design.md#job-state), ``last_step``, ``mfu`` now (None while
  not measurable) with ``mfu_reason`` saying why, ``last_mfu`` (the last level measured, with its
  time), and ``hang``: an open collective hang's reason and culprit (docs/hang.md#live).
* ``models``: one entry per served model: its replicas (serving or not, with the node by name, how
  long it has had work in flight without progress, TTFT p95, ITL mean and p95, requests/s, KV cache
  usage), and the TTFT, ITL and error SLOs' burn rates over the last 5 minutes and the window, as the
  generated SLO alerts read them (fleetscope/alerts/config.py): a replica answering 5xx spends the
  error budget.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from fleetscope import contract as c
from fleetscope.alerts.config import THRESHOLDS
from fleetscope.analyzers.features import ITL_NAMES
from fleetscope.analyzers.findings import Finding
from fleetscope.analyzers.report import Report
from fleetscope.analyzers.signals.serving import ServingSignals
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.times import rfc3339
from fleetscope.window.frames import increase_steps

#: Burn rates of the SLO alerts: paging fast (2% of a 30-day budget in an hour), and slow.
FAST_BURN = THRESHOLDS.slo_page_fast_burn
SLOW_BURN = THRESHOLDS.slo_page_slow_burn
SHORT_WINDOW_S = 300.0


def _num(x: float | np.floating | None, digits: int = 4) -> float | None:
    return None if x is None or not math.isfinite(float(x)) else round(float(x), digits)


def _last_finite(col: np.ndarray) -> tuple[float | None, int | None]:
    idx = np.nonzero(np.isfinite(col))[0]
    return (float(col[idx[-1]]), int(idx[-1])) if idx.size else (None, None)


def job_states(signals: Signals, report: Report) -> dict[str, dict[str, Any]]:
    """Every job's state at the window's end, and why its MFU is unknown when it is."""
    feat = signals.features
    times, cfg = feat.times, feat.config
    end = float(times[-1]) if len(times) else report.end
    out: dict[str, dict[str, Any]] = {}
    for job in feat.jobs:
        steps = np.nonzero(signals.stepping(job))[0]
        last_step = float(times[steps[-1]]) if steps.size else None
        hang = next(
            (
                f
                for f in report.findings
                if f.job_id == job
                and f.end is None
                and (f.kind == "job_hang" or (f.kind == "failing_node" and "reason" in f.evidence))
            ),
            None,
        )
        states = signals.job_states(job)
        state = states.state()
        state = "down" if state == "unknown" else state  # a job of the window that no longer reports
        began = states.began()
        since = float(times[began]) if began is not None else None
        series, unit, paused = signals.job_mfu(job)
        last, at = _last_finite(series)
        now = series[-1] if len(series) else np.nan
        if not math.isfinite(now) and len(series) > 1:
            now = series[-2]  # the last grid row may be one without samples yet
        mfu = _num(now) if unit == "MFU" and state == "running" else None
        reason = None
        if unit != "MFU":
            reason = "no FLOPs-per-step telemetry or GPU peak: throughput in tokens/s instead"
        elif state == "down":
            reason = "the job's ranks stopped reporting"
        elif state == "stalled":
            reason = "no step completes while the job is stalled"
        elif mfu is None:
            first = float(times[steps[0]]) if steps.size else None
            need = cfg.rate_window_s
            if first is not None and end - first < 2 * need:
                reason = f"measured over {need / 60:g} min of steps once the job has run that long"
            elif len(paused) and bool(paused[-1]):
                reason = "paused (checkpoint, evaluation or restart)"
            else:
                reason = "not enough steps in the last rate window"
        out[job] = {
            "state": state,
            "since": rfc3339(since),
            "last_step": rfc3339(last_step),
            "mfu": mfu,
            "mfu_reason": reason,
            "last_mfu": _num(last) if unit == "MFU" else None,
            "last_mfu_at": rfc3339(float(times[at])) if at is not None and unit == "MFU" else None,
            "hang": _hang(hang),
        }
    return out


def _hang(f: Finding | None) -> dict[str, Any] | None:
    """The open hang of a job as its row shows it: the reason class and whom the collective waits
    for (NCCL RAS, docs/hang.md#live); None without a hang."""
    if f is None:
        return None
    return {
        "reason": f.evidence.get("reason", "unknown"),
        "waiting_for": f.evidence.get("waiting_for"),
        "node": f.node or f.evidence.get("culprit_node"),
        "gpu": f.gpu,
        "rank": f.rank,
        "since": rfc3339(f.start),
        "drain": f.kind == "failing_node",
    }


def served_models(signals: Signals) -> list[dict[str, Any]]:
    """One entry per served model (none without vLLM series in the window)."""
    feat = signals.features
    s = signals.serving
    if not s.replicas:
        return []
    n = len(feat.times)
    short = max(1, min(n, round(SHORT_WINDOW_S / feat.step)))
    itl = next((h for h in ITL_NAMES if feat.frames.has(h.bucket)), None)
    ttft = c.VLLM_TIME_TO_FIRST_TOKEN if feat.frames.has(c.VLLM_TIME_TO_FIRST_TOKEN.bucket) else None
    slos: list[tuple[str, c.Histogram | None, float | None, float]] = [
        ("ttft", ttft, THRESHOLDS.inference_ttft_seconds, THRESHOLDS.inference_ttft_objective),
        ("itl", itl, THRESHOLDS.inference_itl_seconds, THRESHOLDS.inference_itl_objective),
        ("errors", None, None, THRESHOLDS.inference_error_objective),
    ]
    buckets = {
        name: _good_and_total(signals, h, bound) if bound is not None else _answered(s)
        for name, h, bound, _ in slos
    }
    out = []
    for model, mask in s.models().items():
        cols = np.nonzero(mask)[0]
        replicas = [_replica(s, int(k), n, feat.step) for k in cols]
        slo = {}
        for name, _, bound, objective in slos:
            slo[name] = _burn(buckets[name], cols, short, bound, objective)
        serving = [x for x in replicas if x["serving"]]
        out.append(
            {
                "model": model,
                "replicas": replicas,
                "serving": len(serving),
                "ttft_p95_s": max(
                    (x["ttft_p95_s"] for x in serving if x["ttft_p95_s"] is not None), default=None
                ),
                "itl_mean_s": _num(
                    np.median([x["itl_mean_s"] for x in serving if x["itl_mean_s"] is not None])
                )
                if any(x["itl_mean_s"] is not None for x in serving)
                else None,
                "slo": slo,
            }
        )
    return sorted(out, key=lambda m: m["model"])


def _answered(s: ServingSignals) -> tuple[np.ndarray, np.ndarray] | None:
    """Per grid step and replica: requests answered without and with an HTTP 5xx (the error SLO's
    good and total, as the generated rules count them); None where no server exposes them."""
    if not np.isfinite(s.http_all).any():
        return None
    return s.http_all - np.nan_to_num(s.http_5xx), s.http_all


def _replica(s: ServingSignals, k: int, n: int, step: float) -> dict[str, Any]:
    rep = s.replicas[k]
    seen = np.nonzero(s.present[:, k])[0]

    def last(x: np.ndarray) -> float | None:
        return _num(_last_finite(x[:, k])[0])

    stalled = int(s.stalled[-1, k]) if s.stalled.size else 0
    return {
        "replica": rep.name,
        "node": s.nodes[k] if s.nodes else rep.host,
        "stalled_s": stalled * step if stalled else None,
        "serving": bool(seen.size and seen[-1] >= n - 2),
        "ttft_p95_s": last(s.ttft_p95),
        "itl_mean_s": last(s.itl_mean),
        "itl_p95_s": last(s.itl_p95),
        "requests_per_s": _num(_last_finite(s.request_rate[:, k])[0], 3),
        "kv_cache": last(s.kv),
    }


def _good_and_total(
    signals: Signals, hist: c.Histogram | None, bound: float
) -> tuple[np.ndarray, np.ndarray] | None:
    """Per grid step and replica: observations under ``bound`` and all of them (increments)."""
    if hist is None:
        return None
    cum, bounds = signals.replica_buckets(hist)
    if bound not in bounds or math.inf not in bounds:
        return None
    good = increase_steps(cum[:, :, bounds.index(bound)])
    total = increase_steps(cum[:, :, bounds.index(math.inf)])
    return good, total


def _burn(
    counts: tuple[np.ndarray, np.ndarray] | None,
    cols: np.ndarray,
    short: int,
    bound: float | None,
    objective: float,
) -> dict[str, Any]:
    """Burn rates (bad share / error budget) over the last ``short`` steps and the whole window."""
    head = {"threshold_s": bound, "objective": objective}
    if counts is None:
        return {**head, "state": "unknown", "burn_short": None, "burn_window": None}
    good, total = counts

    def rate(rows: slice) -> float | None:
        t = float(np.nansum(total[rows][:, cols]))
        if t <= 0:
            return None
        bad = max(0.0, t - float(np.nansum(good[rows][:, cols])))
        return bad / t / (1.0 - objective)

    fast, whole = rate(slice(-short, None)), rate(slice(None))
    if fast is None and whole is None:
        state = "no traffic"
    elif (fast or 0) >= FAST_BURN and (whole or 0) >= FAST_BURN:
        state = "fast burn"
    elif (fast or 0) >= SLOW_BURN and (whole or 0) >= SLOW_BURN:
        state = "burning"
    else:
        state = "ok"
    return {**head, "state": state, "burn_short": _num(fast, 2), "burn_window": _num(whole, 2)}
