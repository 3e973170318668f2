"""``--format text``: the findings as a readable table, then node states and jobs."""

from __future__ import annotations

from fleetscope.analyzers.report import GoodputAccount, Report, job_state_text, job_states_text
from fleetscope.times import human_duration, rfc3339


def _clock(ts: float) -> str:
    """``10:01:30``: the UTC time of day (the window's line gives the date)."""
    return (rfc3339(ts) or "")[11:19]


def _table(rows: list[list[str]], headers: list[str]) -> str:
    widths = [max(len(h), *(len(r[i]) for r in rows)) if rows else len(h) for i, h in enumerate(headers)]
    line = "  ".join(h.ljust(w) for h, w in zip(headers, widths, strict=True)).rstrip()
    out = [line, "  ".join("-" * w for w in widths)]
    out += ["  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)).rstrip() for r in rows]
    return "\n".join(out)


def render_text(analysis: Report) -> str:
    parts = [
        f"window {rfc3339(analysis.start)} .. {rfc3339(analysis.end)}: {len(analysis.findings)} finding(s)"
    ]
    if analysis.findings:
        rows = []
        for f in analysis.findings:
            where = f.node or (f"job {f.job_id}" if f.job_id else "")
            rows.append(
                [
                    f.kind,
                    f.severity,
                    where,
                    f.gpu or "",
                    "" if f.rank is None else str(f.rank),
                    (rfc3339(f.start) or "")[11:],
                    (rfc3339(f.end) or "open")[11:] if f.end else "open",
                    "" if f.score is None else f"{f.score:.2f}",
                    f.cause,
                ]
            )
        parts.append(
            _table(rows, ["KIND", "SEVERITY", "NODE", "GPU", "RANK", "START", "END", "SCORE", "CAUSE"])
        )
        parts.append("")
        for i, f in enumerate(analysis.findings, 1):
            ev = "; ".join(f"{k}: {v}" for k, v in f.evidence.items())
            parts.append(f"{i}. {f.kind} {f.cause} on {f.node or 'job ' + str(f.job_id)}: {ev}")
            parts.append(f"   action: {f.action}")
    bad = [v for v in analysis.nodes.values() if v.state != "healthy"]
    parts.append("")
    parts.append(
        f"nodes: {len(analysis.nodes)} seen, {sum(v.state == 'failing' for v in bad)} failing, "
        f"{sum(v.state == 'degraded' for v in bad)} degraded"
    )
    for v in bad:
        parts.append(f"  {v.node}: {v.state} ({'; '.join(v.reasons)})")
    for j in analysis.jobs.values():
        mfu = "n/a" if j.mfu is None else f"{j.mfu:.1%}"
        if j.mfu is not None and j.state in ("stalled", "down"):
            mfu = f"n/a while {j.state} (last {j.mfu:.1%})"
        tps = "n/a" if j.tokens_per_second is None else f"{j.tokens_per_second:,.0f}"
        if j.tokens_per_second is not None and j.state in ("stalled", "down"):
            tps = f"n/a while {j.state} (last {j.tokens_per_second:,.0f})"
        step = human_duration(j.step_seconds) or "n/a"
        parts.append(
            f"job {j.job_id}: {job_state_text(j, _clock, analysis.end)}, {j.ranks} ranks on "
            f"{len(j.nodes)} nodes, MFU {mfu}, tokens/s {tps}, step {step}, "
            f"stragglers {j.stragglers or 'none'}"
        )
        if len(j.states) > 1 or (j.states and j.states[0].state != "running"):
            parts.append(f"  states: {job_states_text(j, _clock, analysis.end)}")
    for a in analysis.goodput.values():
        parts += _goodput(a)
    return "\n".join(parts) + "\n"


def _goodput(a: GoodputAccount) -> list[str]:
    """The job's goodput account: the parts, the badput lines, the checkpoint advice."""
    whole = a.whole_gpu_seconds or 1.0
    out = [
        "",
        f"goodput of job {a.job_id}: {a.whole_gpu_seconds / 3600:.2f} GPU-hours "
        f"({a.gpus:.0f} GPUs), effective training time {a.effective_training_ratio:.1%}, "
        f"productive {a.goodput_ratio:.1%}, {a.restarts} restart(s)",
    ]
    out += [f"  {k:<11}{v / 3600:>9.2f} GPU-h {v / whole:>7.1%}" for k, v in a.gpu_seconds.items()]
    out += [f"  - {i.text}" for i in a.items]
    adv = a.advice
    if adv is not None:
        rate = (
            f"no failure in the window: the prior, 1 per {1 / (adv.failures_per_node_hour * 24):,.0f} "
            "node-days"
            if adv.prior
            else f"{adv.failures} in {adv.node_hours:.1f} node-hours"
        )
        now = "unknown" if adv.current_s is None else human_duration(adv.current_s)
        gain = (
            ""
            if adv.gain_gpu_hours_per_day is None
            else f", saves {adv.gain_gpu_hours_per_day:.1f} GPU-h/day"
        )
        out.append(
            f"  checkpoint every {human_duration(adv.recommended_s)} (now {now}; save "
            f"{human_duration(adv.save_s)}, MTBF {human_duration(adv.mtbf_s)} from failures {rate}; "
            f"Young {human_duration(adv.young_s)}, Daly {human_duration(adv.daly_s)}{gain})"
        )
    return out
