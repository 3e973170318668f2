"""``--format text``: the findings as a readable table, then node states and jobs."""

from __future__ import annotations

from fleetscope.analyzers.report import Report
from fleetscope.times import rfc3339


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
            rows.append([
                f.kind, f.severity, where, f.gpu or "", "" if f.rank is None else str(f.rank),
                (rfc3339(f.start) or "")[11:], (rfc3339(f.end) or "open")[11:] if f.end else "open",
                "" if f.score is None else f"{f.score:.2f}", f.cause,
            ])  # fmt: skip
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
    parts.append(f"nodes: {len(analysis.nodes)} seen, {sum(v.state == 'failing' for v in bad)} failing, "
                 f"{sum(v.state == 'degraded' for v in bad)} degraded")  # fmt: skip
    for v in bad:
        parts.append(f"  {v.node}: {v.state} ({'; '.join(v.reasons)})")
    for j in analysis.jobs.values():
        mfu = "n/a" if j.mfu is None else f"{j.mfu:.1%}"
        tps = "n/a" if j.tokens_per_second is None else f"{j.tokens_per_second:,.0f}"
        parts.append(f"job {j.job_id}: {j.ranks} ranks on {len(j.nodes)} nodes, MFU {mfu}, tokens/s {tps}, "
                     f"step {j.step_seconds or 'n/a'} s, stragglers {j.stragglers or 'none'}")  # fmt: skip
    return "\n".join(parts) + "\n"
