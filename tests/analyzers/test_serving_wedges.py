"""Alive but wedged (issue 38): a serving replica whose engine stopped, whose tensor-parallel
all-reduce hangs, or whose API server answers 5xx is ``failing_replica``, named to its replica and
node, within two minutes of the onset; its healthy twins (saturated but progressing, starved by the
router, restarting) are not. Every serving finding names the node by its name, also where the
vLLM series carry only the pod's IP (``instance``) and the node comes from the pod's GPUs."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from fleetscope.cli import main
from fleetscope.simulate.record import write_scenario
from fleetscope.simulate.spec import DEFAULT_START, FaultSpec, ScenarioSpec, node_name
from fleetscope.times import parse_rfc3339

ONSET = 600.0


def _findings(path: Path, capsys: pytest.CaptureFixture[str]) -> list[dict]:
    assert main(["analyze", "--input", str(path), "--format", "json"]) == 0
    return json.loads(capsys.readouterr().out)["findings"]


def _run(tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: FaultSpec, **kw) -> list[dict]:
    spec = ScenarioSpec(name="inference_w", nodes=4, duration_s=1200, seed=31, faults=[fault], **kw)
    out, _ = write_scenario(spec, tmp_path / "w.om")
    return _findings(out, capsys)


@pytest.mark.parametrize(
    ("kind", "cause", "diagnosis", "gpus_per_replica", "replica"),
    [
        ("engine_wedged", "engine_wedged", "engine stopped", 0, "vllm-llama-3-1-70b-instruct-1"),
        ("tp_hang", "engine_wedged", "collective hang", 2, "vllm-llama-3-1-70b-instruct-5"),
        ("http_errors", "http_errors", None, 0, "vllm-llama-3-1-70b-instruct-1"),
    ],
)
def test_each_wedge_is_found_named_within_two_minutes(
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    kind: str,
    cause: str,
    diagnosis: str | None,
    gpus_per_replica: int,
    replica: str,
) -> None:
    fault = FaultSpec(kind=kind, at_s=ONSET, node=1, gpu=2)
    findings = _run(tmp_path, capsys, fault, gpus_per_replica=gpus_per_replica)
    failing = [f for f in findings if f["kind"] == "failing_replica"]
    assert len(failing) == 1, findings
    (f,) = failing
    assert (f["cause"], f["node"], f["gpu"], f["severity"]) == (cause, node_name(1), None, "critical")
    assert f["evidence"]["replica"] == replica
    confirmed = parse_rfc3339(f["evidence"]["confirmed_at"])
    assert confirmed is not None and 0 <= confirmed - (DEFAULT_START + ONSET) <= 120
    if diagnosis:
        assert f["evidence"]["diagnosis"].startswith(diagnosis), f["evidence"]
        assert "running" in f["evidence"]["requests_in_flight"]
        util = f["evidence"]["gpu_utilisation"]
        assert util.startswith("0%" if kind == "engine_wedged" else "100%"), util
    else:
        assert f["evidence"]["http_5xx_share"].startswith("100%")
    # Nothing else is blamed: no other replica, no node, no GPU.
    assert all(g["kind"] not in ("slow_replica", "failing_node", "straggler") for g in findings), findings


@pytest.mark.parametrize(
    "fault",
    [
        FaultSpec(kind="traffic_surge", at_s=ONSET, duration_s=400, slowdown=1.6),
        FaultSpec(kind="router_starved", at_s=ONSET, node=2, gpu=0),
        FaultSpec(kind="rolling_restart", at_s=300, stall_s=120),
    ],
    ids=["saturated", "starved", "restart"],
)
def test_the_look_alikes_are_quiet(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], fault: FaultSpec
) -> None:
    findings = _run(tmp_path, capsys, fault)
    assert [f for f in findings if f["kind"] in ("failing_replica", "slow_replica")] == []


def _as_kubernetes_pods(text: str) -> str:
    """The recording as a Kubernetes scrape writes it: the vLLM pods' series (engine and HTTP) carry
    their pod's IP as ``instance`` and no ``Hostname`` (dcgm-exporter's GPU series keep theirs)."""
    out = []
    for line in text.splitlines(keepends=True):
        if line.startswith(("vllm:", "http_requests_total{")):
            pod = re.search(r'pod="vllm-[a-z0-9-]*?-(\d+)"', line)
            assert pod, line
            line = re.sub(r'(Hostname|instance|job)="[^"]*",?', "", line).replace(",}", "}")
            target = f'instance="10.5.137.{100 + int(pod.group(1))}:8000",job="serve/vllm",'
            line = line.replace("{", "{" + target, 1)
        out.append(line)
    return "".join(out)


@pytest.mark.parametrize("kind", ["engine_wedged", "thermal_throttle"])
def test_a_pod_on_a_pod_ip_is_named_by_its_node(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    spec = ScenarioSpec(
        name="inference_k8s",
        nodes=4,
        duration_s=1500,
        seed=32,
        faults=[FaultSpec(kind=kind, at_s=ONSET, node=2, gpu=3, slowdown=0.2)],
    )
    sim, _ = write_scenario(spec, tmp_path / "sim.om")
    pods = tmp_path / "pods.om"
    pods.write_text(_as_kubernetes_pods(sim.read_text()))
    assert 'instance="10.5.137.102:8000"' in pods.read_text()
    findings = [f for f in _findings(pods, capsys) if f["kind"] in ("failing_replica", "slow_replica")]
    assert findings, kind
    for f in findings:
        assert f["node"] == node_name(2), f
        assert not re.match(r"\d+\.\d+\.\d+\.\d+", f["node"])
