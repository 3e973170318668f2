"""A findings JSON is outside input: nothing in it may become a command of the printed plan script.

The script is what the docs call safe to paste; here it is pasted, into bash, in a scratch directory
whose PATH holds only recording fakes of ``scontrol``/``kubectl`` (and of ``rm``/``touch``, should
anything get that far), and nothing but the planned drain commands may run.
"""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
from pathlib import Path

import pytest

from fleetscope.cli import main
from fleetscope.service.plan import DrainCandidate, build_plan

BASH = shutil.which("bash") or "/bin/bash"

HOSTILE = [
    "gpu_lost\nrm -rf ./victim",
    "gpu_lost\r\ntouch ./pwned-cr",
    "$(touch ./pwned-subst)",
    "`touch ./pwned-backtick`",
    "x'; touch ./pwned-quote; '",
    'x"; touch ./pwned-dquote; "',
    "gpu_lost\u2028touch ./pwned-ls\u0085touch ./pwned-nel",
    "ok \\\ntouch ./pwned-continuation",
]


def _fake_bin(root: Path) -> Path:
    """Fakes that append their name and argv (NUL-separated) to calls.log."""
    bindir = root / "bin"
    bindir.mkdir()
    for name in ("scontrol", "kubectl", "rm", "touch"):
        exe = bindir / name
        exe.write_text(f'#!{BASH}\nprintf "%s\\0" {name} "$@" >> "$CALLS"; printf "\\n" >> "$CALLS"\n')
        exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return bindir


def _findings(cause: str) -> dict:
    # A node name with a trailing newline too: refused by the full match, listed as a comment.
    nodes = ["node-1", "node-2\n", "node-3\ntouch ./pwned-node"]
    return {
        "window": {"start": "2026-11-30T10:00:00Z", "end": "2026-11-30T10:30:00Z"},
        "findings": [
            {
                "kind": "failing_node",
                "severity": "critical",
                "node": n,
                "start": "2026-11-30T10:05:00Z",
                "cause": cause,
                "action": f"drain; {cause}",
                "gpu": "3",
            }
            for n in nodes
        ],
    }


def _run_script(script: str, tmp: Path) -> list[list[str]]:
    bindir = _fake_bin(tmp)
    (tmp / "victim").mkdir()
    (tmp / "plan.sh").write_text(script)
    check = subprocess.run([BASH, "-n", str(tmp / "plan.sh")], capture_output=True, text=True)
    assert check.returncode == 0, check.stderr
    env = {"PATH": str(bindir), "CALLS": str(tmp / "calls.log"), "HOME": str(tmp)}
    subprocess.run([BASH, str(tmp / "plan.sh")], cwd=tmp, env=env, capture_output=True, timeout=30)
    log = (tmp / "calls.log").read_text() if (tmp / "calls.log").exists() else ""
    return [line.split("\0")[:-1] for line in log.splitlines() if line]


@pytest.mark.parametrize("scheduler", ["slurm", "kubernetes"])
@pytest.mark.parametrize("cause", HOSTILE)
def test_hostile_findings_run_nothing_but_the_drain(tmp_path, capsys, scheduler, cause):
    (tmp_path / "f.json").write_text(json.dumps(_findings(cause)))
    rc = main(
        [
            "plan",
            "--input",
            str(tmp_path / "f.json"),
            "--cluster-size",
            "10",
            "--max-fraction",
            "1",
            "--scheduler",
            scheduler,
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0
    calls = _run_script(out, tmp_path)
    assert {c[0] for c in calls} <= {"scontrol", "kubectl"}, calls
    assert all(c[0] in ("scontrol", "kubectl") for c in calls)
    # Only node-1 is drained; the names with a newline are refused.
    if scheduler == "slurm":
        assert len(calls) == 1 and calls[0][:2] == ["scontrol", "update"] and calls[0][2] == "NodeName=node-1"
        assert calls[0][-1].startswith("Reason=fleetscope: ")
    else:
        assert [c[1:3] for c in calls] == [["cordon", "node-1"], ["taint", "nodes"]]
    assert (tmp_path / "victim").is_dir()
    assert not [p.name for p in tmp_path.iterdir() if p.name.startswith("pwned")]
    assert out.count("# not drained:") == 2


def test_node_names_need_a_full_match():
    plan = build_plan(
        [
            DrainCandidate(n, "critical", "gpu_lost", None)
            for n in ("good-1", "bad-1\n", "bad 2", "-bad", "ok.example_3")
        ],
        10,
        max_fraction=1.0,
    )
    assert sorted(a.candidate.node for a in plan.actions) == ["good-1", "ok.example_3"]
    assert sorted(n for n, _ in plan.rejected) == ["-bad", "bad 2", "bad-1\n"]


def test_every_comment_is_one_line():
    plan = build_plan(
        [DrainCandidate("n1", "critical\nrm -rf /", "a\nb\rc\u2028d", None, action="x\ny")]
        + [DrainCandidate("n2\n", "warning", "z", None)],
        10,
        max_fraction=0.1,
    )
    plan.held_back.append(DrainCandidate("n3", "info\n", "c\n", None))
    lines = plan.script().splitlines()
    assert all(line.startswith("#") or line.startswith(("scontrol ", "kubectl ")) for line in lines), lines
    assert len(plan.script().split("\n")) == len(lines) + 1


def test_findings_json_with_wrong_types_is_one_clear_line(tmp_path, capsys):
    doc = _findings("x")
    doc["findings"][0]["cause"] = {"nested": ["list"]}
    (tmp_path / "f.json").write_text(json.dumps(doc))
    rc = main(["plan", "--input", str(tmp_path / "f.json"), "--cluster-size", "10"])
    err = capsys.readouterr().err.strip()
    assert rc == 1 and "must be strings" in err and len(err.splitlines()) == 1


def test_fakes_record_calls(tmp_path):
    """The harness itself works: a plain call to a fake is recorded."""
    calls = _run_script("scontrol update NodeName=a\ntouch ./pwned-direct\n", tmp_path)
    assert calls == [["scontrol", "update", "NodeName=a"], ["touch", "./pwned-direct"]]
    assert os.environ.get("CALLS") is None
