"""Overhead of fleetscope.telemetry on the training thread, and proof that the thread does no I/O.

    .venv/bin/python benchmarks/bench_telemetry.py [--steps 200000] [--interval 0.1]

What one "step" costs here: ``with monitor.step(tokens=...) as s`` around four
``with monitor.phase(...)`` blocks and ``s.loss = ...``, with empty bodies, while the writer thread
rewrites the rank file every ``--interval`` seconds (0.1 s: 50x more often than the default 5 s,
so the writer competes for the GIL as much as it ever would). Each step is timed with
``perf_counter_ns``; the same loop with the telemetry removed gives the baseline that is
subtracted.

No I/O on the training thread, two independent ways:

1. ``/proc/self/task/<tid>/io`` of the training thread (read by the main thread before and after):
   its ``syscr``/``syscw`` (read- and write-family system calls) and ``rchar``/``wchar`` must not
   move, while the writer thread's do (so the counters are shown to work).
2. A ``sys.audit`` hook records every ``open``, ``os.*``, ``shutil.*`` and ``socket.*`` event with the
   thread that raised it: none may come from the training thread.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from fleetscope.telemetry import TrainingMonitor

PHASES = ("data", "forward", "backward", "optimizer")


def task_io(tid: int) -> dict[str, int]:
    with open(f"/proc/self/task/{tid}/io") as f:
        return {k: int(v) for k, v in (line.split(": ") for line in f)}


def percentile(sorted_ns: list[int], q: float) -> float:
    return sorted_ns[min(len(sorted_ns) - 1, int(q * len(sorted_ns)))] / 1000.0


def run_loop(steps: int, monitor: TrainingMonitor | None) -> tuple[list[int], int]:
    """Run the step loop on a new thread; return per-step ns and that thread's native id."""
    out: list[int] = [0] * steps
    ready, go, done, leave = threading.Event(), threading.Event(), threading.Event(), threading.Event()
    tid: list[int] = []

    def body() -> None:
        tid.append(threading.get_native_id())
        ready.set()
        go.wait()
        try:
            loop()
        finally:
            done.set()
            leave.wait()  # stay alive until the main thread has read this thread's I/O counters

    def loop() -> None:
        clock = time.perf_counter_ns
        if monitor is None:
            for i in range(steps):
                t0 = clock()
                out[i] = clock() - t0
            return
        step, phase = monitor.step, monitor.phase
        for i in range(steps):
            t0 = clock()
            with step(tokens=4096) as s:
                with phase("data"):
                    pass
                with phase("forward"):
                    pass
                with phase("backward"):
                    pass
                with phase("optimizer"):
                    pass
                s.loss = 2.5
            out[i] = clock() - t0

    t = threading.Thread(target=body, name="training")
    t.start()
    ready.wait()
    run_loop.io_before = task_io(tid[0])  # type: ignore[attr-defined]
    go.set()
    done.wait()
    run_loop.io_after = task_io(tid[0])  # type: ignore[attr-defined]
    leave.set()
    t.join()
    return out, tid[0]


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--steps", type=int, default=200_000)
    p.add_argument("--interval", type=float, default=0.1)
    p.add_argument("--json", action="store_true", help="print the results as JSON")
    args = p.parse_args()

    events: list[tuple[int, str]] = []
    watching = threading.Event()

    def audit(event: str, _args: tuple) -> None:
        if watching.is_set() and event.split(".")[0] in ("open", "os", "shutil", "socket"):
            events.append((threading.get_native_id(), event))

    sys.addaudithook(audit)

    base_ns, _ = run_loop(args.steps, None)
    with tempfile.TemporaryDirectory() as d:
        monitor = TrainingMonitor(
            job_id="bench", rank=0, directory=d, interval=args.interval, flops_per_token=1e9
        )
        while monitor.writer.writes == 0:
            time.sleep(0.01)
        writer_tid = monitor.writer._thread.native_id  # type: ignore[union-attr]
        writer_before = task_io(writer_tid)
        writes_before = monitor.writer.writes
        watching.set()
        start = time.perf_counter()
        step_ns, train_tid = run_loop(args.steps, monitor)
        wall = time.perf_counter() - start
        watching.clear()
        writer_after = task_io(writer_tid)
        writes = monitor.writer.writes - writes_before
        # What one write costs the writer thread (render + write + rename), i.e. how long it may
        # hold the GIL (minus the system calls, which release it) once per interval.
        w0 = time.perf_counter()
        for _ in range(200):
            monitor.writer.write_now()
        write_us = (time.perf_counter() - w0) / 200 * 1e6
        monitor.close()
    io_before, io_after = run_loop.io_before, run_loop.io_after  # type: ignore[attr-defined]

    base_ns.sort()
    step_ns.sort()
    keys = ("syscr", "syscw", "rchar", "wchar")
    result = {
        "machine": f"{os.cpu_count()}-core {platform.machine()}, Python {platform.python_version()}",
        "steps": args.steps,
        "writer_interval_s": args.interval,
        "writer_writes_during_run": writes,
        "run_seconds": round(wall, 3),
        "writer_us_per_write": round(write_us, 1),
        "step_us": {
            q: round(percentile(step_ns, v), 3) for q, v in (("p50", 0.5), ("p99", 0.99), ("p99.9", 0.999))
        },
        "step_us_mean": round(statistics.fmean(step_ns) / 1000, 3),
        "step_us_max": round(step_ns[-1] / 1000, 1),
        "baseline_us": {q: round(percentile(base_ns, v), 3) for q, v in (("p50", 0.5), ("p99", 0.99))},
        "training_thread_io_delta": {k: io_after[k] - io_before[k] for k in keys},
        "writer_thread_io_delta": {k: writer_after[k] - writer_before[k] for k in keys},
        "audit_events_training_thread": sorted({e for tid, e in events if tid == train_tid}),
        "audit_events_other_threads": sorted({e for tid, e in events if tid != train_tid}),
    }
    result["overhead_us"] = {
        q: round(result["step_us"][q] - result["baseline_us"][q], 3) for q in ("p50", "p99")
    }
    ok = (
        result["overhead_us"]["p99"] <= 20.0
        and all(v == 0 for v in result["training_thread_io_delta"].values())
        and not result["audit_events_training_thread"]
        and (writes == 0 or result["writer_thread_io_delta"]["syscw"] > 0)  # the counters do count
    )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        for k, v in result.items():
            print(f"{k:32s} {v}")
        print("PASS" if ok else "FAIL", "(p99 overhead <= 20 us, no I/O on the training thread)")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
