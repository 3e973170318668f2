"""``fleetscope demo --workload inference`` end to end: the inference simulator's vLLM replicas
scraped by a real Prometheus with the generated rules, the live service analyzing them. A GPU lost
under one replica must show up as a ``failing_replica`` finding for that replica's node, the
replicas' vLLM series must be in Prometheus (what the inference dashboards read), and Ctrl-C must
stop everything."""

from __future__ import annotations

import signal
import subprocess
from pathlib import Path

import pytest

from fleetscope.simulate.spec import node_name
from tests.demo.test_demo import VENV_BIN, Demo, get_json
from tests.support.prom import free_port, wait_for

pytestmark = [pytest.mark.server]

FAULT_NODE = 1
FAULT_AT = 20  # s: after Prometheus' first scrapes, so the replica is seen before its engine dies


def test_inference_demo_finds_the_replica_that_lost_its_gpu(tmp_path: Path) -> None:
    service, prometheus = free_port(), free_port()
    demo = Demo(
        "--workload",
        "inference",
        "--duration",
        "90",
        "--fast",
        "--fault",
        "gpu_lost",
        "--fault-at",
        str(FAULT_AT),
        "--fault-node",
        str(FAULT_NODE),
        "--listen",
        f"127.0.0.1:{service}",
        "--prometheus-port",
        str(prometheus),
        "--alertmanager-port",
        str(free_port()),
        "--base-port",
        str(20000 + free_port() % 20000),
        "--workdir",
        str(tmp_path / "demo"),
    )
    node = node_name(FAULT_NODE)
    try:
        demo.wait_started()
        assert demo.saw("simulated inference fleet (one vLLM replica per node): 4 virtual nodes")

        def replicas() -> int:
            answer = get_json(
                f"http://127.0.0.1:{prometheus}/api/v1/query?query=count(vllm:num_requests_running)"
            )
            result = answer["data"]["result"]
            return int(float(result[0]["value"][1])) if result else 0

        assert wait_for(lambda: replicas() == 4, timeout=30, what="four vLLM replicas in Prometheus")

        def finding() -> list[dict]:
            found = get_json(f"http://127.0.0.1:{service}/api/v1/findings?kind=failing_replica")["findings"]
            return [f for f in found if f["node"] == node]

        (replica, *_) = wait_for(finding, timeout=60, interval=1, what="a failing_replica finding")
        assert replica["severity"] == "critical" and replica["cause"] == "gpu_lost"
        assert replica["evidence"]["model"] == "meta-llama/Llama-3.1-70B-Instruct"
        wait_for(lambda: demo.saw(f"FINDING failing_replica (critical) node={node}"), timeout=15)
        assert replicas() == 3  # the replica's engine died with its GPU

        demo.remember_children()
        demo.proc.send_signal(signal.SIGINT)
        assert demo.proc.wait(timeout=30) == 0, demo.output()
        demo.reader.join(timeout=5)
        assert not demo.leftovers(), demo.leftovers()
        assert (tmp_path / "demo" / "scenario.json").is_file()  # the inference simulator's scenario
    finally:
        demo.kill()


def test_a_fault_the_workload_cannot_simulate_is_one_line() -> None:
    for args, message in [
        (
            ["--workload", "inference", "--fault", "ecc_uncorrectable"],
            "--fault ecc_uncorrectable is not simulated for --workload inference",
        ),
        (["--fault", "kv_pressure"], "--fault kv_pressure is not simulated for --workload training"),
        (["--workload", "inference", "--nodes", "2"], "--workload inference needs --nodes of at least 3"),
    ]:
        res = subprocess.run(
            [str(VENV_BIN / "fleetscope"), "demo", *args],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert res.returncode != 0
        (line,) = res.stderr.strip().splitlines()
        assert line.startswith(f"fleetscope: error: {message}"), line
        assert "Traceback" not in res.stderr


def test_inference_demo_finds_the_wedged_replica(tmp_path: Path) -> None:
    """``--fault engine_wedged``: the replica's pod answers and its series keep coming, frozen; the
    live service names it ``failing_replica`` cause ``engine_wedged`` on its node."""
    service, prometheus = free_port(), free_port()
    demo = Demo(
        "--workload", "inference", "--duration", "90", "--fast", "--fault", "engine_wedged",
        "--fault-at", str(FAULT_AT), "--fault-node", str(FAULT_NODE), "--listen", f"127.0.0.1:{service}",
        "--prometheus-port", str(prometheus), "--alertmanager-port", str(free_port()),
        "--base-port", str(20000 + free_port() % 20000), "--workdir", str(tmp_path / "demo"),
    )  # fmt: skip
    node = node_name(FAULT_NODE)
    try:
        demo.wait_started()

        def finding() -> list[dict]:
            found = get_json(f"http://127.0.0.1:{service}/api/v1/findings?kind=failing_replica")["findings"]
            return [f for f in found if f["node"] == node and f["cause"] == "engine_wedged"]

        (wedged, *_) = wait_for(finding, timeout=60, interval=1, what="an engine_wedged finding")
        assert wedged["severity"] == "critical" and wedged["gpu"] is None
        assert wedged["evidence"]["diagnosis"].startswith("engine stopped"), wedged["evidence"]
        assert (
            get_json(f"http://127.0.0.1:{prometheus}/api/v1/query?query=count(vllm:num_requests_running)")[
                "data"
            ]["result"][0]["value"][1]
            == "4"
        )  # still reporting: alive, not serving
        demo.proc.send_signal(signal.SIGINT)
        assert demo.proc.wait(timeout=30) == 0, demo.output()
    finally:
        demo.kill()
