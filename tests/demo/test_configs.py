"""The demo's Prometheus and Alertmanager configurations pass the real tools' own checks."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import yaml

from fleetscope.demo.configs import ROOT, alertmanager_config, prometheus_config, rule_files, write_yaml
from tests.support.prom import promtool

AMTOOL = "/usr/bin/amtool"


def _targets(tmp_path: Path) -> Path:
    path = tmp_path / "targets.json"
    path.write_text(json.dumps([{"targets": ["127.0.0.1:9500", "127.0.0.1:9501"]}]))
    return path


def test_prometheus_config_with_rules_and_alertmanager_passes_promtool(tmp_path: Path) -> None:
    rules = rule_files(tmp_path)
    config = prometheus_config(_targets(tmp_path), "127.0.0.1:9410", rules, "127.0.0.1:9093", 1.0)
    path = write_yaml(tmp_path / "prometheus.yml", config)
    res = promtool("check", "config", str(path))
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()
    loaded = yaml.safe_load(path.read_text())
    assert loaded["global"]["scrape_interval"] == "1s"
    assert loaded["alerting"]["alertmanagers"][0]["static_configs"][0]["targets"] == ["127.0.0.1:9093"]
    assert [j["job_name"] for j in loaded["scrape_configs"]] == ["fleetscope-nodes", "fleetscope-service"]
    assert loaded["rule_files"] == [str(p) for p in rules]


def test_prometheus_config_without_alertmanager_has_no_alerting_block(tmp_path: Path) -> None:
    config = prometheus_config(_targets(tmp_path), "127.0.0.1:9410", [], None, 5.0)
    assert "alerting" not in config
    assert config["global"]["evaluation_interval"] == "5s"
    res = promtool("check", "config", str(write_yaml(tmp_path / "p.yml", config)))
    assert res.returncode == 0, res.stdout.decode() + res.stderr.decode()


def test_alertmanager_config_passes_amtool_and_groups_faster_with_fast(tmp_path: Path) -> None:
    for fast in (True, False):
        path = write_yaml(tmp_path / f"am-{fast}.yml", alertmanager_config(fast))
        res = subprocess.run([AMTOOL, "check-config", str(path)], capture_output=True, text=True, check=False)
        assert res.returncode == 0, res.stdout + res.stderr
    assert alertmanager_config(True)["route"]["group_wait"] == "1s"
    assert alertmanager_config(False)["route"]["group_wait"] == "10s"


def test_rule_files_are_the_checkouts_or_generated_afresh(tmp_path: Path) -> None:
    committed = rule_files(tmp_path)
    assert committed == sorted((ROOT / "alerts").glob("*.rules.yml"))
    assert committed
    generated = rule_files(tmp_path, root=tmp_path / "not-a-checkout")
    assert [p.name for p in generated] == [p.name for p in committed]
    assert all(p.parent == tmp_path / "rules" for p in generated)
    assert [p.read_text() for p in generated] == [p.read_text() for p in committed]
