"""The training PromQL builders as recording rules, checked with a real ``promtool test rules``.

Input: two ranks of one job on H100s (dense bf16 peak 989.5 TFLOP/s), counters growing at known
rates, plus an fp8 peak series and scrape labels (``job``, ``instance``, ``UUID``...) that differ
between the training and GPU series, so a wrong join either fails or picks the wrong peak.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from fleetscope import contract, queries
from tests.support.prom import promtool

PEAK = 0.9895e15
RULES = {
    "test:rank_mfu": queries.rank_mfu("5m"),
    "test:job_mfu": queries.job_mfu("5m"),
    "test:rank_tokens_per_second": queries.rank_tokens_per_second("5m"),
    "test:job_tokens_per_second": queries.job_tokens_rate("5m"),
    "test:rank_step_seconds": queries.rank_step_seconds("5m"),
    "test:rank_compute_seconds_per_step": queries.rank_compute_seconds_per_step("5m"),
}
# rank 0 at 40% MFU, 1000 tokens/s, 1 step/s; rank 1 at 30% MFU, 500 tokens/s, one step every 2 s.
RANKS = {
    "0": {"mfu": 0.4, "tokens": 1000, "steps": 1.0, "forward": 0.25, "backward": 0.5},
    "1": {"mfu": 0.3, "tokens": 500, "steps": 0.5, "forward": 0.5, "backward": 0.75},
}


def _labels(**kv: str) -> str:
    return "{" + ",".join(f'{k}="{v}"' for k, v in kv.items()) + "}"


def _rank(rank: str) -> dict[str, str]:
    return {
        "job_id": "4711",
        "rank": rank,
        "local_rank": rank,
        "Hostname": "n1",
        "gpu": rank,
        "job": "training",
        "instance": "n1:9400",
    }


def _series() -> list[dict[str, str]]:
    series = []
    for gpu in ("0", "1", "2"):
        gpu_labels = {
            "gpu": gpu,
            "UUID": f"GPU-{gpu}",
            "modelName": "NVIDIA H100 80GB HBM3",
            "Hostname": "n1",
            "job": "node",
            "instance": "n1:9400",
        }
        for dtype, peak in (("bf16", PEAK), ("fp8", 2 * PEAK)):
            name = contract.GPU_PEAK_FLOPS + _labels(**gpu_labels, dtype=dtype)
            series.append({"series": name, "values": f"{peak:.0f}x10"})
    for rank, r in RANKS.items():
        lbl = _labels(**_rank(rank))
        per_min = {
            contract.TRAINING_MODEL_FLOPS: r["mfu"] * PEAK * 60,
            contract.TRAINING_TOKENS: r["tokens"] * 60,
            contract.TRAINING_STEPS: r["steps"] * 60,
            contract.TRAINING_STEP_SECONDS: 60,  # the rank is always inside a step
        }
        for name, inc in per_min.items():
            series.append({"series": name + lbl, "values": f"0+{inc:.0f}x10"})
        for phase, share in (("forward", r["forward"]), ("backward", r["backward"]), ("data", 0.1)):
            name = contract.TRAINING_PHASE_SECONDS + _labels(**_rank(rank), phase=phase)
            series.append({"series": name, "values": f"0+{share * 60:.0f}x10"})
    return series


#: promtool compares floats exactly, and rate() carries a last-bit rounding error, so each check
#: rounds to a stated precision: 12 decimals for MFU (a ratio near 0.4), 6 for the others.
PRECISION = {name: (1e-12 if "mfu" in name else 1e-6) for name in RULES}


def _expected() -> list[dict]:
    exp: dict[str, list[dict]] = {name: [] for name in RULES}
    for rank, r in RANKS.items():
        labels = _labels(**_rank(rank))
        exp["test:rank_mfu"].append({"labels": labels, "value": r["mfu"]})
        exp["test:rank_tokens_per_second"].append({"labels": labels, "value": r["tokens"]})
        exp["test:rank_step_seconds"].append({"labels": labels, "value": 1 / r["steps"]})
        compute = (r["forward"] + r["backward"]) / r["steps"]
        exp["test:rank_compute_seconds_per_step"].append({"labels": labels, "value": compute})
    exp["test:job_mfu"] = [{"labels": '{job_id="4711"}', "value": 0.35}]
    exp["test:job_tokens_per_second"] = [{"labels": '{job_id="4711"}', "value": 1500}]
    return [
        {"expr": f"round({name}, {PRECISION[name]})", "eval_time": "10m", "exp_samples": samples}
        for name, samples in exp.items()
    ]


def test_training_queries_give_exact_values_in_promtool(tmp_path: Path) -> None:
    rules = tmp_path / "training.rules.yml"
    rules.write_text(
        yaml.safe_dump(
            {"groups": [{"name": "test", "rules": [{"record": k, "expr": v} for k, v in RULES.items()]}]},
            sort_keys=False,
        )
    )
    check = promtool("check", "rules", str(rules))
    assert check.returncode == 0, check.stdout.decode() + check.stderr.decode()
    tests = tmp_path / "training.test.yml"
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules.name],
                "evaluation_interval": "1m",
                "tests": [{"interval": "1m", "input_series": _series(), "promql_expr_test": _expected()}],
            },
            sort_keys=False,
        )
    )
    result = promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()


def test_a_rank_without_steps_has_no_step_time(tmp_path: Path) -> None:
    """``rank_step_seconds`` is absent, not NaN or +Inf, while a rank completes no step (a stall)."""
    rules = tmp_path / "r.yml"
    rules.write_text(
        yaml.safe_dump(
            {
                "groups": [
                    {
                        "name": "t",
                        "rules": [
                            {"record": "test:rank_step_seconds", "expr": queries.rank_step_seconds("5m")}
                        ],
                    }
                ]
            }
        )
    )
    tests = tmp_path / "t.yml"
    lbl = _labels(**_rank("0"))
    tests.write_text(
        yaml.safe_dump(
            {
                "rule_files": [rules.name],
                "tests": [
                    {
                        "interval": "1m",
                        "input_series": [
                            {"series": contract.TRAINING_STEPS + lbl, "values": "5x10"},
                            {"series": contract.TRAINING_STEP_SECONDS + lbl, "values": "0+60x10"},
                        ],
                        "promql_expr_test": [
                            {"expr": "test:rank_step_seconds", "eval_time": "10m", "exp_samples": []}
                        ],
                    }
                ],
            }
        )
    )
    result = promtool("test", "rules", str(tests))
    assert result.returncode == 0, result.stdout.decode() + result.stderr.decode()
