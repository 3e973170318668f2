"""``fleetscope simulate``: a virtual training cluster, recorded to a file or served live.

Recorded (default): writes an OpenMetrics file with a timestamp on every sample (gzip when the name
ends in .gz; backfills with ``promtool tsdb create-blocks-from openmetrics``) and a ground-truth
JSON of the injected faults next to it.

Live (``--live``): serves each virtual node's /metrics on ``--base-port + i`` in real time (times
``--speed``) and writes a Prometheus file_sd JSON of the targets to ``--targets-file``.
"""

from __future__ import annotations

import argparse
import sys
import time

from fleetscope import defaults
from fleetscope.times import parse_duration


def add_arguments(p: argparse.ArgumentParser) -> None:
    from fleetscope.simulate.spec import FAULT_KINDS

    p.formatter_class = argparse.RawDescriptionHelpFormatter
    p.epilog = (
        "examples:\n"
        "  fleetscope simulate --nodes 16 --duration 2h --fault thermal_throttle --fault-at 20m"
        " -o run.om.gz\n"
        "  fleetscope simulate --scenario tests/fixtures/scenarios/gpu_lost_8n.json -o run.om\n"
        "  fleetscope simulate --live --nodes 4 --base-port 9500 --fault gpu_lost --fault-at 90 \\\n"
        "      --fault-node 1 --seed 1 --targets-file /tmp/targets.json\n"
    )
    p.add_argument("-o", "--output", help="recorded mode: the OpenMetrics file to write (.gz to compress)")
    p.add_argument("--truth", help="ground-truth JSON path (default: OUTPUT with .truth.json)")
    p.add_argument("--scenario", help="a scenario spec (JSON or YAML); flags below override nothing in it")
    p.add_argument("--nodes", type=int, default=4, help="nodes in the job (default 4)")
    p.add_argument("--gpus-per-node", type=int, default=8, help="GPUs (= ranks) per node (default 8)")
    p.add_argument("--efa-per-node", type=int, default=4, help="EFA devices per node (default 4)")
    p.add_argument("--duration", default="30m", help="recorded length, e.g. 1800, 30m, 2h (default 30m)")
    p.add_argument("--step", type=float, default=15.0, help="seconds between samples (default 15)")
    p.add_argument("--seed", type=int, default=1, help="random seed (default 1)")
    p.add_argument("--start", help="start time, RFC 3339 (default 2026-11-30T10:00:00Z)")
    p.add_argument("--job-id", default="4711", help="the training job's job_id label")
    p.add_argument(
        "--fault", choices=FAULT_KINDS, default="healthy", help="fault to inject (default healthy)"
    )
    p.add_argument(
        "--fault-at", default="10m", help="fault onset after the start, e.g. 90, 10m (default 10m)"
    )
    p.add_argument("--fault-duration", help="how long the fault lasts (default: to the end)")
    p.add_argument("--fault-node", type=int, default=1, help="index of the faulty node (default 1)")
    p.add_argument("--fault-gpu", type=int, default=3, help="index of the faulty GPU on it (default 3)")
    p.add_argument("--slowdown", type=float, default=0.2, help="fail-slow magnitude, fraction (default 0.2)")
    p.add_argument(
        "--restart",
        choices=["shrink", "replace"],
        default="shrink",
        help="fail-stop: restart without the node (shrink) or with a spare (replace)",
    )
    p.add_argument("--live", action="store_true", help="serve live /metrics per virtual node instead")
    p.add_argument("--listen", default="127.0.0.1", help="live: address to listen on (default 127.0.0.1)")
    p.add_argument(
        "--base-port",
        type=int,
        default=defaults.SIMULATOR_BASE_PORT,
        help=f"live: node i listens on base-port + i (default {defaults.SIMULATOR_BASE_PORT})",
    )
    p.add_argument(
        "--speed",
        type=float,
        default=1.0,
        help="live: scenario seconds per real second (faults come sooner; rates stay real)",
    )
    p.add_argument("--targets-file", help="live: write a Prometheus file_sd JSON of the targets here")
    p.add_argument("--run-for", help="live: stop after this long (default: until interrupted)")


def spec_from_args(args: argparse.Namespace):
    from fleetscope.errors import FleetscopeError
    from fleetscope.simulate.spec import DEFAULT_START, FaultSpec, ScenarioSpec
    from fleetscope.times import parse_rfc3339

    if args.scenario:
        return ScenarioSpec.load(args.scenario)
    faults = []
    if args.fault != "healthy":
        dur = parse_duration(args.fault_duration) if args.fault_duration else None
        faults.append(
            FaultSpec(
                kind=args.fault,
                at_s=parse_duration(args.fault_at),
                duration_s=dur,
                node=args.fault_node,
                gpu=args.fault_gpu,
                slowdown=args.slowdown,
                restart=args.restart,
            )
        )
    try:
        start = parse_rfc3339(args.start) if args.start else DEFAULT_START
    except ValueError:
        raise FleetscopeError(f"--start must be RFC 3339, not {args.start!r}") from None
    return ScenarioSpec(
        name="cli",
        nodes=args.nodes,
        gpus_per_node=args.gpus_per_node,
        efa_per_node=args.efa_per_node,
        duration_s=parse_duration(args.duration),
        step_s=args.step,
        seed=args.seed,
        start=start,
        job_id=args.job_id,
        faults=faults,
    )


def run(args: argparse.Namespace) -> int:
    from fleetscope.errors import FleetscopeError

    spec = spec_from_args(args)
    if args.live:
        from fleetscope.simulate.live import LiveCluster

        cluster = LiveCluster(
            spec, host=args.listen, base_port=args.base_port, speed=args.speed, targets_file=args.targets_file
        ).start()
        print(
            f"serving {spec.nodes} virtual nodes: {', '.join(cluster.targets)}", file=sys.stderr, flush=True
        )
        try:
            limit = parse_duration(args.run_for) if args.run_for else None
            t0 = time.monotonic()
            while limit is None or time.monotonic() - t0 < limit:
                time.sleep(0.5)
        finally:
            cluster.stop()
        return 0
    if not args.output:
        raise FleetscopeError("give -o/--output FILE for a recording, or --live to serve /metrics")
    from fleetscope.simulate.record import write_scenario

    out, truth = write_scenario(spec, args.output, args.truth)
    print(f"wrote {out} and {truth}", file=sys.stderr)
    return 0
