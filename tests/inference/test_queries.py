"""The inference PromQL of fleetscope.queries parses (real promtool) and reads only contract names."""

from __future__ import annotations

import subprocess
from pathlib import Path

import yaml

from fleetscope import contract as c
from fleetscope import queries as q
from tests.dashboards.promql_names import series_names

EXPRS = {
    "requests": q.model_requests_rate(),
    "errors": q.model_error_ratio(),
    "ttft_slow": q.vllm_ttft_slow_ratio(1.0),
    "itl_slow": q.vllm_itl_slow_ratio(0.1),
    "kv": q.vllm_kv_cache_usage(),
    "ttft_p99": q.histogram_quantile_by(0.99, c.VLLM_TIME_TO_FIRST_TOKEN.bucket, "5m", ("model_name",)),
    "k8s_join": q.replica_gpus_k8s(c.DCGM_FI_DEV_GPU_UTIL),
    "host_join": q.replica_gpus_host(c.DCGM_FI_DEV_POWER_USAGE),
    "join": q.replica_gpus(c.DCGM_FI_DEV_FB_USED, 'Hostname="n1"', 'pod=~"p"', 'instance=~"n1:8000"'),
}


def test_every_expression_parses(tmp_path: Path) -> None:
    rules = {
        "groups": [
            {"name": "inference", "rules": [{"record": f"x:{k}", "expr": e} for k, e in EXPRS.items()]}
        ]
    }
    path = tmp_path / "inference.rules.yml"
    path.write_text(yaml.safe_dump(rules))
    res = subprocess.run(
        ["promtool", "check", "rules", str(path)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr


def test_reads_only_contract_names() -> None:
    for where, expr in EXPRS.items():
        read = series_names(expr)
        assert read and read <= set(c.METRICS), f"{where}: {sorted(read - set(c.METRICS))}"


def test_le_matcher_takes_both_spellings() -> None:
    assert q.le_matcher(1.0) == 'le=~"1|1\\\\.0"'
    assert q.le_matcher(0.25) == 'le=~"0\\\\.25|0\\\\.25"'
