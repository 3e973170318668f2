"""The generated rules pass promtool, their unit tests pass, and every rule is covered by them.

``promtool test rules`` runs over every test file; the cases come from the Python rule
definitions (fleetscope/alerts/), so each alert has a firing and a quiet case by construction, and
the coverage tests below check that construction.
"""

from __future__ import annotations

import functools
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import yaml

from fleetscope.alerts import names, render
from fleetscope.alerts.config import THRESHOLDS
from fleetscope.alerts.model import render_template
from tests.support.prom import promtool

pytestmark = [pytest.mark.slow]

ROOT = Path(__file__).resolve().parents[2]
RULE_FILES = sorted((ROOT / "alerts").glob("*.rules.yml"))
TEST_FILES = sorted((ROOT / "alerts" / "tests").glob("*.test.yml"))
ALERTS = render.all_alerts()
RECORDINGS = render.all_recordings()
RUNBOOKS = (ROOT / "docs" / "runbooks.md").read_text()


def test_promtool_check_rules() -> None:
    res = promtool("check", "rules", *map(str, RULE_FILES))
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
    assert res.stdout.decode().count("SUCCESS") == len(RULE_FILES)


def test_promtool_unit_tests_pass() -> None:
    # A promtool per file, two at a time: over a minute of CPU together, most of it one file's (the
    # goodput cases evaluate every rule for 9 hours at 1m), so two cores share it. Room for a loaded
    # machine.
    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(lambda f: promtool("test", "rules", str(f), timeout=600), TEST_FILES))
    for test_file, res in zip(TEST_FILES, results, strict=True):
        out = res.stdout.decode() + res.stderr.decode()
        assert res.returncode == 0, (test_file.name, out)
        assert out.count("SUCCESS") == 1, (test_file.name, out)


def test_promtool_unit_tests_can_fail(tmp_path: Path) -> None:
    """A wrong expectation fails promtool, so the passing run above is not vacuous."""
    doc = yaml.safe_load((ROOT / "alerts/tests/fleetscope-gpu.test.yml").read_text())
    doc["tests"] = doc["tests"][:1]  # the first case of FleetscopeGpuXidDrain, which fires
    expected = doc["tests"][0]["alert_rule_test"][0]["exp_alerts"][0]["exp_labels"]
    assert expected["severity"] == "critical"
    expected["severity"] = "warning"
    broken = yaml.safe_dump(doc)
    (tmp_path / "tests").mkdir()
    for rule_file in RULE_FILES:
        (tmp_path / rule_file.name).write_text(rule_file.read_text())
    (tmp_path / "tests" / "broken.test.yml").write_text(broken)
    res = promtool("test", "rules", str(tmp_path / "tests" / "broken.test.yml"))
    assert res.returncode != 0


@functools.cache
def _committed_tests() -> list[dict]:
    return [group for path in TEST_FILES for group in yaml.safe_load(path.read_text())["tests"]]


@pytest.mark.parametrize("alert", ALERTS, ids=[a.name for a in ALERTS])
def test_every_alert_has_a_firing_and_a_quiet_case(alert) -> None:
    assert any(case.fires for case in alert.cases), f"{alert.name}: no case that fires"
    assert any(not case.fires for case in alert.cases), f"{alert.name}: no case that must stay quiet"
    committed = [
        t for g in _committed_tests() for t in g.get("alert_rule_test", []) if t["alertname"] == alert.name
    ]
    assert any(t["exp_alerts"] for t in committed) and any(not t["exp_alerts"] for t in committed)


@pytest.mark.parametrize("rec", RECORDINGS, ids=[r.record for r in RECORDINGS])
def test_every_recording_rule_is_tested_with_its_value(rec) -> None:
    assert any(case.fires for case in rec.cases), f"{rec.record}: no case with an expected value"
    committed = [
        t for g in _committed_tests() for t in g.get("promql_expr_test", []) if rec.record in t["expr"]
    ]
    assert any(t["exp_samples"] for t in committed)


def test_recording_rules_follow_the_naming_convention() -> None:
    recorded = {r.record for r in RECORDINGS}
    assert recorded == set(names.RECORDING_RULE_NAMES)
    for name in recorded:
        assert re.fullmatch(r"[A-Za-z_]+:[a-z_]+:[a-z0-9_]+", name), name


@pytest.mark.parametrize("alert", ALERTS, ids=[a.name for a in ALERTS])
def test_alert_conventions(alert) -> None:
    assert re.fullmatch(r"Fleetscope[A-Z][A-Za-z]+", alert.name)
    assert alert.severity in {"critical", "warning", "info"}
    assert alert.summary[0].isupper() and alert.summary.endswith("."), alert.summary
    assert alert.description.endswith("."), alert.description
    assert "$labels." in alert.description, "the description must name the node, GPU, job or target"
    url = alert.runbook_url(THRESHOLDS)
    assert url.startswith(THRESHOLDS.runbook_url_base + "#")
    # The anchor must be a heading of docs/runbooks.md (GitHub lower-cases heading anchors).
    headings = {h.strip().lower() for h in re.findall(r"^#+ (.+)$", RUNBOOKS, flags=re.MULTILINE)}
    assert alert.anchor in headings, f"docs/runbooks.md has no section {alert.name}"


def test_runbooks_have_no_section_without_alert() -> None:
    sections = set(re.findall(r"^### (Fleetscope\w+)$", RUNBOOKS, flags=re.MULTILINE))
    assert sections == {a.name for a in ALERTS}


def test_alert_names_are_unique() -> None:
    assert len({a.name for a in ALERTS}) == len(ALERTS)


def test_template_renderer() -> None:
    labels = {"gpu": "3", "Hostname": "n1"}
    assert (
        render_template(
            'GPU {{ $labels.gpu }} on {{$labels.Hostname}}: {{ printf "%.1f%%" $value }}', labels, 12.345
        )
        == "GPU 3 on n1: 12.3%"
    )
    with pytest.raises(ValueError):
        render_template("{{ $value | humanize }}", labels, 1.0)
