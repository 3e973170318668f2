"""The Helm chart, rendered offline for real (helm-python-sdk), with default values and with each
example values file.

Built-in kinds are validated with ``kubernetes-validate --strict`` (unknown fields are errors) for
Kubernetes 1.29 to 1.33. kubernetes-validate has no schemas for the Prometheus operator's CRDs, so
ServiceMonitor and PrometheusRule are validated against structural schemas in tests/deploy/schemas/
(also strict: no unknown fields), and the PrometheusRules' groups must equal the generated rule
files exactly.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import helm_python as helm
import jsonschema
import kubernetes_validate
import pytest
import yaml

from fleetscope import contract
from fleetscope.cli import build_parser
from fleetscope.service.shard import Shard, parse_shard
from tests.deploy.conftest import ROOT
from tests.deploy.helm import CHART, EXAMPLES, by_kind, load_values, render

KUBE_VERSIONS = ["1.29.0", "1.30.0", "1.31.0", "1.32.0", "1.33.0"]
CRD_SCHEMAS = {
    "PrometheusRule": json.loads(
        (Path(__file__).parent / "schemas/prometheusrule-monitoring-v1.json").read_text()
    ),
    "ServiceMonitor": json.loads(
        (Path(__file__).parent / "schemas/servicemonitor-monitoring-v1.json").read_text()
    ),
}
VALUES_FILES = {"default": None, **{p.stem: p for p in EXAMPLES}}
DASHBOARD_UIDS = {
    "fleetscope-cluster",
    "fleetscope-gpu-node",
    "fleetscope-efa",
    "fleetscope-fsx",
    "fleetscope-training",
}


@pytest.fixture(scope="module")
def rendered() -> dict[str, list[dict]]:
    return {name: render(load_values(path)) for name, path in VALUES_FILES.items()}


def test_examples_exist() -> None:
    assert {p.stem for p in EXAMPLES} >= {"kube-prometheus-stack", "gpu-node-pool"}


def test_helm_lint_strict_passes() -> None:
    for name, path in VALUES_FILES.items():
        report = helm.lint(CHART, load_values(path), strict=True, kube_version="v1.33.0")
        problems = [m for m in report["messages"] if m["severity"] >= 2] + report["errors"]
        assert not problems, f"{name}: {problems}"


@pytest.mark.parametrize("values", VALUES_FILES)
def test_every_object_validates_strictly(rendered: dict[str, list[dict]], values: str) -> None:
    objects = rendered[values]
    assert objects
    for obj in objects:
        where = f"{values}: {obj['kind']}/{obj['metadata']['name']}"
        if obj["kind"] in CRD_SCHEMAS:
            jsonschema.validate(obj, CRD_SCHEMAS[obj["kind"]])
            continue
        for version in KUBE_VERSIONS:
            try:
                kubernetes_validate.validate(obj, version, strict=True)
            except kubernetes_validate.ValidationError as exc:
                pytest.fail(
                    f"{where} invalid for Kubernetes {version}: {'.'.join(map(str, exc.path))}: {exc.message}"
                )


def test_default_values_need_no_crds(rendered: dict[str, list[dict]]) -> None:
    kinds = {o["kind"] for o in rendered["default"]}
    assert kinds == {"ServiceAccount", "DaemonSet", "StatefulSet", "Service", "ConfigMap"}


def test_kube_prometheus_stack_example_selects_by_release_label(rendered: dict[str, list[dict]]) -> None:
    objects = rendered["kube-prometheus-stack"]
    monitors = by_kind(objects, "ServiceMonitor")
    rules = by_kind(objects, "PrometheusRule")
    assert {m["metadata"]["name"] for m in monitors} == {"fs-fleetscope-exporter", "fs-fleetscope-service"}
    assert rules
    for obj in monitors + rules:
        assert obj["metadata"]["labels"]["release"] == "kube-prometheus-stack"
    services = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}
    for monitor in monitors:
        selected = [
            s
            for s in services.values()
            if monitor["spec"]["selector"]["matchLabels"].items() <= s["metadata"]["labels"].items()
        ]
        assert len(selected) == 1, monitor["metadata"]["name"]
        port_names = {p["name"] for p in selected[0]["spec"]["ports"]}
        assert monitor["spec"]["endpoints"][0]["port"] in port_names


def generated_rule_files() -> dict[str, dict]:
    files = sorted((ROOT / "alerts").glob("*.rules.yml"))
    assert files, "no generated rule files in alerts/ (run fleetscope generate)"
    return {f.name: yaml.safe_load(f.read_text()) for f in files}


def test_prometheus_rules_are_exactly_the_generated_rule_files(rendered: dict[str, list[dict]]) -> None:
    generated = generated_rule_files()
    rules = by_kind(rendered["kube-prometheus-stack"], "PrometheusRule")
    from_chart = {r["metadata"]["annotations"]["fleetscope.io/generated-from"]: r["spec"] for r in rules}
    assert set(from_chart) == set(generated)
    for name, spec in from_chart.items():
        assert spec == {"groups": generated[name]["groups"]}, name
    # the chart's copies (written by fleetscope generate) are not stale
    for name in generated:
        assert (CHART / "files" / "rules" / name).read_text() == (ROOT / "alerts" / name).read_text()


def test_runbook_base_url_value_rebases_every_runbook_url() -> None:
    """Issue 33: air-gapped clusters point the alerts' runbook links at their own service."""
    from fleetscope.alerts.config import THRESHOLDS

    base = "https://fleetscope.example.internal/runbooks"
    rules = by_kind(
        render({"prometheusRule": {"enabled": True, "runbookBaseUrl": base + "/"}}), "PrometheusRule"
    )
    generated = generated_rule_files()
    urls = []
    for r in rules:
        want = generated[r["metadata"]["annotations"]["fleetscope.io/generated-from"]]["groups"]
        for got_group, want_group in zip(r["spec"]["groups"], want, strict=True):
            for got, rule in zip(got_group["rules"], want_group["rules"], strict=True):
                if "alert" in rule:
                    url = rule["annotations"]["runbook_url"]
                    assert url.startswith(THRESHOLDS.runbook_url_base + "#"), url
                    assert got["annotations"]["runbook_url"] == base + url.removeprefix(
                        THRESHOLDS.runbook_url_base
                    )
                    urls.append(url)
                    got, rule = dict(got), dict(rule)
                    got["annotations"] = rule["annotations"] = {}
                assert got == rule  # nothing else changed
    assert len(urls) > 50


def test_dashboards_are_configmaps_for_the_grafana_sidecar(rendered: dict[str, list[dict]]) -> None:
    maps = by_kind(rendered["default"], "ConfigMap")
    generated = {p.name: json.loads(p.read_text()) for p in sorted((ROOT / "dashboards").glob("*.json"))}
    assert generated, "no generated dashboards in dashboards/ (run fleetscope generate)"
    uids = set()
    seen = {}
    for cm in maps:
        assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
        assert cm["metadata"]["annotations"]["k8s-sidecar-target-directory"] == "fleetscope"
        ((key, text),) = cm["data"].items()
        seen[key] = json.loads(text)
        uids.add(seen[key]["uid"])
        assert len(text.encode()) < 1024 * 1024
    assert seen == generated
    assert uids >= DASHBOARD_UIDS


def test_exporter_daemonset_runs_on_gpu_nodes_with_read_only_host_mounts(
    rendered: dict[str, list[dict]],
) -> None:
    for values in VALUES_FILES:
        (ds,) = by_kind(rendered[values], "DaemonSet")
        pod = ds["spec"]["template"]["spec"]
        assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
        (container,) = pod["containers"]
        env = {e["name"]: e for e in container["env"]}
        assert env["NODE_NAME"]["valueFrom"]["fieldRef"]["fieldPath"] == "spec.nodeName"
        assert "--node.name=$(NODE_NAME)" in container["args"]
        host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"]}
        assert host_paths["sys"] == "/sys" and host_paths["proc"] == "/proc"
        assert host_paths["kmsg"] == "/dev/kmsg"
        assert host_paths["pod-resources"] == "/var/lib/kubelet/pod-resources"
        assert "training" in host_paths
        # Lustre 2.12+ client stats live in debugfs: mounted and passed to the exporter, which runs
        # as root (debugfs is root's 0700 directory) with no capability added for it.
        assert host_paths["debugfs"] == "/sys/kernel/debug"
        mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
        assert f"--path.debugfs={mounts['debugfs']}" in container["args"]
        assert pod["securityContext"]["runAsUser"] == 0
        assert container["securityContext"]["capabilities"]["add"] == ["SYSLOG"]
        for mount in container["volumeMounts"]:
            assert mount["readOnly"] is True, mount
        security = container["securityContext"]
        assert security["readOnlyRootFilesystem"] is True
        assert security["allowPrivilegeEscalation"] is False
        assert security["capabilities"]["drop"] == ["ALL"]
        assert container["resources"]["requests"]["cpu"] and container["resources"]["limits"]["memory"]


def test_service_deployment_is_non_root_with_probes(rendered: dict[str, list[dict]]) -> None:
    (deploy,) = by_kind(rendered["default"], "StatefulSet")
    pod = deploy["spec"]["template"]["spec"]
    assert pod["securityContext"]["runAsNonRoot"] is True
    (container,) = pod["containers"]
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["securityContext"]["readOnlyRootFilesystem"] is True
    assert container["resources"]["requests"]


@pytest.mark.parametrize("values", VALUES_FILES)
def test_replicas_shard_the_service(values: str) -> None:
    """``replicas`` is the only knob: N > 1 pods of the StatefulSet each take shard K of N (their
    ordinal), and every object still validates strictly."""
    base = load_values(VALUES_FILES[values]) or {}
    for n in (1, 4, 25):
        objects = render({**base, "service": {**base.get("service", {}), "replicas": n}})
        for obj in objects:
            if obj["kind"] not in CRD_SCHEMAS:
                for version in (KUBE_VERSIONS[0], KUBE_VERSIONS[-1]):
                    kubernetes_validate.validate(obj, version, strict=True)
        (sts,) = by_kind(objects, "StatefulSet")
        assert sts["spec"]["replicas"] == n and sts["spec"]["podManagementPolicy"] == "Parallel"
        headless = {s["metadata"]["name"]: s for s in by_kind(objects, "Service")}[sts["spec"]["serviceName"]]
        assert headless["spec"]["clusterIP"] == "None"
        assert headless["spec"]["selector"].items() <= sts["spec"]["template"]["metadata"]["labels"].items()
        (container,) = sts["spec"]["template"]["spec"]["containers"]
        env = {e["name"]: e.get("value") for e in container.get("env", [])}
        args = _parse(container["args"])
        if n == 1:
            assert args.shard is None and "FLEETSCOPE_SHARDS" not in env
        else:
            assert args.shard == "auto" and env["FLEETSCOPE_SHARDS"] == str(n)
            # What pods 3 and N-1 of the StatefulSet run: shards 3 and N-1 of N.
            for k in (3, n - 1):
                pod = f"{sts['metadata']['name']}-{k}"
                assert parse_shard(args.shard, env["FLEETSCOPE_SHARDS"], hostname=pod) == Shard(k, n)


def test_the_100k_gpu_example_runs_25_shards(rendered: dict[str, list[dict]]) -> None:
    """charts/fleetscope/examples/fleet-100k-gpus.yaml (docs/large-fleets.md): 25 pods, each
    analyzing shard K of 25 of 12,500 nodes at a 30 s step, with the memory a bounded shard needs."""
    (sts,) = by_kind(rendered["fleet-100k-gpus"], "StatefulSet")
    assert sts["spec"]["replicas"] == 25
    (container,) = sts["spec"]["template"]["spec"]["containers"]
    args = _parse(container["args"])
    env = {e["name"]: e.get("value") for e in container.get("env", [])}
    assert args.shard == "auto" and env["FLEETSCOPE_SHARDS"] == "25" and args.step == 30
    shards = {parse_shard("auto", "25", hostname=f"{sts['metadata']['name']}-{k}") for k in range(25)}
    assert shards == {Shard(k, 25) for k in range(25)}
    assert container["resources"]["limits"]["memory"] == "3Gi"


def _parse(argv: list[str]) -> argparse.Namespace:
    return build_parser(argv).parse_args(argv)


def test_rendered_command_lines_are_accepted_by_fleetscope(rendered: dict[str, list[dict]]) -> None:
    """Every flag the chart passes exists: the real CLI parser accepts the rendered args."""
    for values in VALUES_FILES:
        objects = rendered[values]
        (ds,) = by_kind(objects, "DaemonSet")
        exporter_args = [
            a.replace("$(NODE_NAME)", "node-1")
            for a in ds["spec"]["template"]["spec"]["containers"][0]["args"]
        ]
        args = _parse(exporter_args)
        assert args.node_name == "node-1" and args.node_label == contract.NODE_LABEL
        (deploy,) = by_kind(objects, "StatefulSet")
        service_args = deploy["spec"]["template"]["spec"]["containers"][0]["args"]
        assert service_args[0] == "serve"
        _parse(service_args)


@pytest.mark.parametrize(
    "bad",
    [
        {"exporter": {"port": "9401"}},
        {"exporter": {"hostPaths": {"sys": "relative/sys"}}},
        {"service": {"prometheusUrl": "prometheus:9090"}},
        {"serviceMonitor": {"interval": "fifteen"}},
        {"exporter": {"tolerance": []}},
        {"prometheusRule": {"runbookBaseUrl": "runbooks.example/x#y"}},
    ],
)
def test_values_schema_rejects_bad_values(bad: dict) -> None:
    with pytest.raises(helm.HelmError):
        helm.Chart.load(CHART).validate_schema(bad)


def test_debugfs_can_be_left_out() -> None:
    (ds,) = by_kind(render({"exporter": {"hostPaths": {"debugfs": ""}}}), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    assert "debugfs" not in {v["name"] for v in pod["volumes"]}
    assert not any(a.startswith("--path.debugfs") for a in pod["containers"][0]["args"])


def test_nccl_ras_is_one_value_away() -> None:
    """Off by default; ``exporter.ncclRas.enabled`` turns the collector on (the real CLI accepts the
    flags), with explicit addresses and, when asked, the node's network namespace."""
    (off,) = by_kind(render(None), "DaemonSet")
    assert not any("nccl_ras" in a for a in off["spec"]["template"]["spec"]["containers"][0]["args"])
    assert not off["spec"]["template"]["spec"].get("hostNetwork")
    values = {
        "exporter": {"ncclRas": {"enabled": True, "addresses": ["4711=127.0.0.1:28111"], "hostNetwork": True}}
    }
    (ds,) = by_kind(render(values), "DaemonSet")
    pod = ds["spec"]["template"]["spec"]
    args = _parse([a.replace("$(NODE_NAME)", "node-1") for a in pod["containers"][0]["args"]])
    assert args.collector_nccl_ras is True and args.nccl_ras_address == ["4711=127.0.0.1:28111"]
    assert pod["hostNetwork"] is True and pod["dnsPolicy"] == "ClusterFirstWithHostNet"
    with pytest.raises(helm.HelmError):
        helm.Chart.load(CHART).validate_schema({"exporter": {"ncclRas": {"addresses": ["no-job-here"]}}})


def test_disabling_components_removes_their_objects() -> None:
    objects = render({"exporter": {"enabled": False}, "dashboards": {"enabled": False}})
    assert not by_kind(objects, "DaemonSet") and not by_kind(objects, "ConfigMap")
    assert [s["metadata"]["name"] for s in by_kind(objects, "Service")] == [
        "fs-fleetscope-service",
        "fs-fleetscope-service-shards",
    ]


def test_service_token_secret_reaches_the_pod_and_the_service_monitor(
    rendered: dict[str, list[dict]],
) -> None:
    objects = rendered["kube-prometheus-stack"]
    (deploy,) = by_kind(objects, "StatefulSet")
    (container,) = deploy["spec"]["template"]["spec"]["containers"]
    env = {e["name"]: e for e in container["env"]}
    assert env["FLEETSCOPE_TOKEN"]["valueFrom"]["secretKeyRef"] == {
        "name": "fleetscope-token",
        "key": "token",
    }
    # with a token only /healthz is open, so readiness and liveness use it
    assert container["readinessProbe"]["httpGet"]["path"] == "/healthz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    monitors = {m["metadata"]["name"]: m for m in by_kind(objects, "ServiceMonitor")}
    (endpoint,) = monitors["fs-fleetscope-service"]["spec"]["endpoints"]
    assert endpoint["authorization"]["credentials"] == {"name": "fleetscope-token", "key": "token"}
    assert "authorization" not in monitors["fs-fleetscope-exporter"]["spec"]["endpoints"][0]
    # without one, readiness follows the verdicts' freshness
    (plain,) = by_kind(rendered["default"], "StatefulSet")
    assert (
        plain["spec"]["template"]["spec"]["containers"][0]["readinessProbe"]["httpGet"]["path"] == "/readyz"
    )
