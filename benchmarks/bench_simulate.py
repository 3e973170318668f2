"""What the simulator costs per simulated hour, for each family the evaluation suite uses.

    .venv/bin/python benchmarks/bench_simulate.py [--nodes 64] [--hours 1] [--family realistic]

Every family, classic included, makes its training series by driving one real ``TrainingMonitor``
per rank on a virtual clock (one semantics with the library, simulate/ranks.py); this measures what
that costs. CPU seconds (``time.process_time``) are reported
beside wall seconds, since the CPU time holds on a busy machine where the wall time does not.
"""

from __future__ import annotations

import argparse
import json
import platform
import time

from fleetscope.simulate.record import simulate
from fleetscope.simulate.spec import ScenarioSpec


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--nodes", type=int, default=64)
    ap.add_argument("--hours", type=float, default=1.0)
    ap.add_argument("--family", action="append", help="realistic, classic, ... (repeatable)")
    args = ap.parse_args()
    rows = []
    for family in args.family or ["classic", "realistic"]:
        spec = ScenarioSpec(
            name=f"bench_{family}", family=family, nodes=args.nodes, duration_s=args.hours * 3600, seed=1
        )
        wall, cpu = time.perf_counter(), time.process_time()
        simulate(spec)
        rows.append(
            {
                "family": family,
                "nodes": args.nodes,
                "hours": args.hours,
                "wall_s": round(time.perf_counter() - wall, 2),
                "cpu_s": round(time.process_time() - cpu, 2),
            }
        )
    print(json.dumps({"machine": platform.machine(), "python": platform.python_version(), "runs": rows}))


if __name__ == "__main__":
    main()
