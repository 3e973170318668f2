"""``--format html``: one self-contained page (plots inlined as base64 PNG, no external assets).

Plots: per-rank slowness (1 + the largest slowness view against the peer group) as a heatmap over time, the
job's MFU with its change points and drops, and a node health timeline built from the findings.
"""

from __future__ import annotations

import base64
import html
import io
import warnings
from collections.abc import Collection

import numpy as np

from fleetscope.analyzers.features import Features
from fleetscope.analyzers.report import JobSummary, Report, job_state_text, job_states_text
from fleetscope.analyzers.signals.window_signals import Signals
from fleetscope.contract import NODE_LABEL
from fleetscope.times import human_duration, parse_rfc3339, rfc3339

_CSS = """body{font-family:system-ui,sans-serif;margin:2em;color:#222}table{border-collapse:collapse}
td,th{border:1px solid #ccc;padding:4px 8px;font-size:13px;text-align:left;vertical-align:top}
th{background:#f3f3f3}.critical{color:#b00020;font-weight:600}.warning{color:#b36b00}img{max-width:100%}
.failing{background:#f8d7da}.degraded{background:#fff3cd}.nowrap{white-space:nowrap}
.num{text-align:right;font-variant-numeric:tabular-nums;white-space:nowrap}"""


def tokens_per_second(x: float | None) -> str:
    """``471,859 tokens/s``."""
    return "" if x is None or not np.isfinite(x) else f"{x:,.0f} tokens/s"


def rank_labels(
    feat: Features, order: np.ndarray, most: int = 48, flagged: Collection[int] = ()
) -> tuple[list[int], list[str]]:
    """Tick positions and ``node/rank N`` labels of the heatmap's rows: every ``flagged`` row (row
    positions: ranks a finding names), and evenly spaced others up to ``most`` labels in all, none
    closer to a flagged row than the spacing (its label would sit beside the flagged one)."""
    keys = feat.ranks.keys
    nodes, ranks = keys[NODE_LABEL].to_numpy(), keys["rank"].to_numpy()
    labels = [f"{nodes[k]}/rank {int(float(ranks[k]))}" for k in order]
    marked = sorted(set(flagged))
    every = max(1, -(-len(labels) // max(1, most - len(marked))))
    others = [t for t in range(0, len(labels), every) if all(abs(t - f) >= every for f in marked)]
    ticks = sorted({*others, *marked})
    return ticks, [labels[i] for i in ticks]


def flagged_rows(analysis: Report, feat: Features, order: np.ndarray) -> list[int]:
    """Heatmap row positions of the ranks a finding names (by job and rank)."""
    named = {(str(f.job_id), int(f.rank)) for f in analysis.findings if f.rank is not None and f.job_id}
    keys = feat.ranks.keys
    jobs, ranks = keys["job_id"].to_numpy().astype(str), keys["rank"].to_numpy()
    return [row for row, k in enumerate(order) if (jobs[k], int(float(ranks[k]))) in named]


def pause_spans(paused: np.ndarray) -> list[tuple[int, int]]:
    """(first, last) grid indices of each run of paused grid steps."""
    out: list[tuple[int, int]] = []
    start: int | None = None
    for i, p in enumerate(np.asarray(paused, dtype=bool)):
        if p and start is None:
            start = i
        elif not p and start is not None:
            out.append((start, i - 1))
            start = None
    if start is not None:
        out.append((start, len(paused) - 1))
    return out


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    import matplotlib.pyplot as plt

    plt.close(fig)
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode()


def _minutes(feat: Features) -> np.ndarray:
    return (feat.times - feat.times[0]) / 60.0


def _heatmap(signals: Signals, analysis: Report) -> str | None:
    import matplotlib.pyplot as plt

    feat = signals.features
    _, ratio, _ = signals.rank_scores
    if not ratio.size:
        return None
    order = np.argsort([int(float(r)) for r in feat.ranks.keys["rank"]], kind="stable")
    # Tall enough for one readable node/rank label per row (at most 48 labels: rank_labels).
    fig, ax = plt.subplots(figsize=(11, min(1.5 + 0.15 * min(ratio.shape[1], 48), 9)))
    m = _minutes(feat)
    im = ax.imshow(
        ratio[:, order].T,
        aspect="auto",
        cmap="RdYlGn_r",
        vmin=0.9,
        vmax=1.3,
        extent=(m[0], m[-1], ratio.shape[1], 0),
        interpolation="nearest",
    )
    flagged = flagged_rows(analysis, feat, order)
    ticks, labels = rank_labels(feat, order, flagged=flagged)
    ax.set_yticks([t + 0.5 for t in ticks], labels, fontsize=7)
    for t, tick in zip(ticks, ax.get_yticklabels(), strict=True):
        if t in flagged:  # a rank a finding names: bold red, never left unlabelled
            tick.set_color("#b00020")
            tick.set_fontweight("bold")
    ax.set_xlabel("minutes since window start")
    ax.set_ylabel("node/rank")
    ax.set_title("slowness against the peer group (1 = like its peers)")
    fig.colorbar(im, ax=ax, label="slowness (x peers)")
    return _png(fig)


def _mfu(signals: Signals, analysis: Report) -> str | None:
    import matplotlib.pyplot as plt

    feat = signals.features
    if not feat.jobs:
        return None
    fig, ax = plt.subplots(figsize=(11, 3.2))
    m = _minutes(feat)
    t0 = feat.times[0]
    unit = "MFU"
    shaded = False
    for job in feat.jobs:
        series, unit, paused = signals.job_mfu(job)
        scale = 100.0 if unit == "MFU" else 1.0
        ax.plot(m, series * scale, label=f"job {job}")
        # Grey bands: the grid steps the job was not training (checkpoint saves, evaluation, stalls).
        for a, b in pause_spans(paused):
            ax.axvspan(
                m[a],
                m[min(b + 1, len(m) - 1)],
                color="grey",
                alpha=0.25,
                lw=0,
                label=None if shaded else "not training (checkpoints, evaluation, stalls)",
            )
            shaded = True
    for f in analysis.findings:
        if f.kind != "mfu_drop":
            continue
        end = f.end if f.end is not None else feat.times[-1]
        ax.axvspan((f.start - t0) / 60, (end - t0) / 60, color="red", alpha=0.12)
        for cp in (f.evidence.get("change_points") or "").split(", "):
            ts = parse_rfc3339(cp) if cp else None
            if ts:
                ax.axvline((ts - t0) / 60, color="red", ls="--", lw=0.8)
    ax.set_xlabel("minutes since window start")
    ax.set_ylabel("MFU (%)" if unit == "MFU" else unit)
    ax.set_title(f"job {unit} (grey bands: not training, e.g. checkpoints; red: drops and change points)")
    ax.legend(loc="lower left")
    return _png(fig)


def _health(feat: Features, analysis: Report) -> str | None:
    import matplotlib.pyplot as plt

    nodes = sorted(analysis.nodes)
    if not nodes:
        return None
    fig, ax = plt.subplots(figsize=(11, min(1 + 0.25 * len(nodes), 9)))
    t0, t1 = feat.times[0], feat.times[-1]
    for i, node in enumerate(nodes):
        ax.barh(i, (t1 - t0) / 60, left=0, color="#cfe8cf", height=0.8)
        for f in analysis.findings:
            if f.node != node:
                continue
            color = "#d9534f" if f.kind == "failing_node" and f.severity == "critical" else "#f0ad4e"
            end = f.end if f.end is not None else t1
            ax.barh(i, (end - f.start) / 60, left=(f.start - t0) / 60, color=color, height=0.8)
    ax.set_yticks(range(len(nodes)), nodes, fontsize=7)
    ax.invert_yaxis()
    ax.set_xlabel("minutes since window start")
    ax.set_title("node health (green healthy, orange degraded, red failing)")
    return _png(fig)


def _goodput_html(analysis: Report) -> str:
    """One table per job: where its GPU-hours went, the badput lines, the checkpoint advice."""
    e = html.escape
    out = []
    for a in analysis.goodput.values():
        whole = a.whole_gpu_seconds or 1.0
        rows = "".join(
            f"<tr><td>{e(k)}</td><td class='num'>{v / 3600:.2f}</td><td class='num'>{v / whole:.1%}</td></tr>"
            for k, v in a.gpu_seconds.items()
        )
        lines = "".join(f"<li>{e(i.text)}</li>" for i in a.items)
        adv = a.advice
        advice = (
            ""
            if adv is None
            else (
                f"<p>Checkpoint every {human_duration(adv.recommended_s)} (now "
                f"{'unknown' if adv.current_s is None else human_duration(adv.current_s)}; a save takes "
                f"{human_duration(adv.save_s)}, MTBF "
                f"{human_duration(adv.mtbf_s)}{' (prior)' if adv.prior else ''}; "
                f"Young {human_duration(adv.young_s)}, Daly {human_duration(adv.daly_s)})</p>"
            )
        )
        out.append(
            f"<h2>Goodput of job {e(a.job_id)}</h2><p>{a.whole_gpu_seconds / 3600:.2f} GPU-hours, effective "
            f"training time {a.effective_training_ratio:.1%}, productive {a.goodput_ratio:.1%}, "
            f"{a.restarts} restart(s)</p><table><tr><th>category</th><th>GPU-hours</th><th>share</th></tr>"
            f"{rows}</table><ul>{lines}</ul>{advice}"
        )
    return "".join(out)


def _clock(ts: float | None) -> str:
    """``2026-11-30 10:07:15``: the date and time of an RFC 3339 stamp, without its T and Z."""
    text = rfc3339(ts) or ""
    return text.replace("T", " ").rstrip("Z")


def _rank_name(analysis: Report, job: str, rank: int) -> str:
    """``node-3/rank 21`` for a rank of ``job`` (the node from its straggler score)."""
    node = next((s.node for s in analysis.straggler_scores if s.job_id == job and s.rank == rank), None)
    return f"{node}/rank {rank}" if node else f"rank {rank}"


def _while(j: JobSummary, level: str) -> str:
    """A job's last level, said as the last one while it is stalled or down (as the live page)."""
    return f"n/a while {j.state} (last {level})" if level and j.state in ("stalled", "down") else level


def render_html(analysis: Report) -> str:
    """The report as one HTML page; the plots need the report's features (see :func:`core.analyze`)."""
    import matplotlib

    matplotlib.use("Agg")
    # text.parse_math off: a node name or job id with "$" is text, never mathtext (it crashed the report).
    with warnings.catch_warnings(), matplotlib.rc_context({"text.parse_math": False}):
        warnings.simplefilter("ignore")
        signals = analysis.signals
        plots = (
            []
            if signals is None
            else [
                ("Per-rank compute time", _heatmap(signals, analysis)),
                ("MFU timeline", _mfu(signals, analysis)),
                ("Node health", _health(signals.features, analysis)),
            ]
        )
    e = html.escape
    rows = []
    for f in analysis.findings:
        ev = "<br>".join(f"{e(k)}: {e(v)}" for k, v in f.evidence.items())
        rows.append(
            f"<tr><td class='nowrap'>{e(f.kind)}</td><td class='{e(f.severity)}'>{e(f.severity)}</td>"
            f"<td class='nowrap'>{e(f.node or '')}</td><td>{e(str(f.gpu or ''))}</td>"
            f"<td>{'' if f.rank is None else f.rank}</td><td class='nowrap'>{e(_clock(f.start))}</td>"
            f"<td class='nowrap'>{e(_clock(f.end) or 'open')}</td>"
            f"<td class='num'>{'' if f.score is None else f'{f.score:.2f}'}</td>"
            f"<td>{e(f.cause)}</td><td>{ev}</td><td>{e(f.action)}</td></tr>"
        )
    nodes = "".join(
        f"<tr class='{e(v.state)}'><td>{e(v.node)}</td><td>{e(v.state)}</td>"
        f"<td>{e('; '.join(v.reasons))}</td></tr>"
        for v in analysis.nodes.values()
        if v.state != "healthy"
    )
    jobs = "".join(
        f"<tr class='{'degraded' if j.state in ('stalled', 'down') else ''}'><td>{e(j.job_id)}</td>"
        f"<td>{e(job_state_text(j, _clock, analysis.end))}"
        f"<br><small>{e(job_states_text(j, _clock, analysis.end))}</small></td>"
        f"<td class='num'>{j.ranks}</td><td class='num'>{len(j.nodes)}</td>"
        f"<td class='num'>{_while(j, '' if j.mfu is None else f'{j.mfu:.1%}')}</td>"
        f"<td class='num'>{_while(j, tokens_per_second(j.tokens_per_second))}</td>"
        f"<td class='num'>{human_duration(j.step_seconds)}</td>"
        f"<td>{e(', '.join(_rank_name(analysis, j.job_id, r) for r in j.stragglers) or 'none')}</td></tr>"
        for j in analysis.jobs.values()
    )
    goodput = _goodput_html(analysis)
    figs = "".join(f"<h2>{e(t)}</h2><img alt='{e(t)}' src='{src}'>" for t, src in plots if src)
    return f"""<!doctype html><html><head><meta charset="utf-8"><title>fleetscope analysis</title>
<style>{_CSS}</style></head><body>
<h1>fleetscope analysis</h1>
<p>window {e(rfc3339(analysis.start) or "")} .. {e(rfc3339(analysis.end) or "")}, \
{len(analysis.findings)} finding(s),
{len(analysis.nodes)} nodes</p>
<h2>Findings</h2><table><tr><th>kind</th><th>severity</th><th>node</th><th>gpu</th><th>rank</th>\
<th>start (UTC)</th>
<th>end (UTC)</th><th>score</th><th>cause</th><th>evidence</th><th>action</th></tr>{"".join(rows)}</table>
<h2>Nodes not healthy</h2><table><tr><th>node</th><th>state</th><th>reasons</th></tr>{nodes}</table>
<h2>Jobs</h2><table><tr><th>job</th><th>state (UTC)</th><th>ranks</th><th>nodes</th><th>MFU</th>\
<th>throughput</th><th>step time</th>
<th>stragglers (node/rank)</th></tr>{jobs}</table>
{goodput}
{figs}
</body></html>
"""
