"""docs/runbooks.md as one HTML page, for the live service to serve itself at ``/runbooks``.

GPU clusters are often air-gapped: a ``runbook_url`` on a public address is dead where it is needed.
``fleetscope generate`` renders the runbooks with :func:`render_page` into the package
(fleetscope/service/static/runbooks.html, a generated file), the service serves that file, and
every alert's ``runbook_url`` and the page's finding links point at ``/runbooks#<anchor>``.

The renderer covers the Markdown docs/runbooks.md uses (headings, paragraphs, fenced code, pipe
tables, lists, inline code, bold, emphasis, links); headings get GitHub's anchors (lower case,
punctuation dropped, spaces to hyphens), so ``#fleetscopegpulost`` and ``#failing_node`` are the
same anchors on GitHub and here. Links to other docs (``hang.md``) are not served: they render as
their text and the file's path under docs/. Standard library only.
"""

from __future__ import annotations

import html
import re

_HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*#*\s*$")
_LIST_ITEM = re.compile(r"^(\s*)([-*]|\d+\.)\s+(.*)$")
_TABLE_SEP = re.compile(r"^\|?\s*:?-{3,}:?\s*(\|\s*:?-{3,}:?\s*)*\|?\s*$")
_CODE_SPAN = re.compile(r"(`+)(.+?)\1")
_LINK = re.compile(r"\[([^\]]+)\]\(([^)\s]+)\)")
_BOLD = re.compile(r"\*\*(.+?)\*\*")
_EM = re.compile(r"(?<![\w*])\*(?!\s)(.+?)(?<!\s)\*(?![\w*])")

_STYLE = """
body { font: 15px/1.5 system-ui, sans-serif; max-width: 60rem; margin: 2rem auto; padding: 0 1rem;
       color: #1d232b; }
code, pre { font: 13px/1.4 ui-monospace, monospace; background: #f2f4f7; }
code { padding: 0 .2em; border-radius: 3px; }
pre { padding: .6rem .8rem; overflow-x: auto; border-radius: 4px; }
pre code { padding: 0; background: none; }
table { border-collapse: collapse; } th, td { border: 1px solid #ccd; padding: .2rem .5rem; }
h2 { border-bottom: 1px solid #ccd; margin-top: 2.5rem; } :target { background: #fff6cc; }
"""


def slug(text: str) -> str:
    """GitHub's heading anchor: lower case, punctuation dropped (``-`` and ``_`` kept), spaces to ``-``."""
    plain = re.sub(r"<[^>]+>", "", _CODE_SPAN.sub(r"\2", text)).lower()
    return re.sub(r"[^\w\- ]", "", plain).replace(" ", "-")


def _link(m: re.Match[str]) -> str:
    text, url = m.group(1), m.group(2)
    if url.startswith(("#", "http://", "https://")):
        return f'<a href="{html.escape(url, quote=True)}">{text}</a>'
    return f"{text} (docs/{html.escape(url.split('#', 1)[0])})"  # another doc: not served here


def inline(text: str) -> str:
    """One line of Markdown text as HTML: code spans verbatim, then links, bold and emphasis."""
    out, pos = [], 0
    for m in _CODE_SPAN.finditer(text):
        out.append(_inline_text(text[pos : m.start()]))
        out.append(f"<code>{html.escape(m.group(2).strip())}</code>")
        pos = m.end()
    out.append(_inline_text(text[pos:]))
    return "".join(out)


def _inline_text(text: str) -> str:
    text = html.escape(text, quote=False)
    text = _LINK.sub(_link, text)
    text = _BOLD.sub(r"<strong>\1</strong>", text)
    return _EM.sub(r"<em>\1</em>", text)


def _cells(line: str) -> list[str]:
    return [c.strip() for c in line.strip().strip("|").split("|")]


def render_body(markdown: str) -> str:
    """The Markdown document as an HTML fragment."""
    lines = markdown.splitlines()
    out: list[str] = []
    i = 0
    while i < len(lines):
        line = lines[i]
        if not line.strip():
            i += 1
        elif line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre><code>" + html.escape("\n".join(lines[i + 1 : j])) + "</code></pre>")
            i = j + 1
        elif m := _HEADING.match(line):
            n, title = len(m.group(1)), m.group(2)
            out.append(f'<h{n} id="{slug(title)}">{inline(title)}</h{n}>')
            i += 1
        elif line.lstrip().startswith("|") and i + 1 < len(lines) and _TABLE_SEP.match(lines[i + 1]):
            i = _table(lines, i, out)
        elif m := _LIST_ITEM.match(line):
            i = _list(lines, i, m, out)
        else:
            j = i
            para = []
            while j < len(lines) and lines[j].strip() and not _starts_block(lines, j):
                para.append(lines[j].strip())
                j += 1
            if not para:  # a line that starts a block it cannot be: keep it as text
                para, j = [line.strip()], i + 1
            out.append(f"<p>{inline(' '.join(para))}</p>")
            i = j
    return "\n".join(out)


def _table(lines: list[str], i: int, out: list[str]) -> int:
    """The pipe table at ``lines[i]`` appended to ``out``; returns the index after it."""
    head = "".join(f"<th>{inline(c)}</th>" for c in _cells(lines[i]))
    rows, j = [], i + 2
    while j < len(lines) and lines[j].lstrip().startswith("|"):
        rows.append("<tr>" + "".join(f"<td>{inline(c)}</td>" for c in _cells(lines[j])) + "</tr>")
        j += 1
    out.append(f"<table><thead><tr>{head}</tr></thead><tbody>{''.join(rows)}</tbody></table>")
    return j


def _list(lines: list[str], i: int, m: re.Match[str], out: list[str]) -> int:
    """The list whose first item ``m`` is at ``lines[i]`` appended to ``out`` (deeper lines join
    their item); returns the index after it."""
    tag = "ol" if m.group(2)[0].isdigit() else "ul"
    items: list[list[str]] = []
    j = i
    while j < len(lines) and lines[j].strip():
        if (item := _LIST_ITEM.match(lines[j])) and len(item.group(1)) <= len(m.group(1)):
            items.append([item.group(3)])
        else:
            items[-1].append(lines[j].strip())
        j += 1
    out.append(f"<{tag}>" + "".join(f"<li>{inline(' '.join(t))}</li>" for t in items) + f"</{tag}>")
    return j


def _starts_block(lines: list[str], j: int) -> bool:
    line = lines[j]
    return bool(
        line.startswith("```")
        or _HEADING.match(line)
        or _LIST_ITEM.match(line)
        or (line.lstrip().startswith("|") and j + 1 < len(lines) and _TABLE_SEP.match(lines[j + 1]))
    )


def render_page(markdown: str) -> str:
    """The whole page: docs/runbooks.md rendered, with a small style sheet and no outside resource."""
    return (
        "<!doctype html>\n<!-- Generated by `fleetscope generate` from docs/runbooks.md. Do not edit. -->\n"
        '<html lang="en"><head><meta charset="utf-8"><title>fleetscope runbooks</title>'
        f"<style>{_STYLE}</style></head><body>\n{render_body(markdown)}\n</body></html>\n"
    )


def anchors(page: str) -> set[str]:
    """The ``id`` of every element of a rendered page."""
    return set(re.findall(r'\sid="([^"]+)"', page))
