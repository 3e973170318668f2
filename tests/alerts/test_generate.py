"""``fleetscope generate`` writes every output; ``--check`` passes on the committed tree and fails,
listing the files and the fix, when an output is stale, missing or left over."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from fleetscope import generate

ROOT = Path(__file__).resolve().parents[2]


def fleetscope(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetscope", *args], capture_output=True, text=True, timeout=120
    )


def test_committed_outputs_are_fresh() -> None:
    assert generate.stale_files(ROOT) == []


def test_generate_then_check(tmp_path: Path) -> None:
    res = fleetscope("generate", "--root", str(tmp_path))
    assert res.returncode == 0, res.stderr
    expected = set(generate.outputs())
    written = {p.relative_to(tmp_path) for p in tmp_path.rglob("*") if p.is_file()}
    assert written == expected
    # The chart's copies are byte-identical to the top-level files.
    for rel in expected:
        if rel.parent == generate.CHART_RULES_DIR:
            assert (tmp_path / rel).read_bytes() == (tmp_path / generate.RULES_DIR / rel.name).read_bytes()
    assert fleetscope("generate", "--check", "--root", str(tmp_path)).returncode == 0

    (tmp_path / "dashboards/cluster.json").write_text("{}\n")
    (tmp_path / "charts/fleetscope/files/rules/fleetscope-gpu.rules.yml").unlink()
    (tmp_path / "alerts/fleetscope-old.rules.yml").write_text("groups: []\n")
    res = fleetscope("generate", "--check", "--root", str(tmp_path))
    assert res.returncode == 1
    assert "dashboards/cluster.json (stale)" in res.stdout
    assert "charts/fleetscope/files/rules/fleetscope-gpu.rules.yml (missing)" in res.stdout
    assert "alerts/fleetscope-old.rules.yml (not generated any more)" in res.stdout
    assert res.stdout.strip().endswith("run fleetscope generate")

    assert fleetscope("generate", "--root", str(tmp_path)).returncode == 0
    assert not (tmp_path / "alerts/fleetscope-old.rules.yml").exists()
    assert fleetscope("generate", "--check", "--root", str(tmp_path)).returncode == 0


def test_bad_root_is_one_clear_line(tmp_path: Path) -> None:
    res = fleetscope("generate", "--check", "--root", str(tmp_path / "nope"))
    assert res.returncode != 0
    assert "Traceback" not in res.stderr
    assert "not a directory" in res.stderr


def test_metrics_doc_lists_every_metric() -> None:
    from fleetscope import contract
    from fleetscope.alerts import names

    text = (ROOT / "docs/metrics.md").read_text()
    for name in list(contract.METRICS) + list(names.RECORDING_RULE_NAMES):
        assert f"`{name}`" in text, name
