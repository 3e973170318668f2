"""Drain plans: commands, quoting, the cluster-fraction limit, --execute, and the CLI."""

from __future__ import annotations

import json
import os
import shlex
import stat
import subprocess
import sys
from pathlib import Path

import pytest

from fleetscope.analyzers.findings import Finding, findings_document
from fleetscope.errors import FleetscopeError
from fleetscope.service.plan import (
    DrainCandidate,
    build_plan,
    candidates_from,
    drain_limit,
    execute,
    plan_from_analysis,
)
from tests.service.support import ROOT, make_analysis

T0 = 1_796_000_000.0


def failing(
    node: str, severity: str = "critical", start: float = T0, gpu: str | None = "3", cause="gpu_lost"
):
    return Finding("failing_node", severity, node, start, cause, "drain now", gpu=gpu)


def test_limit_is_the_floor_of_the_fraction_but_at_least_one_unless_zero():
    assert drain_limit(64, 0.1) == 6
    assert drain_limit(10, 0.3) == 3
    assert drain_limit(4, 1.0) == 4
    # A cluster under 10 nodes can still drain its first failing node at the default 0.1.
    for size in (1, 2, 4, 8, 9):
        assert drain_limit(size, 0.1) == 1, size
    assert drain_limit(19, 0.1) == 1 and drain_limit(20, 0.1) == 2
    # 0 is the explicit "drain none"; an empty cluster has nothing to drain.
    assert drain_limit(8, 0.0) == 0 and drain_limit(64, 0) == 0
    assert drain_limit(0, 0.1) == 0
    for bad in (-0.1, 1.5):
        with pytest.raises(FleetscopeError):
            drain_limit(10, bad)


def test_plan_that_would_exceed_the_limit_drains_the_worst_and_holds_back_the_rest():
    findings = [failing(f"node-{i}", start=T0 + i) for i in range(1, 6)]
    findings.append(failing("node-9", severity="warning", start=T0 - 100))
    findings.append(failing("node-7", start=T0 - 50))
    plan = build_plan(candidates_from(findings), cluster_size=20, max_fraction=0.15)
    assert plan.limit == 3
    assert [a.candidate.node for a in plan.actions] == [
        "node-7",
        "node-1",
        "node-2",
    ]  # critical, oldest first
    assert [c.node for c in plan.held_back] == ["node-3", "node-4", "node-5", "node-9"]
    script = plan.script()
    assert script.count("scontrol update") == 3
    assert "# held back by the limit: node-9 (warning gpu_lost)" in script
    assert "7 failing of 20 nodes; at most 3 at once" in script


def test_execute_never_runs_more_than_the_limit(tmp_path, monkeypatch):
    log = tmp_path / "calls"
    fake_bin = _fake_program(tmp_path, "scontrol", log)
    monkeypatch.setenv("PATH", f"{fake_bin}{os.pathsep}{os.environ['PATH']}")
    plan = build_plan(
        candidates_from([failing(f"n{i}") for i in range(10)]), cluster_size=30, max_fraction=0.1
    )
    results = execute(plan)
    assert [r.returncode for r in results] == [0, 0, 0]
    calls = [json.loads(line) for line in log.read_text().splitlines()]
    assert [c[1][1] for c in calls] == ["NodeName=n0", "NodeName=n1", "NodeName=n2"]


def test_commands_are_argument_lists_and_the_printed_form_is_shell_quoted(tmp_path, monkeypatch):
    nasty = Finding(
        "failing_node",
        "critical",
        "node-1",
        T0,
        "gpu_lost'; rm -rf / #",
        "drain now",
        gpu="3",
    )
    plan = build_plan(candidates_from([nasty]), cluster_size=1, max_fraction=1.0)
    argv = plan.actions[0].commands[0]
    assert argv[:4] == ["scontrol", "update", "NodeName=node-1", "State=DRAIN"]
    assert argv[4].startswith("Reason=fleetscope: gpu_lost'; rm -rf / # gpu 3 since ")
    printed = plan.actions[0].shell()[0]
    assert shlex.split(printed) == argv  # the shell would see exactly the argument list
    # Run for real through a recording program: the reason arrives as one argument, no shell ran.
    log = tmp_path / "calls"
    monkeypatch.setenv("PATH", f"{_fake_program(tmp_path, 'scontrol', log)}{os.pathsep}{os.environ['PATH']}")
    execute(plan)
    assert json.loads(log.read_text())[1] == argv[1:]
    k8s = build_plan(candidates_from([nasty]), 1, "kubernetes", 1.0).actions[0].commands
    assert k8s[1][4] == "fleetscope.io/failing=gpu_lost___rm_-rf:NoSchedule"


def test_unsafe_node_names_never_reach_a_command():
    cands = candidates_from([failing("node-1; reboot"), failing("-rf"), failing("../x"), failing("ok-node")])
    plan = build_plan(cands, cluster_size=4, max_fraction=1.0)
    assert [a.candidate.node for a in plan.actions] == ["ok-node"]
    assert sorted(n for n, _ in plan.rejected) == sorted(["node-1; reboot", "-rf", "../x"])


def test_one_candidate_per_node_only_open_failing_node_findings():
    closed = failing("node-5")
    closed.end = T0 + 60
    straggler = Finding("straggler", "warning", "node-6", T0, "thermal_throttle", "watch", rank=3)
    cands = candidates_from(
        [
            failing("node-1", gpu="3"),
            failing("node-1", gpu="5", severity="warning", start=T0 - 10),
            closed,
            straggler,
        ]
    )
    assert len(cands) == 1
    c = cands[0]
    assert (c.node, c.severity, c.gpus, c.start) == ("node-1", "critical", ["3", "5"], T0 - 10)
    assert c.reason().startswith("fleetscope: gpu_lost gpu 3,5 since ")


def test_failing_verdict_without_a_finding_is_still_planned():
    a = make_analysis(n_nodes=10, failing=("node-2",))
    a.nodes["node-4"].state = "failing"
    a.nodes["node-4"].reasons = ["node_exporter down"]
    plan = plan_from_analysis(a, max_fraction=0.5)
    assert [x.candidate.node for x in plan.actions] == ["node-2", "node-4"]
    assert plan.actions[1].candidate.cause == "node_exporter down"


def test_execute_refuses_when_a_program_is_missing(monkeypatch, tmp_path):
    monkeypatch.setenv("PATH", str(tmp_path))
    plan = build_plan([DrainCandidate("node-1", "critical", "gpu_lost", T0)], 1, "kubernetes", 1.0)
    with pytest.raises(FleetscopeError, match="kubectl not found"):
        execute(plan)


def test_a_failed_command_skips_the_rest_of_that_node(tmp_path, monkeypatch):
    log = tmp_path / "calls"
    monkeypatch.setenv(
        "PATH", f"{_fake_program(tmp_path, 'kubectl', log, fail_on='bad')}{os.pathsep}/usr/bin:/bin"
    )
    plan = build_plan(candidates_from([failing("bad"), failing("good")]), 2, "kubernetes", 1.0)
    results = execute(plan)
    assert [(r.argv[1], r.argv[2], r.returncode) for r in results] == [
        ("cordon", "bad", 3),
        ("cordon", "good", 0),
        ("taint", "nodes", 0),
    ]


# --- the CLI -----------------------------------------------------------------------------


def _cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "fleetscope", "plan", *args],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env={**os.environ, "PYTHONPATH": str(ROOT), **(env or {})},
        timeout=60,
        check=False,
    )


def test_cli_prints_the_plan_from_a_findings_document_and_runs_nothing(tmp_path):
    doc = tmp_path / "findings.json"
    fs = [failing(f"node-{i}") for i in range(1, 4)]
    doc.write_text(json.dumps(findings_document(fs, T0, T0 + 1800)))
    log = tmp_path / "calls"
    fake = _fake_program(tmp_path, "scontrol", log)
    env = {"PATH": f"{fake}{os.pathsep}{os.environ['PATH']}"}
    res = _cli("--input", str(doc), "--cluster-size", "20", "--max-fraction", "0.1", env=env)
    assert res.returncode == 0, res.stderr
    assert res.stdout.count("scontrol update NodeName=") == 2
    assert "held back by the limit: node-3" in res.stdout
    assert not log.exists()  # printed, not run
    res = _cli("--input", str(doc), "--cluster-size", "20", "--format", "json", "--scheduler", "kubernetes")
    plan = json.loads(res.stdout)
    assert plan["limit"] == 2 and plan["drain"][0]["argv"][0] == ["kubectl", "cordon", "node-1"]
    res = _cli("--input", str(doc), "--cluster-size", "20", "--execute", env=env)
    assert res.returncode == 0, res.stderr
    assert len(log.read_text().splitlines()) == 2


def test_cli_small_cluster_drains_one_and_max_fraction_zero_drains_none(tmp_path):
    doc = tmp_path / "findings.json"
    doc.write_text(json.dumps(findings_document([failing("node-1"), failing("node-2")], T0, T0 + 1800)))
    res = _cli("--input", str(doc), "--cluster-size", "4")
    assert res.returncode == 0, res.stderr
    assert "at most 1 at once" in res.stdout and res.stdout.count("scontrol update NodeName=") == 1
    assert "held back by the limit: node-2" in res.stdout
    res = _cli("--input", str(doc), "--cluster-size", "4", "--max-fraction", "0")
    assert res.returncode == 0, res.stderr
    assert "at most 0 at once" in res.stdout and "scontrol" not in res.stdout
    assert res.stdout.count("held back by the limit") == 2
    res = _cli("--help")
    assert "at least 1" in " ".join(res.stdout.split())


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--input", "/nonexistent.json"], "no such file"),
        (["--input", "{doc}"], "pass --cluster-size N"),
        (["--input", "{bad}", "--cluster-size", "3"], "not valid JSON"),
        (["--input", "{doc}", "--cluster-size", "0"], "--cluster-size must be >= 1"),
    ],
)
def test_cli_bad_input_is_one_clear_line(tmp_path, args, message):
    doc = tmp_path / "f.json"
    doc.write_text(json.dumps(findings_document([failing("node-1")], T0, T0 + 60)))
    bad = tmp_path / "bad.json"
    bad.write_text("{not json")
    args = [a.format(doc=doc, bad=bad) for a in args]
    res = _cli(*args)
    assert res.returncode == 1
    assert message in res.stderr and "Traceback" not in res.stderr
    assert len(res.stderr.strip().splitlines()) == 1


def _fake_program(tmp_path: Path, name: str, log: Path, fail_on: str | None = None) -> Path:
    """A stand-in for scontrol/kubectl (no scheduler here) that records its argv as JSON."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    prog = bin_dir / name
    prog.write_text(
        f"#!{sys.executable}\n"
        "import json, sys\n"
        f"open({str(log)!r}, 'a').write(json.dumps([sys.argv[0].rsplit('/', 1)[-1], sys.argv[1:]]) + '\\n')\n"
        f"sys.exit(3 if {fail_on!r} in sys.argv[1:] else 0)\n"
    )
    prog.chmod(prog.stat().st_mode | stat.S_IEXEC)
    return bin_dir
