"""The fast tier leaves out what it promises to leave out, and its guard catches an unmarked server."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support import tier

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("argv", "marker"),
    [
        (["/usr/bin/prometheus", "--config.file=x"], "server"),
        (["prometheus-alertmanager"], "server"),
        (["/usr/bin/chromium", "--headless"], "browser"),
        ([sys.executable, "-m", "fleetscope", "serve", "--prometheus", "x"], "server"),
        ([sys.executable, "-m", "fleetscope", "exporter", "--once"], "server"),
        ([sys.executable, "-m", "fleetscope", "demo"], "server"),
        (["/x/.venv-vllm/bin/python", "-c", "1"], "vllm"),
        ([sys.executable, "-m", "vllm.entrypoints.openai.api_server"], "vllm"),
        ([sys.executable, "-m", "fleetscope", "analyze", "--input", "r.om.gz"], None),
        (["/usr/bin/promtool", "check", "rules"], None),
        ([], None),
    ],
)
def test_heavy_commands_are_told_apart(argv: list[str], marker: str | None) -> None:
    assert tier.heavy_marker_for(argv) == marker


def test_the_guard_fails_an_unmarked_server_before_it_starts() -> None:
    with pytest.raises(pytest.fail.Exception, match=r"mark it @pytest.mark.server"):
        tier._GuardedPopen(["/usr/bin/prometheus", "--version"], stdout=subprocess.DEVNULL)


def test_an_ordinary_command_runs_under_the_guard() -> None:
    proc = tier._GuardedPopen([sys.executable, "-c", "print(42)"], stdout=subprocess.PIPE, text=True)
    out, _ = proc.communicate(timeout=60)
    assert out.strip() == "42"


def test_the_fast_tier_deselects_the_marked_tests() -> None:
    env = {**os.environ, tier.TIER_ENV: "fast"}
    args = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"]
    files = ["tests/alerts/test_rules.py", "tests/test_times.py"]
    res = subprocess.run([*args, *files], cwd=ROOT, env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stdout + res.stderr
    collected = [line for line in res.stdout.splitlines() if "::" in line]
    assert collected and all(line.startswith("tests/test_times.py::") for line in collected)
    assert "deselected" in res.stdout
