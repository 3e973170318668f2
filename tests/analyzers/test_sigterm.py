"""SIGTERM during a streamed ``analyze`` removes its temporary folder (issue 36, item 8): the
process used to die on the spot and leave ``fleetscope-stream-*`` (a converted recording) behind."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import ScenarioSpec
from tests.support.prom import wait_for

ROOT = Path(__file__).resolve().parents[2]


def test_sigterm_during_a_streamed_analyze_removes_its_temporary_folder(tmp_path: Path) -> None:
    rec, _ = write_scenario(ScenarioSpec(name="term", nodes=2, duration_s=3600, seed=11), tmp_path / "r.om")
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "TMPDIR": str(scratch), "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-m", "fleetscope", "analyze", "--input", str(rec), "--chunk", "5m"]
    argv += ["--format", "json", "-o", str(tmp_path / "out.json"), "--no-progress"]
    proc = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        wait_for(lambda: any(scratch.glob("fleetscope-stream-*")), timeout=60, what="the stream folder")
        time.sleep(0.2)  # inside the conversion or the chunks
        proc.send_signal(signal.SIGTERM)
        _out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 128 + signal.SIGTERM, err.decode()[-2000:]
    assert b"Traceback" not in err
    assert list(scratch.iterdir()) == []
    assert not (tmp_path / "out.json").exists()
