"""A stand-in training process for the collector tests: steps forever with fleetscope.telemetry.

``python -m tests.exporters.training.rank_writer DIR JOB_ID RANK STEPS_PER_SECOND`` prints ``ready`` once its
rank file exists, then keeps stepping (and rewriting the file every 0.2 s) until killed.
"""

from __future__ import annotations

import os
import sys
import time

from fleetscope.telemetry import TrainingMonitor


def main() -> None:
    directory, job_id, rank, rate = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    monitor = TrainingMonitor(job_id=job_id, rank=rank, local_rank=rank, directory=directory, interval=0.2)
    with monitor.step(tokens=10):
        pass
    monitor.flush()
    assert os.path.exists(monitor.writer.path)
    print("ready", flush=True)
    while True:
        with monitor.step(tokens=10):
            time.sleep(1.0 / rate)


if __name__ == "__main__":
    main()
