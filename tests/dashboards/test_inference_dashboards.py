"""The inference dashboards' template variables: model, replica (chained on the model) and the
datasource, used by every panel query; the variables' queries run on a real Prometheus holding pods,
pod-less targets and a pod with two models (tests/inference/test_replica_join.py's recording), and
picking a replica shows its GPUs and no other."""

from __future__ import annotations

import json
import re
import shutil
from collections.abc import Iterator
from pathlib import Path

import pytest

from fleetscope import contract as c
from fleetscope.alerts import inference, names
from tests.inference.test_replica_join import GPU, LLAMA, MISTRAL, T, _openmetrics
from tests.support.prom import Prometheus, backfill_openmetrics

pytestmark = [pytest.mark.server]

ROOT = Path(__file__).resolve().parents[2]
FLEET, REPLICA = "inference-fleet.json", "inference-replica.json"


def _board(name: str) -> dict:
    return json.loads((ROOT / "dashboards" / name).read_text())


def panel_targets(board: dict) -> list[tuple[str, dict]]:
    """("title refId", target) of every panel query, rows included."""
    out = []
    stack = list(board["panels"])
    while stack:
        panel = stack.pop()
        stack += panel.get("panels", [])
        out += [(f"{panel['title']} {t['refId']}", t) for t in panel.get("targets", [])]
    return out


def _targets(board: dict) -> list[tuple[str, str]]:
    return [(where, t["expr"]) for where, t in panel_targets(board)]


def _vars(board: dict) -> dict[str, dict]:
    return {v["name"]: v for v in board["templating"]["list"]}


@pytest.mark.parametrize(("name", "needed"), [(FLEET, ("$model",)), (REPLICA, ("$model", "$replica"))])
def test_every_panel_query_uses_the_variables(name: str, needed: tuple[str, ...]) -> None:
    targets = _targets(_board(name))
    assert len(targets) >= 15
    for where, expr in targets:
        missing = [v for v in needed if v not in expr]
        assert not missing, f"{name} {where} ignores {missing}: {expr}"


def test_variables() -> None:
    fleet, replica = _vars(_board(FLEET)), _vars(_board(REPLICA))
    assert list(fleet) == ["datasource", "model"]
    assert list(replica) == ["datasource", "model", "replica"]
    for var in (fleet["model"], replica["model"]):
        assert (var["multi"], var["includeAll"], var["allValue"]) == (True, True, ".*")
    pick = replica["replica"]
    assert pick["multi"] and not pick["includeAll"]
    assert "$model" in pick["query"], "the replica list follows the chosen model"
    # The fleet's list covers every engine: vLLM's model_name, TGI's and Triton's model.
    for metric in (c.VLLM_NUM_REQUESTS_RUNNING, c.TGI_QUEUE_SIZE, c.TRITON_PENDING_REQUEST_COUNT):
        assert metric in fleet["model"]["query"]


def _recorded(raw: Prometheus) -> str:
    """The recording rule the dashboards join hosts on, evaluated by Prometheus at the recording's
    two instants, as OpenMetrics (backfilled data is never evaluated by rules on its own)."""
    name = names.INFERENCE_REPLICA_NODE
    lines = [f"# TYPE {name} gauge"]
    for t in (T - 60, T):
        for series in raw.query(inference.replica_node(), t):
            labels = ",".join(f'{k}="{v}"' for k, v in sorted(series["metric"].items()))
            lines.append(f"{name}{{{labels}}} {series['value'][1]} {t}")
    return "\n".join([*lines, "# EOF"]) + "\n"


@pytest.fixture(scope="module")
def prom(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Prometheus]:
    work = tmp_path_factory.mktemp("vars")
    data = work / "data"
    (work / "fleet.om").write_text(_openmetrics())
    backfill_openmetrics(work / "fleet.om", data)
    with Prometheus(work / "raw", data_dir=data) as raw:
        (work / "rules.om").write_text(_recorded(raw))
    backfill_openmetrics(work / "rules.om", work / "rule-blocks")
    for block in (work / "rule-blocks").iterdir():
        shutil.move(str(block), data / block.name)
    with Prometheus(work / "full", data_dir=data) as full:
        assert full.query(names.INFERENCE_REPLICA_NODE, T), "the recorded series were not loaded"
        yield full


def _fill(expr: str, **values: str) -> str:
    out = expr.replace("$__rate_interval", "5m").replace("$__range", "10m")
    for name, value in values.items():
        out = out.replace(f"${name}", value)
    return out


def values(prom: Prometheus, var: dict, **chosen: str) -> set[str]:
    """What Grafana lists: the variable's query_result lines as Grafana writes them, through its regex."""
    expr = _fill(var["query"].removeprefix("query_result(").removesuffix(")"), **chosen)
    regex = re.compile(var["regex"].strip("/"))
    out = set()
    for series in prom.query(expr, T):
        labels = ", ".join(f'{k}="{v}"' for k, v in series["metric"].items())
        match = regex.search(f"{{{labels}}} {series['value'][1]} {int(T * 1000)}")
        assert match, f"{var['name']}: regex {var['regex']} misses {series}"
        out.add(match.group(1))
    return out


def test_model_variable_lists_every_model(prom: Prometheus) -> None:
    assert values(prom, _vars(_board(FLEET))["model"]) == {"llama", "a", "b", "mistral", "qwen", "gemma"}


def test_replica_variable_is_the_pod_else_the_target(prom: Prometheus) -> None:
    var = _vars(_board(REPLICA))["replica"]
    assert values(prom, var, model=".*") == {"llama-0", "multi-0", "n2:8000", "n3:8000", "n3:8001"}
    assert values(prom, var, model="llama") == {"llama-0"}
    assert values(prom, var, model="(mistral|qwen)") == {"n2:8000", "n3:8000"}


@pytest.mark.parametrize(("replica", "want"), [("llama-0", LLAMA), ("n2:8000", MISTRAL), ("n3:8000", set())])
def test_picking_a_replica_shows_its_gpus(prom: Prometheus, replica: str, want: set) -> None:
    """The "GPU utilisation" panel of the drill-down: a pod's GPUs, a target's node's GPUs, and none
    for a node whose two replicas serve different models (its GPUs cannot be told apart)."""
    (expr,) = [e for where, e in _targets(_board(REPLICA)) if where == "GPU utilisation A"]
    assert GPU in expr
    result = prom.query(_fill(expr, model=".*", replica=replica), T)
    got = {(r["metric"]["Hostname"], r["metric"]["gpu"], r["metric"]["model_name"]) for r in result}
    assert got == want


@pytest.mark.parametrize(
    ("model", "want"), [(".*", {"llama", "mistral"}), ("llama", {"llama"}), ("qwen", set())]
)
def test_the_fleet_filters_per_model(prom: Prometheus, model: str, want: set[str]) -> None:
    """The fleet's "GPU utilisation of serving GPUs": one line per model with GPUs it alone holds."""
    (expr,) = [e for where, e in _targets(_board(FLEET)) if where == "GPU utilisation of serving GPUs A"]
    result = prom.query(_fill(expr, model=model), T)
    assert {r["metric"]["model_name"] for r in result} == want
