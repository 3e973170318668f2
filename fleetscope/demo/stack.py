"""Starting the four parts of the demo, each as a child process, and waiting until each is ready."""

from __future__ import annotations

import argparse
from pathlib import Path

from fleetscope import strictjson
from fleetscope.demo.configs import alertmanager_config, prometheus_config, rule_files, write_yaml
from fleetscope.demo.net import http_ok, local_address, pick_port, pick_port_range
from fleetscope.demo.processes import Processes, fleetscope_argv
from fleetscope.demo.watcher import say
from fleetscope.textformat import format_number

INSTALL_HINT = (
    "install them with: sudo apt-get install prometheus prometheus-alertmanager "
    "(or put the upstream binaries on PATH)"
)
DEFAULT_PROMETHEUS_PORT = 9090
DEFAULT_ALERTMANAGER_PORT = 9093
READY_TIMEOUT = 60.0


#: The inference demo's compressed day (its traffic's daily pattern), in scenario seconds.
INFERENCE_DAY_S = 3600.0


def inference_scenario(args: argparse.Namespace) -> dict:
    """The inference simulator's scenario for the demo's flags: one vLLM replica per node."""
    faults = []
    if args.fault != "healthy":
        faults.append(
            {
                "kind": args.fault,
                "at_s": args.fault_at,
                "node": args.fault_node,
                "gpu": args.fault_gpu,
                "slowdown": 0.2,
            }
        )
    return {
        "name": "demo",
        "family": "inference",
        "nodes": args.nodes,
        "seed": args.seed,
        "duration_s": INFERENCE_DAY_S,
        "day_s": INFERENCE_DAY_S,
        "faults": faults,
    }


#: The training demo's collective hangs, each a reason class NCCL RAS tells apart (docs/hang.md#live),
#: as the ``hang`` fault's root cause (``fleetscope.simulate.spec.HANG_CAUSES``): a rank that never
#: launched the collective (its host stalled), a rank that died (XID 79), and a collective every rank
#: launched that never completes (the network). The virtual nodes serve the jobs' RAS series.
HANG_FAULTS = {
    "hang_not_launched": "host",
    "hang_dead_rank": "xid79",
    "hang_launched_not_completed": "efa",
}


def hang_scenario(args: argparse.Namespace) -> dict:
    """The training simulator's scenario for a demo hang (``--fault hang_*``): every rank blocked in
    a collective from ``--fault-at`` on (for longer than the demo runs), its cause the fault's reason
    class, and each job's NCCL RAS series served from its rank 0's node, as the exporter's
    ``nccl_ras`` collector serves them."""
    return {
        "name": "demo",
        "family": "hang",
        "nodes": args.nodes,
        "seed": args.seed,
        "duration_s": DEMO_HANG_DURATION_S,
        "nccl_ras": True,
        "faults": [
            {
                "kind": "hang",
                "cause": HANG_FAULTS[args.fault],
                "at_s": args.fault_at,
                "stall_s": DEMO_HANG_DURATION_S,
                "node": args.fault_node,
                "gpu": args.fault_gpu,
            }
        ],
    }


#: How long a demo hang's scenario runs (scenario seconds): longer than a demo is watched.
DEMO_HANG_DURATION_S = 6 * 3600.0


def start_simulator(args: argparse.Namespace, procs: Processes) -> Path:
    """The virtual nodes on consecutive free ports (training ranks, or with ``--workload inference``
    vLLM replicas from the inference simulator); returns their file_sd targets file."""
    base_port = pick_port_range("127.0.0.1", args.base_port, args.nodes)
    targets_file = procs.workdir / "targets.json"
    targets_file.unlink(missing_ok=True)  # a kept --workdir may hold the last run's
    inference = getattr(args, "workload", "training") == "inference"
    if inference or args.fault.startswith("hang_"):
        spec = inference_scenario(args) if inference else hang_scenario(args)
        scenario = procs.workdir / "scenario.json"
        scenario.write_text(strictjson.dumps(spec, indent=1) + "\n")
        what = ["--scenario", str(scenario)]
    else:
        what = [
            "--nodes",
            str(args.nodes),
            "--fault",
            args.fault,
            "--fault-at",
            format_number(args.fault_at),
            "--fault-node",
            str(args.fault_node),
            "--fault-gpu",
            str(args.fault_gpu),
            "--seed",
            str(args.seed),
        ]
    procs.start(
        "simulator",
        fleetscope_argv(
            "simulate",
            "--live",
            *what,
            "--listen",
            "127.0.0.1",
            "--base-port",
            str(base_port),
            "--targets-file",
            str(targets_file),
        ),
    )
    procs.wait_until(
        lambda: targets_file.is_file() and http_ok(f"http://127.0.0.1:{base_port}/metrics"),
        READY_TIMEOUT,
        "the virtual nodes",
    )
    kind = "inference fleet (one vLLM replica per node)" if inference else "cluster"
    say(
        f"simulated {kind}: {args.nodes} virtual nodes on "
        f"127.0.0.1:{base_port}-{base_port + args.nodes - 1}, fault {args.fault} on node {args.fault_node} "
        f"{args.fault_at:g}s after start"
    )
    return targets_file


def start_alertmanager(binary: str, args: argparse.Namespace, procs: Processes) -> str:
    """Alertmanager with the demo's route; returns its URL."""
    port = pick_port("127.0.0.1", args.alertmanager_port, DEFAULT_ALERTMANAGER_PORT)
    config = write_yaml(procs.workdir / "alertmanager.yml", alertmanager_config(args.fast))
    procs.start(
        "alertmanager",
        [
            binary,
            f"--config.file={config}",
            f"--storage.path={procs.workdir / 'alertmanager'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--cluster.listen-address=",
        ],
    )
    url = f"http://127.0.0.1:{port}"
    procs.wait_until(lambda: http_ok(f"{url}/-/ready"), READY_TIMEOUT, "Alertmanager")
    return url


def start_prometheus(
    binary: str,
    args: argparse.Namespace,
    procs: Processes,
    targets_file: Path,
    service: str,
    alertmanager_url: str | None,
    interval: float,
) -> str:
    """Prometheus scraping the nodes and the service (``host:port``) with the generated rules;
    returns its URL."""
    rules = rule_files(procs.workdir)
    if not rules:
        say("no generated rule files found (run `fleetscope generate` in a checkout); no alerts")
    port = pick_port("127.0.0.1", args.prometheus_port, DEFAULT_PROMETHEUS_PORT)
    alertmanager = alertmanager_url.split("://", 1)[1] if alertmanager_url else None
    config = write_yaml(
        procs.workdir / "prometheus.yml",
        prometheus_config(targets_file, service, rules, alertmanager, interval),
    )
    procs.start(
        "prometheus",
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={procs.workdir / 'prometheus'}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=1d",
        ],
    )
    url = f"http://127.0.0.1:{port}"
    procs.wait_until(lambda: http_ok(f"{url}/-/ready"), READY_TIMEOUT, "Prometheus")
    return url


def start_service(procs: Processes, prometheus_url: str, host: str, port: int, interval: float) -> str:
    """``fleetscope serve`` reading Prometheus, analyzing every two scrapes; returns its local URL."""
    procs.start(
        "service",
        fleetscope_argv(
            "serve",
            "--prometheus",
            prometheus_url,
            "--listen",
            f"{host}:{port}",
            "--interval",
            f"{2 * interval:g}",
            "--window",
            "900",
            "--step",
            f"{interval:g}",
        ),
    )
    url = f"http://{local_address(host)}:{port}"
    procs.wait_until(lambda: http_ok(f"{url}/healthz"), READY_TIMEOUT, "the fleetscope service")
    return url
