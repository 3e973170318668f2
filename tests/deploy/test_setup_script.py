"""scripts/setup.sh says what it is doing, step by step, and keeps pip's and setuptools' banners out
of sight unless a step fails. Run in a scratch copy whose ``.venv/bin/python`` is a stand-in that
prints setuptools' editable-install banner (no network here); the Debian packages are the real
ones already installed on the test machine."""

from __future__ import annotations

import hashlib
import shutil
import stat
import subprocess
from pathlib import Path

from tests.deploy.conftest import ROOT

BANNER = "InformationOnly: Editable installation.\n!!\n" + "*" * 80 + "\n"


def _copy(tmp_path: Path, python_rc: int) -> Path:
    repo = tmp_path / "repo"
    (repo / "scripts").mkdir(parents=True)
    (repo / "requirements").mkdir()
    shutil.copy(ROOT / "scripts" / "setup.sh", repo / "scripts" / "setup.sh")
    shutil.copy(ROOT / "pyproject.toml", repo / "pyproject.toml")
    shutil.copy(ROOT / "requirements" / "constraints.txt", repo / "requirements" / "constraints.txt")
    fake = repo / ".venv" / "bin" / "python"
    fake.parent.mkdir(parents=True)
    fake.write_text(f"#!/bin/sh\necho \"$*\" >> {repo}/calls\nprintf '{BANNER}' >&2\nexit {python_rc}\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return repo


def _run(repo: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["bash", str(repo / "scripts" / "setup.sh")], capture_output=True, text=True, timeout=120, check=False
    )


def test_setup_names_each_step_without_the_setuptools_banner(tmp_path: Path) -> None:
    repo = _copy(tmp_path, python_rc=0)
    res = _run(repo)
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout.splitlines()
    assert out[0].startswith("setup: Debian packages already installed")
    assert "setup: upgrading pip in .venv" in out
    assert any(line.startswith("setup: installing fleetscope and its Python packages") for line in out)
    assert out[-1].startswith("setup: done")
    assert "Editable installation" not in res.stdout + res.stderr and "!!" not in res.stderr
    assert len((repo / "calls").read_text().splitlines()) == 2  # pip upgrade, then the install
    want = hashlib.sha256(
        (repo / "pyproject.toml").read_bytes() + (repo / "requirements/constraints.txt").read_bytes()
    )
    assert (repo / ".venv" / ".fleetscope-installed").read_text().strip() == want.hexdigest()
    # again: nothing to do, and it says so
    res = _run(repo)
    assert res.returncode == 0 and "setup: .venv is up to date" in res.stdout.splitlines()


def test_a_failed_step_shows_its_output_and_stops(tmp_path: Path) -> None:
    repo = _copy(tmp_path, python_rc=1)
    res = _run(repo)
    assert res.returncode == 1
    assert "Editable installation" in res.stderr  # the failed step's own output, for the diagnosis
    assert "setup: failed: .venv/bin/python -m pip install -q --upgrade pip" in res.stderr
    assert not (repo / ".venv" / ".fleetscope-installed").exists()
