"""``fleetscope hang`` and ``analyze --flight-recorder/--nccl-ras`` over real files, as a user runs
them (subprocess), and the join to a recording of the same job (node, GPU, XID)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope.hang.model import CONFIDENCES, REASONS
from tests.hang.builders import FR, RAS

ROOT = Path(__file__).resolve().parents[2]
#: The grid of the recording: 20 one-minute samples; the XID on rank 9's GPU at sample 12.
T0, STEP, N, XID_AT = 1_758_579_000, 60, 20, 12


def _fleetscope(*args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, PYTHONPATH=str(ROOT))
    return subprocess.run(
        [sys.executable, "-m", "fleetscope", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _contract(doc: dict) -> None:
    """The JSON shape docs/hang.md#json promises."""
    assert set(doc) == {"hangs", "inputs", "notes"}
    for h in doc["hangs"]:
        keys = {
            "group",
            "op",
            "seq",
            "waiting_for",
            "reason",
            "confirmed",
            "evidence",
            "confidence",
            "source",
        }
        assert set(h) == keys
        assert isinstance(h["group"], str) and isinstance(h["op"], str) and h["op"].startswith("nccl:")
        assert h["seq"] is None or isinstance(h["seq"], int)
        assert h["reason"] in REASONS and h["confidence"] in CONFIDENCES and isinstance(h["confirmed"], bool)
        assert all(isinstance(e, str) for e in h["evidence"])
        for w in h["waiting_for"]:
            assert set(w) == {"rank", "host", "pid", "gpu"}


def test_json_over_both_dump_sets_and_a_ras_report() -> None:
    r = _fleetscope("hang", str(FR / "gpu_error_2nd"), str(FR / "lock_gil_1st"),
                    str(RAS / "ray_test_multi_comm_one_mismatched.json"), "--format", "json")  # fmt: skip
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    _contract(doc)
    fr = [h for h in doc["hangs"] if h["source"] == "flight_recorder"]
    assert [sorted(w["rank"] for w in h["waiting_for"]) for h in fr] == [[9, 14], [9, 14]]
    assert [d["ranks"] for d in doc["inputs"]["flight_recorder"]] == [list(range(16))] * 2
    assert doc["inputs"]["nccl_ras"][0]["nccl_versions"] == ["2.28.9"]


def test_text_and_html_and_output_file(tmp_path: Path) -> None:
    r = _fleetscope("hang", str(FR / "lock_gil_1st"))
    assert r.returncode == 0 and "hang: rank 9, rank 14 -- not_launched in nccl:all_to_all #45265" in r.stdout
    out = tmp_path / "h.html"
    r = _fleetscope(
        "hang", str(RAS / "doc_text_warning_mismatch_opcount.txt"), "--format", "html", "-o", str(out)
    )
    assert r.returncode == 0 and r.stdout == ""
    page = out.read_text()
    assert page.startswith("<!DOCTYPE html>") and "rank 7 (node 172.16.64.210, GPU 7)" in page


def test_a_hostile_dump_is_one_stderr_line_and_the_rest_is_used(tmp_path: Path) -> None:
    d = tmp_path / "dumps"
    shutil.copytree(FR / "gpu_error_2nd", d)
    (d / "_dump_0").chmod(0o644)
    (d / "_dump_0").write_bytes(b"cos\nsystem\n(S'true'\ntR.")
    r = _fleetscope("hang", str(d), "--format", "json")
    assert r.returncode == 0
    lines = r.stderr.strip().splitlines()
    assert len(lines) == 1 and "_dump_0" in lines[0] and "refuses the global os.system" in lines[0]
    assert "Traceback" not in r.stderr
    doc = json.loads(r.stdout)
    assert {9, 14} <= {w["rank"] for h in doc["hangs"] for w in h["waiting_for"]}


def test_nothing_usable_is_one_error_line_and_exit_1(tmp_path: Path) -> None:
    (tmp_path / "x.json").write_text("{}")
    r = _fleetscope("hang", str(tmp_path / "x.json"), str(tmp_path / "nope"))
    assert r.returncode == 1 and r.stdout == ""
    assert r.stderr.count("\n") == 1 and r.stderr.startswith("fleetscope: error: no usable input")


def _recording(path: Path) -> Path:
    """A recording of the dumps' job: training_info of 16 ranks on two nodes, an XID 79 on rank 9's GPU."""
    lines = ["# TYPE training_info gauge", "# TYPE fleetscope_gpu_xid_errors_total counter"]
    for r in range(16):
        labels = f'job_id="moe",rank="{r}",local_rank="{r % 8}",Hostname="node-{r // 8}",gpu="{r % 8}"'
        lines += [f"training_info{{{labels}}} 1 {T0 + i * STEP}" for i in range(N)]
    xid = 'gpu="1",UUID="GPU-9",pci_bus_id="0",device="nvidia1",modelName="H100",Hostname="node-1",xid="79"'
    lines += [
        f"fleetscope_gpu_xid_errors_total{{{xid}}} {int(i >= XID_AT)} {T0 + i * STEP}" for i in range(N)
    ]
    path.write_text("\n".join(lines) + "\n# EOF\n")
    return path


def test_hang_with_a_recording_names_node_gpu_and_the_xid(tmp_path: Path) -> None:
    rec = _recording(tmp_path / "rec.om")
    r = _fleetscope(
        "hang", str(FR / "gpu_error_2nd"), "--input", str(rec), "--job", "moe", "--format", "json"
    )
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    _contract(doc)
    (h,) = doc["hangs"]
    where = {w["rank"]: (w["host"], w["gpu"]) for w in h["waiting_for"]}
    assert where == {9: ("node-1", "1"), 14: ("node-1", "6")}
    assert h["evidence"][0].startswith(
        "rank 9 (node node-1, GPU 1) never completed nccl:all_to_all #44791; XID 79"
    )
    assert doc["inputs"]["hardware"]["ranks_mapped"] == 16


@pytest.mark.parametrize("fmt", ["json", "text", "html"])
def test_analyze_adds_the_hangs_with_node_and_gpu(tmp_path: Path, fmt: str) -> None:
    rec = _recording(tmp_path / "rec.om")
    r = _fleetscope("analyze", "--input", str(rec), "--flight-recorder", str(FR / "lock_gil_1st"),
                    "--nccl-ras", str(RAS / "ray_test_healthy.json"), "--format", fmt)  # fmt: skip
    assert r.returncode == 0, r.stderr
    if fmt == "html":
        page = r.stdout
        assert page.rstrip().endswith("</html>") and "<section id='hangs'>" in page
        assert "rank 14 (node node-1, GPU 6)" in page
        return
    if fmt == "text":
        assert "rank 9 (node node-1, GPU 1), rank 14 (node node-1, GPU 6) -- not_launched" in r.stdout
        return
    doc = json.loads(r.stdout)
    assert "findings" in doc
    _contract(doc["hangs"])
    (h,) = doc["hangs"]["hangs"]
    assert [(w["rank"], w["host"], w["gpu"]) for w in h["waiting_for"]] == [
        (9, "node-1", "1"),
        (14, "node-1", "6"),
    ]
    assert any("XID 79" in e for e in h["evidence"])
