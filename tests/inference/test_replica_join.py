"""The replica-to-GPU joins of fleetscope.queries, run on a real Prometheus (backfilled with promtool).

The recording mixes what one Prometheus sees in a real fleet: a serving pod and its GPUs (pod
attribution), a training pod's GPU on the same node, a GPU without a pod, a pod with the same name
in another namespace, a pod serving two models, and statically scraped (pod-less) replicas of
several models, one node running two of them. The joins must return exactly the serving GPUs, each
with its model, and never fail on duplicates.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope import queries as q
from tests.support.prom import Prometheus, backfill_openmetrics

pytestmark = [pytest.mark.server]

T = 1_790_000_000  # the instant every query is evaluated at
RUNNING = c.VLLM_NUM_REQUESTS_RUNNING
GPU = c.DCGM_FI_DEV_GPU_UTIL

#: (labels of a vLLM engine's series): one pod-identified replica, one pod with two engines of
#: different models, pod-less static targets: mistral on n2, qwen and gemma both on n3.
REPLICAS = [
    {
        "model_name": "llama",
        "namespace": "serve",
        "pod": "llama-0",
        "instance": "10.0.0.5:8000",
        "job": "pods",
    },
    {"model_name": "a", "namespace": "serve", "pod": "multi-0", "instance": "10.0.0.6:8000", "job": "pods"},
    {"model_name": "b", "namespace": "serve", "pod": "multi-0", "instance": "10.0.0.6:8001", "job": "pods"},
    {"model_name": "mistral", "instance": "n2:8000", "job": "vllm"},
    {"model_name": "qwen", "instance": "n3:8000", "job": "vllm"},
    {"model_name": "gemma", "instance": "n3:8001", "job": "vllm"},
]
#: (Hostname, gpu, attribution labels)
GPUS = [
    ("n1", 0, {"namespace": "serve", "pod": "llama-0"}),
    ("n1", 1, {"namespace": "serve", "pod": "llama-0"}),
    ("n1", 2, {"namespace": "ml", "pod": "train-0"}),
    ("n1", 3, {}),
    ("n2", 0, {}),
    ("n2", 1, {}),
    ("n3", 0, {}),
    ("n3", 1, {}),
    ("n4", 0, {}),
    ("n5", 0, {"namespace": "serve", "pod": "multi-0"}),
    ("n6", 0, {"namespace": "other", "pod": "llama-0"}),
]


def _line(name: str, labels: dict[str, str], value: float, t: int) -> str:
    inner = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}} {value} {t}"


def _openmetrics() -> str:
    lines = [f"# TYPE {GPU} gauge"]
    for t in (T - 60, T):
        for host, gpu, attribution in GPUS:
            lines.append(_line(GPU, {"Hostname": host, "gpu": str(gpu), "job": "dcgm", **attribution}, 50, t))
    lines.append(f"# TYPE {RUNNING} gauge")
    for t in (T - 60, T):
        lines += [_line(RUNNING, {**r, "engine": "0"}, 4, t) for r in REPLICAS]
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    work: Path = tmp_path_factory.mktemp("join")
    om = work / "fleet.om"
    om.write_text(_openmetrics())
    backfill_openmetrics(om, work / "data")
    with Prometheus(work, data_dir=work / "data") as p:
        yield p


def gpus(prom: Prometheus, expr: str) -> set[tuple[str, str, str]]:
    """(Hostname, gpu, model_name) of each series ``expr`` returns; fails on a repeated GPU."""
    result = prom.query(expr, T)
    out = {(r["metric"]["Hostname"], r["metric"]["gpu"], r["metric"]["model_name"]) for r in result}
    assert len(out) == len(result), result
    return out


LLAMA = {("n1", "0", "llama"), ("n1", "1", "llama")}
MISTRAL = {("n2", "0", "mistral"), ("n2", "1", "mistral")}


def test_the_plain_pod_join_is_wrong_here(prom: Prometheus) -> None:
    """What the join was: "" matches "", so pod-less GPUs go to pod-less replicas, and with two
    pod-less models the right side holds duplicates and Prometheus refuses the query."""
    serving = "group by (namespace, pod, model_name) ({})"
    plain = f"{GPU} * on (namespace, pod) group_left (model_name) {serving}"
    with pytest.raises(AssertionError, match="many-to-many"):
        prom.query(plain.format(RUNNING), T)
    one_podless_model = gpus(prom, plain.format(f'{RUNNING}{{model_name=~"llama|mistral"}}'))
    assert ("n4", "0", "mistral") in one_podless_model  # a GPU with no replica at all


def test_k8s_join_takes_only_the_serving_pods_gpus(prom: Prometheus) -> None:
    assert gpus(prom, q.replica_gpus_k8s(GPU)) == LLAMA
    assert gpus(prom, q.replica_gpus_k8s(GPU, serving_matchers='model_name=~"llama|mistral"')) == LLAMA
    assert gpus(prom, q.replica_gpus_k8s(GPU, serving_matchers='model_name="mistral"')) == set()


def test_a_pod_with_two_models_joins_nothing(prom: Prometheus) -> None:
    """multi-0 reports models a and b: its GPU belongs to neither (and picking a does not hand it over)."""
    assert gpus(prom, q.replica_gpus_k8s(GPU, serving_matchers='model_name="a"')) == set()
    assert gpus(prom, q.replica_gpus_k8s(GPU, serving_matchers='pod="multi-0"')) == set()


def test_host_join_takes_pod_less_replicas_nodes(prom: Prometheus) -> None:
    """n2 runs mistral alone; n3 runs qwen and gemma, so its GPUs are nobody's; pods' targets
    (10.0.0.x) are no node."""
    assert gpus(prom, q.replica_gpus_host(GPU)) == MISTRAL
    assert gpus(prom, q.replica_gpus_host(GPU, serving_matchers='model_name="qwen"')) == set()
    assert gpus(prom, q.replica_gpus_host(GPU, serving_matchers='instance=~"n2:8000"')) == MISTRAL


def test_combined_join(prom: Prometheus) -> None:
    assert gpus(prom, q.replica_gpus(GPU)) == LLAMA | MISTRAL
    assert gpus(prom, q.replica_gpus(GPU, 'Hostname="n1"')) == LLAMA
    chosen = q.replica_gpus(GPU, pod_matchers='pod=~"llama-0"', node_matchers='instance=~"llama-0"')
    assert gpus(prom, chosen) == LLAMA
    chosen = q.replica_gpus(GPU, pod_matchers='pod=~"n2:8000"', node_matchers='instance=~"n2:8000"')
    assert gpus(prom, chosen) == MISTRAL


def test_a_pod_less_replica_on_a_pod_node_leaves_the_pods_gpus_to_the_pod(prom: Prometheus) -> None:
    """mistral also served from n1 by a static target (say a hostNetwork engine): it gets n1's GPUs
    but those attributed to the serving pod llama-0, so no GPU counts for two models."""
    on_n1 = f'label_replace({RUNNING}{{model_name="mistral"}}, "instance", "n1:9000", "", "")'
    both = f'({RUNNING}{{model_name="mistral"}} or {on_n1})'
    got = gpus(prom, q.replica_gpus(GPU, source=lambda _: q.instance_hostname(both)))
    assert got == LLAMA | MISTRAL | {("n1", "2", "mistral"), ("n1", "3", "mistral")}
