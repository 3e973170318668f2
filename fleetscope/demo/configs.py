"""The configuration files the demo writes for Prometheus and Alertmanager, and the rules it loads."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

#: The checkout the demo runs from (its committed ``alerts/`` are used when present).
ROOT = Path(__file__).resolve().parents[2]


def rule_files(workdir: Path, root: Path = ROOT) -> list[Path]:
    """The generated alerting rules: the committed files of a checkout, else generated afresh."""
    committed = sorted((root / "alerts").glob("*.rules.yml"))
    if committed:
        return committed
    out = workdir / "rules"
    out.mkdir(exist_ok=True)
    from fleetscope.alerts.render import rule_files as render_rule_files

    paths = []
    for name, text in render_rule_files().items():
        (out / name).write_text(text)
        paths.append(out / name)
    return sorted(paths)


def prometheus_config(
    targets_file: Path, service: str, rules: list[Path], alertmanager: str | None, interval: float
) -> dict:
    """Scrape the virtual nodes (file_sd: the simulator writes the targets) and the service every
    ``interval`` seconds, evaluate ``rules`` as often, and send alerts to ``alertmanager`` (host:port)."""
    every = f"{interval:g}s"
    config: dict[str, Any] = {
        "global": {"scrape_interval": every, "evaluation_interval": every, "scrape_timeout": every},
        "rule_files": [str(p) for p in rules],
        "scrape_configs": [
            {
                "job_name": "fleetscope-nodes",
                "file_sd_configs": [{"files": [str(targets_file)], "refresh_interval": "5s"}],
            },
            {"job_name": "fleetscope-service", "static_configs": [{"targets": [service]}]},
        ],
    }
    if alertmanager:
        config["alerting"] = {"alertmanagers": [{"static_configs": [{"targets": [alertmanager]}]}]}
    return config


def alertmanager_config(fast: bool) -> dict:
    """One route to a receiver that sends nothing: the alerts are seen in Alertmanager's UI and API."""
    return {
        "route": {
            "receiver": "demo",
            "group_by": ["alertname", "Hostname"],
            "group_wait": "1s" if fast else "10s",
            "group_interval": "10s" if fast else "1m",
            "repeat_interval": "1h",
        },
        "receivers": [{"name": "demo"}],
    }


def write_yaml(path: Path, config: dict) -> Path:
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    return path
