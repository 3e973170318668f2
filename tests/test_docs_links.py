"""Docs and docstrings point into the repository, and every link into docs/ lands on a heading.

Two rules, over README.md, docs/ and every text file under fleetscope/:

* nothing sends the reader outside the repository: no ``shared/...`` or ``research/...`` paths, no
  parent ``DESIGN.md``, no research-note file names; the facts those held are in docs/design.md with
  their original sources;
* every relative Markdown link (``[text](file.md#anchor)``) and every ``docs/<page>.md#anchor``
  mention points at a file that exists and, when it has an anchor, at a heading of that file (GitHub's
  anchor rules: lower case, punctuation dropped, spaces to hyphens, ``-1``, ``-2`` for repeats).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

#: What sends a reader outside the repository.
OUTSIDE = re.compile(
    r"(?<![\w.-])shared/"  # shared/research/..., shared/DESIGN.md, ../shared/fixtures-real/...
    r"|(?<![\w/.-])research/[\w-]+\.md"  # research/analytics.md
    r"|\bDESIGN\.md\b"  # the parent folder's starting contract (docs/design.md is lower case)
    r"|\b(?:analytics|gpu-metrics|efa-and-fsx|ecosystem|real-behaviour)\.md\b"  # research notes
)

_TEXT_SUFFIXES = {".py", ".md", ".html", ".js", ".css", ".txt", ".yml", ".yaml", ".json", ".toml", ".j2"}
_FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", re.S | re.M)
_MD_LINK = re.compile(r"(?<!!)\[[^\]]*\]\(([^)\s]+)\)|!\[[^\]]*\]\(([^)\s]+)\)")
_DOCS_MENTION = re.compile(r"(?<![\w/.-])docs/([\w.-]+\.md)(#[\w-]+)?")
_HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$", re.M)
_HTML_ANCHOR = re.compile(r"<a\s+(?:id|name)=\"([^\"]+)\"")


def _scanned() -> list[Path]:
    files = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    files += [
        p
        for p in sorted((ROOT / "fleetscope").rglob("*"))
        if p.is_file() and p.suffix in _TEXT_SUFFIXES and "__pycache__" not in p.parts
    ]
    return files


FILES = _scanned()


def _rel(p: Path) -> str:
    return p.relative_to(ROOT).as_posix()


def slug(heading: str) -> str:
    """GitHub's anchor for a heading's text."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # a link keeps its text
    text = re.sub(r"<[^>]+>", "", text).replace("`", "").lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(md: Path) -> set[str]:
    text = _FENCE.sub("", md.read_text())
    seen: dict[str, int] = {}
    out = set(_HTML_ANCHOR.findall(text))
    for h in _HEADING.findall(text):
        base = slug(h)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def _links(path: Path) -> list[tuple[Path, str | None, str]]:
    """(target file, anchor or None, as written) of every relative link in ``path``."""
    text = path.read_text()
    found: list[tuple[Path, str | None, str]] = []
    if path.suffix == ".md":
        for m in _MD_LINK.finditer(_FENCE.sub("", text)):
            target = m[1] or m[2]
            if re.match(r"^[a-z][a-z0-9+.-]*:", target):  # https:, mailto:, ...
                continue
            file, _, anchor = target.partition("#")
            found.append(((path.parent / file).resolve() if file else path, anchor or None, target))
    for m in _DOCS_MENTION.finditer(text):
        found.append((ROOT / "docs" / m[1], m[2][1:] if m[2] else None, m[0]))
    return found


def _outside_hits(path: Path) -> list[str]:
    return [
        f"{_rel(path)}:{text.count(chr(10), 0, m.start()) + 1}: {m[0]}"
        for text in [path.read_text(errors="replace")]
        for m in OUTSIDE.finditer(text)
    ]


def test_scans_the_docs_and_the_package() -> None:
    names = {_rel(p) for p in FILES}
    assert {"README.md", "docs/design.md", "docs/runbooks.md", "fleetscope/contract.py"} <= names
    assert len(names) > 100


@pytest.mark.parametrize("path", FILES, ids=_rel)
def test_no_reference_outside_the_repository(path: Path) -> None:
    assert _outside_hits(path) == []


@pytest.mark.parametrize("path", [p for p in FILES if _links(p)], ids=_rel)
def test_links_point_at_files_and_headings(path: Path) -> None:
    broken = []
    for target, anchor, written in _links(path):
        if not target.exists():
            broken.append(f"{written}: no such file")
        elif anchor is not None and (target.suffix != ".md" or anchor not in anchors(target)):
            broken.append(f"{written}: no heading #{anchor} in {_rel(target)}")
    assert broken == []


def test_the_checks_can_fail(tmp_path: Path) -> None:
    """A reference outside the repo and a link to a missing heading are both found."""
    page = tmp_path / "page.md"
    page.write_text(
        "# A page\n\nSee `shared/research/analytics.md` and DESIGN.md.\n\n"
        "[ok](#a-page) [bad](#no-such-heading)\n\n```sh\n# not a heading\n```\n"
    )
    assert len(_outside_hits_text(page.read_text())) == 3
    assert anchors(page) == {"a-page"}
    assert [a for _, a, _ in _links(page)] == ["a-page", "no-such-heading"]


def _outside_hits_text(text: str) -> list[str]:
    return [m[0] for m in OUTSIDE.finditer(text)]


def test_slugs_follow_github() -> None:
    assert slug("MFU and peak FLOP/s") == "mfu-and-peak-flops"
    assert slug("The `Hostname` join label") == "the-hostname-join-label"
    assert slug("Network (EFA)") == "network-efa"
    assert slug("dcgm-exporter names") == "dcgm-exporter-names"


def test_the_first_pages_a_new_user_reads_point_to_no_address_that_may_not_exist() -> None:
    """Issue 33: README.md and docs/quickstart.md (and the chart's metadata) name no outside
    address: a new user on an air-gapped cluster follows them with what is on the machine."""
    urls = re.compile(r"https?://([^/\s)`'\"<>:]+)")
    for path in (
        ROOT / "README.md",
        ROOT / "docs" / "quickstart.md",
        ROOT / "charts" / "fleetscope" / "Chart.yaml",
    ):
        hosts = {h for h in urls.findall(path.read_text()) if h not in ("127.0.0.1", "localhost")}
        assert not hosts, f"{path.relative_to(ROOT)} points to {sorted(hosts)}"
    assert "git clone" not in (ROOT / "docs" / "quickstart.md").read_text()
