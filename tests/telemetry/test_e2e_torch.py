"""Two real PyTorch DDP ranks (gloo, CPU) -> rank files -> exporter -> real Prometheus -> PromQL.

The exporter also runs the GPU collector on recorded H100 answers, so MFU joins real
``fleetscope_gpu_peak_flops`` series on ``(Hostname, gpu)``, exactly as on a GPU node.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fleetscope import contract, queries
from tests.support.exporter import ExporterProcess
from tests.support.exposition import matching
from tests.support.prom import Prometheus, free_port, wait_for

pytestmark = [pytest.mark.torch, pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
NODE = "e2e-node"
JOB = "e2e-4711"
H100_BF16 = 0.9895e15
BATCH, SEQ = 4, 16
# examples/train_pytorch.py's default model, by hand: per encoder layer in_proj 3·32·32+96,
# out_proj 32·32+32, MLP 128·32+128 and 32·128+32, two norms 4·32 -> 12,704; two layers plus the
# 32->128 head (4,224) -> N = 29,632. 6N + 12·L·H·Q·T = 177,792 + 12·2·2·16·16 = 190,080.
FLOPS_PER_TOKEN = 190_080.0


def _rank(rank: int, directory: Path, summaries: Path, stop: Path, port: int) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(ROOT),
        "FLEETSCOPE_JOB_ID": JOB,
        "FLEETSCOPE_TRAINING_DIR": str(directory),
        "FLEETSCOPE_TELEMETRY_INTERVAL": "0.5",
        "RANK": str(rank),
        "LOCAL_RANK": str(rank),
        "WORLD_SIZE": "2",
        "MASTER_ADDR": "127.0.0.1",
        "MASTER_PORT": str(port),
        "OMP_NUM_THREADS": "1",
    }
    env.pop("CUDA_VISIBLE_DEVICES", None)
    args = [
        "--steps",
        "100000",
        "--data-wait",
        "0.04",
        "--stop-file",
        str(stop),
        "--summary-dir",
        str(summaries),
    ]
    return subprocess.Popen(
        [sys.executable, str(ROOT / "examples" / "train_pytorch.py"), *args],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )


@pytest.mark.slow
def test_two_ranks_step_time_tokens_and_mfu_through_promql(tmp_path: Path) -> None:
    directory, summaries, stop = tmp_path / "training", tmp_path / "summaries", tmp_path / "stop"
    directory.mkdir()
    exporter = ExporterProcess(
        "--collector.disable-defaults",
        "--collector.training",
        f"--collector.training.directory={directory}",
        "--collector.gpu",
        f"--collector.gpu.nvml-replay={ROOT / 'tests/fixtures/nvml/h100x8.json'}",
        f"--node.name={NODE}",
        log_dir=tmp_path,
    ).start()
    scrape = [{"job_name": "node", "static_configs": [{"targets": [exporter.url.split("//")[1]]}]}]
    port = free_port()
    ranks = [_rank(r, directory, summaries, stop, port) for r in (0, 1)]
    try:
        with Prometheus(tmp_path / "prom", scrape_configs=scrape) as prom:
            # Wait for at least 6 s of scraped history on both ranks.
            prom.wait_until(f"count_over_time({contract.TRAINING_STEPS}[10s]) >= 6", timeout=90, min_series=2)
            t = time.time() - 1
            step = {
                r["metric"]["rank"]: float(r["value"][1])
                for r in prom.query(queries.rank_step_seconds("5s"), t)
            }
            tps = {
                r["metric"]["rank"]: float(r["value"][1])
                for r in prom.query(queries.rank_tokens_per_second("5s"), t)
            }
            steps_per_s = {
                r["metric"]["rank"]: float(r["value"][1])
                for r in prom.query(f"rate({contract.TRAINING_STEPS}[5s])", t)
            }
            mfu_rows = prom.query(queries.rank_mfu("5s"), t)
            mfu = {r["metric"]["rank"]: float(r["value"][1]) for r in mfu_rows}
            job_mfu = prom.query(queries.job_mfu("5s"), t)
            ratio = prom.query(f"{contract.TRAINING_TOKENS} / {contract.TRAINING_STEPS}", t)
            info = prom.query(contract.TRAINING_INFO.name, t)
            stop.touch()
            for p in ranks:
                p.wait(timeout=60)
        outputs = [p.stdout.read().decode(errors="replace") if p.stdout else "" for p in ranks]
        assert all(p.returncode == 0 for p in ranks), outputs
        truth = {str(r): json.loads((summaries / f"rank{r}.json").read_text()) for r in (0, 1)}
        # After a clean exit the ranks' files are gone and the exporter serves no training series.
        wait_for(
            lambda: not matching(exporter.metrics(), contract.TRAINING_STEPS),
            timeout=10,
            what="ranks dropped",
        )
    finally:
        stop.touch()
        for p in ranks:
            if p.poll() is None:
                p.kill()
        exporter.stop()

    assert set(step) == set(tps) == set(mfu) == {"0", "1"}
    for rank, t_rank in truth.items():
        assert t_rank["job_id"] == JOB and t_rank["gpu"] == rank
        assert t_rank["flops_per_token"] == FLOPS_PER_TOKEN
        true_step = t_rank["step_seconds"] / t_rank["steps"]
        true_tps = t_rank["tokens"] / t_rank["step_seconds"]
        # Rates come from 1 s scrapes of files rewritten every 0.5 s: a few percent of noise.
        assert step[rank] == pytest.approx(true_step, rel=0.25), (rank, step[rank], true_step)
        # Tokens per *wall* second over the last 5 s against tokens per second *inside* steps over
        # the whole run: never above it (beyond noise), and below it by the time the rank spends
        # between steps, which a loaded machine stretches (0.68 of it seen on 2 busy cores). What
        # is exact is the tokens each step counted: the two rates' ratio is the batch's tokens.
        assert true_tps / 4 < tps[rank] <= true_tps * 1.25, (rank, tps[rank], true_tps)
        assert tps[rank] / steps_per_s[rank] == pytest.approx(BATCH * SEQ, rel=1e-9)
        # MFU is exactly tokens/s x FLOPs per token / the H100's dense bf16 peak, per rank.
        assert mfu[rank] == pytest.approx(tps[rank] * FLOPS_PER_TOKEN / H100_BF16, rel=1e-9)
    assert {r["metric"][contract.NODE_LABEL] for r in mfu_rows} == {NODE}
    assert {r["metric"]["gpu"] for r in mfu_rows} == {"0", "1"}
    assert len(job_mfu) == 1 and job_mfu[0]["metric"] == {"job_id": JOB}
    assert float(job_mfu[0]["value"][1]) == pytest.approx(
        (tps["0"] + tps["1"]) * FLOPS_PER_TOKEN / (2 * H100_BF16), rel=1e-9
    )
    assert {float(r["value"][1]) for r in ratio} == {BATCH * SEQ}
    assert {r["metric"]["flops_convention"] for r in info} == {"palm"}
