"""The thresholds table of docs/design.md says exactly what the code does.

The "Thresholds" section holds one table per area with the columns *measures | alert rule | alert
threshold | detector threshold | why*. In the alert columns each `` `field` = value `` is a field of
:class:`fleetscope.alerts.config.Thresholds` and each `` `FleetscopeName` (for 10m) `` /
``(at once)`` is a generated alert and its ``for:``; in the detector column each
`` `field` = value `` is a field of ``DetectorConfig``. Every number must equal the code's default,
and every field and every alert must appear, so neither side can drift from the table.
"""

from __future__ import annotations

import dataclasses
import math
import re
from pathlib import Path

import pytest

from fleetscope.alerts import render
from fleetscope.alerts.config import THRESHOLDS, Thresholds
from fleetscope.analyzers.config import DetectorConfig

ROOT = Path(__file__).resolve().parents[2]
DESIGN = ROOT / "docs" / "design.md"

#: Fields of ``Thresholds`` that are settings, not thresholds, and so have no row.
NOT_THRESHOLDS = {"runbook_url_base", "job_selector"}

_FIELD = re.compile(r"`([a-z][a-z0-9_]*)` = ([0-9][0-9.e+-]*[a-z]*)")
_ALERT = re.compile(r"`(Fleetscope[A-Za-z]+)` \((?:for ([0-9]+[smhd])|(at once))\)")


def _section(text: str, heading: str) -> str:
    start = text.index(f"\n## {heading}\n")
    end = text.find("\n## ", start + 1)
    return text[start : end if end != -1 else len(text)]


def _rows(section: str) -> list[list[str]]:
    """Body rows of every 5-column table in the section (header and separator rows dropped)."""
    rows = []
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [cell.strip() for cell in line.strip().strip("|").split("|")]
        if cells[0] in ("measures", "---"):
            continue
        assert len(cells) == 5, f"a thresholds row needs 5 cells, got {len(cells)}: {line}"
        rows.append(cells)
    return rows


ROWS = _rows(_section(DESIGN.read_text(), "Thresholds"))
DETECTOR = DetectorConfig()


def _same(code: object, written: str) -> bool:
    if isinstance(code, str):
        return code == written
    return math.isclose(float(code), float(written), rel_tol=1e-12)  # type: ignore[arg-type]


def _cited(column: int) -> list[tuple[str, str, str]]:
    """(field, value, row's first cell) for every `field` = value in one column."""
    return [(m[1], m[2], row[0]) for row in ROWS for m in _FIELD.finditer(row[column])]


def test_the_table_has_rows() -> None:
    assert len(ROWS) >= 30
    assert len(_cited(2)) >= 25 and len(_cited(3)) >= 18


@pytest.mark.parametrize(("name", "value", "row"), _cited(2))
def test_alert_numbers_equal_thresholds(name: str, value: str, row: str) -> None:
    assert hasattr(THRESHOLDS, name), f"row {row!r}: Thresholds has no field {name}"
    code = getattr(THRESHOLDS, name)
    assert _same(code, value), f"row {row!r}: docs say {name} = {value}, Thresholds says {code}"


@pytest.mark.parametrize(("name", "value", "row"), _cited(3))
def test_detector_numbers_equal_detector_config(name: str, value: str, row: str) -> None:
    assert hasattr(DETECTOR, name), f"row {row!r}: DetectorConfig has no field {name}"
    code = getattr(DETECTOR, name)
    assert _same(code, value), f"row {row!r}: docs say {name} = {value}, DetectorConfig says {code}"


def test_every_alert_threshold_is_in_the_table() -> None:
    cited = {name for name, _, _ in _cited(2)}
    fields = {f.name for f in dataclasses.fields(Thresholds)} - NOT_THRESHOLDS
    assert sorted(fields - cited) == []


def test_every_detector_threshold_is_in_the_table() -> None:
    cited = {name for name, _, _ in _cited(3)}
    fields = {f.name for f in dataclasses.fields(DETECTOR)}
    assert sorted(fields - cited) == []


def test_every_alert_and_its_for_is_in_the_table() -> None:
    written: dict[str, str] = {}
    for row in ROWS:
        for m in _ALERT.finditer(row[1]):
            assert m[1] not in written, f"{m[1]} appears twice in the table"
            written[m[1]] = m[2] or ""
    generated = {a.name: a.for_ or "" for a in render.all_alerts()}
    assert written == generated


def test_rows_where_both_sides_have_numbers_say_why() -> None:
    for row in ROWS:
        if _FIELD.search(row[2]) and _FIELD.search(row[3]):
            assert len(row[4]) > 40, (
                f"row {row[0]!r} compares an alert and a detector number without a reason"
            )


def test_a_wrong_number_is_caught() -> None:
    """The parser really reads the numbers: a changed value no longer matches the code."""
    name, value, _ = next(c for c in _cited(2) if c[0] == "efa_retrans_ratio")
    assert _same(THRESHOLDS.efa_retrans_ratio, value)
    assert not _same(THRESHOLDS.efa_retrans_ratio, "0.01")
    assert name == "efa_retrans_ratio"
