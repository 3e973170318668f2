"""``fleetscope hang`` output: text (one line per hang and its evidence), JSON (the contract,
docs/hang.md#json), or one self-contained HTML page."""

from __future__ import annotations

import html
import json

from fleetscope import strictjson
from fleetscope.hang.model import HangResult


def render_json(result: HangResult) -> str:
    return strictjson.dumps(result.to_dict(), indent=2) + "\n"


def render_text(result: HangResult) -> str:
    lines: list[str] = []
    hangs = [h for h in result.hangs if h.confirmed]
    suspects = [h for h in result.hangs if not h.confirmed]
    lines.append(f"{len(hangs)} hang(s), {len(suspects)} suspect(s)")
    for i, h in enumerate(result.hangs, 1):
        lines.append(f"{i}. {h.summary()}  [{h.source}]")
        lines.extend(f"   - {e}" for e in h.evidence)
    if not result.hangs:
        lines.append("no rank is named: the inputs show no hang")
    if result.notes:
        lines.append("notes:")
        lines.extend(f"  {n}" for n in result.notes)
    return "\n".join(lines) + "\n"


def render_section_html(result: HangResult) -> str:
    """The hangs as an HTML section (the page of ``fleetscope hang``, and one part of analyze's)."""
    e = html.escape
    rows = []
    for h in result.hangs:
        who = "<br>".join(e(r.where()) for r in h.waiting_for) or "<i>no rank named</i>"
        ev = "<br>".join(e(x) for x in h.evidence)
        rows.append(
            f"<tr><td>{'hang' if h.confirmed else 'suspect'}</td><td>{e(h.group)}</td><td>{e(h.op)}</td>"
            f"<td>{'' if h.seq is None else h.seq}</td><td>{who}</td><td>{e(h.reason)}</td>"
            f"<td>{e(h.confidence)}</td><td>{ev}</td></tr>"
        )
    notes = "".join(f"<li>{e(n)}</li>" for n in result.notes)
    table = (
        "<table><tr><th>state</th><th>group</th><th>op</th><th>seq</th><th>waiting for</th>"
        "<th>reason</th><th>confidence</th><th>evidence</th></tr>" + "".join(rows) + "</table>"
        if rows
        else "<p>No hang: the inputs name no rank.</p>"
    )
    return (
        f"<section id='hangs'><h2>Hangs</h2>{table}" + (f"<ul>{notes}</ul>" if notes else "") + "</section>"
    )


def render_html(result: HangResult) -> str:
    style = (
        "body{font-family:sans-serif;margin:2em}table{border-collapse:collapse}"
        "td,th{border:1px solid #ccc;padding:4px 8px;vertical-align:top;text-align:left}"
    )
    head = f"<head><meta charset='utf-8'><title>fleetscope hang</title><style>{style}</style></head>"
    body = f"<body><h1>fleetscope hang</h1>{render_section_html(result)}</body>"
    return f"<!DOCTYPE html><html>{head}{body}</html>\n"


def render(result: HangResult, fmt: str) -> str:
    if fmt == "json":
        return render_json(result)
    if fmt == "html":
        return render_html(result)
    return render_text(result)


def with_hangs(text: str, fmt: str, result: HangResult) -> str:
    """An ``analyze`` report (text, JSON or HTML) with the hang result added: the JSON gets a
    ``hangs`` key (the contract of docs/hang.md#json), text and HTML a section at the end."""
    if fmt == "json":
        doc = json.loads(text)
        doc["hangs"] = result.to_dict()
        return strictjson.dumps(doc, indent=2) + "\n"
    if fmt == "html":
        at = text.rfind("</body>")
        section = render_section_html(result)
        return text[:at] + section + text[at:] if at >= 0 else text + section
    return text.rstrip("\n") + "\n\nhangs (Flight Recorder / NCCL RAS)\n" + render_text(result)
