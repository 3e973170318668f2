"""A data-parallel vLLM pod (vLLM >= 0.10 with ``--data-parallel-size``: one API server, one
``engine`` label value per engine core) is one replica on the inference dashboards: the replica
counts count pods, the KV-cache panels draw one line per pod (its fullest engine). Run on a real
Prometheus holding a two-engine pod beside a one-engine pod and a pod-less (V0) target."""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetscope import contract as c
from tests.dashboards.test_inference_dashboards import panel_targets
from tests.support.prom import Prometheus, backfill_openmetrics

pytestmark = [pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
T = 1_790_000_000
MODEL = "llama"
#: (labels, engine -> (running, waiting, KV-cache use)); the V0 target has no engine label.
PODS = [
    ({"namespace": "serve", "pod": "dp-0", "instance": "10.0.0.5:8000", "job": "pods"}, {"0": (10, 3, 0.9), "1": (12, 4, 0.4)}),  # noqa: E501
    ({"namespace": "serve", "pod": "one-0", "instance": "10.0.0.6:8000", "job": "pods"}, {"0": (7, 1, 0.5)}),
    ({"instance": "n3:8000", "job": "vllm"}, {"": (5, 2, 0.3)}),
]  # fmt: skip


def _openmetrics() -> str:
    out = []
    for i, metric in enumerate(
        (c.VLLM_NUM_REQUESTS_RUNNING, c.VLLM_NUM_REQUESTS_WAITING, c.VLLM_KV_CACHE_USAGE)
    ):
        out.append(f"# TYPE {metric} gauge")
        for labels, engines in PODS:
            for engine, values in engines.items():
                full = {"model_name": MODEL, **labels, **({"engine": engine} if engine else {})}
                inner = ",".join(f'{k}="{v}"' for k, v in sorted(full.items()))
                out += [f"{metric}{{{inner}}} {values[i]} {t}" for t in (T - 60, T)]
    return "\n".join([*out, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    work = tmp_path_factory.mktemp("dp")
    (work / "dp.om").write_text(_openmetrics())
    backfill_openmetrics(work / "dp.om", work / "data")
    with Prometheus(work / "p", data_dir=work / "data") as p:
        yield p


def _expr(board: str, where: str, **chosen: str) -> str:
    doc = json.loads((ROOT / "dashboards" / board).read_text())
    (expr,) = [t["expr"] for w, t in panel_targets(doc) if w == where]
    out = expr.replace("$__rate_interval", "5m").replace("$__range", "10m").replace("$model", MODEL)
    for name, value in chosen.items():
        out = out.replace(f"${name}", value)
    return out


def _values(prom: Prometheus, expr: str) -> list[tuple[dict[str, str], float]]:
    return [(r["metric"], float(r["value"][1])) for r in prom.query(expr, T)]


def test_the_fleet_counts_pods_not_engines(prom: Prometheus) -> None:
    ((_, n),) = _values(prom, _expr("inference-fleet.json", "Replicas serving A"))
    assert n == 3  # four engines


def test_the_fleet_draws_one_kv_line_per_pod(prom: Prometheus) -> None:
    lines = _values(prom, _expr("inference-fleet.json", "KV-cache use per replica A"))
    got = sorted((m["instance"], v) for m, v in lines)
    assert got == [("10.0.0.5:8000", 0.9), ("10.0.0.6:8000", 0.5), ("n3:8000", 0.3)]
    assert all("engine" not in m for m, _ in lines)


def test_the_replica_dashboard_counts_the_chosen_pod_once(prom: Prometheus) -> None:
    ((_, n),) = _values(prom, _expr("inference-replica.json", "Replicas A", replica="dp-0"))
    assert n == 1
    ((_, running),) = _values(prom, _expr("inference-replica.json", "Requests running A", replica="dp-0"))
    assert running == 22  # both engines' requests
    (line,) = _values(prom, _expr("inference-replica.json", "KV-cache use A", replica="dp-0"))
    assert line[1] == 0.9 and line[0]["pod"] == "dp-0"
    ((_, n),) = _values(prom, _expr("inference-replica.json", "Replicas A", replica="(dp-0|n3:8000)"))
    assert n == 2
