#!/usr/bin/env python3
"""Make the docs' pictures: docs/img/web-page.png, web-page-inference.png and dashboard-panel.png.

    .venv/bin/python scripts/screenshots.py            # all three
    .venv/bin/python scripts/screenshots.py --only web
    .venv/bin/python scripts/screenshots.py --only inference
    .venv/bin/python scripts/screenshots.py --only panel

web-page.png: runs ``fleetscope demo --fast`` (simulated cluster, real Prometheus and Alertmanager,
the live service) with its default fault (a GPU falls off the bus and the training job stalls),
waits until the finding is there and the job reads as stalled, and screenshots the service's web
page in Debian's headless Chromium. web-page-inference.png: the same with ``--workload inference``,
once the failing replica's finding is there. Each demo is stopped (Ctrl-C) before the script ends.

dashboard-panel.png: Grafana cannot run on the machines this is made on (no Docker engine, no
Grafana package), so one panel of a generated dashboard is drawn with matplotlib instead: the
panel's own PromQL, run against a real Prometheus into which a simulated 30-minute recording
(one GPU thermally throttled after 10 minutes) was backfilled with promtool. The picture says so.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
IMG = ROOT / "docs" / "img"
VENV_BIN = Path(sys.executable).parent
CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser") or "chromium"


#: Grafana unit ids -> axis labels, for the units the generated dashboards use.
GRAFANA_UNITS = {
    "rotmhz": "MHz", "celsius": "°C", "watt": "W", "percent": "%", "percentunit": "ratio",
    "decmbytes": "MiB", "mbytes": "MiB", "Bps": "bytes/s", "s": "seconds", "short": "",
}  # fmt: skip


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_json(url: str, timeout: float = 5.0):
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            result = predicate()
            if result:
                return result
        except OSError:
            pass
        time.sleep(1)
    raise SystemExit(f"timed out after {timeout:.0f}s waiting for {what}")


def chromium_screenshot(url: str, out: Path, width: int, height: int) -> None:
    with tempfile.TemporaryDirectory() as profile:
        subprocess.run(
            [
                CHROMIUM,
                "--headless=new",
                "--no-sandbox",
                "--disable-gpu",
                "--hide-scrollbars",
                f"--user-data-dir={profile}",
                f"--window-size={width},{height}",
                "--virtual-time-budget=10000",
                f"--screenshot={out}",
                url,
            ],
            check=True,
            capture_output=True,
            timeout=120,
        )


# --- the web page during the demo ------------------------------------------------------------
def web_page(out: Path, fault: str, workload: str = "training") -> None:
    port = free_port()
    demo = subprocess.Popen(
        [
            str(VENV_BIN / "fleetscope"),
            "demo",
            "--fast",
            "--workload",
            workload,
            "--fault",
            fault,
            "--fault-at",
            "60",
            "--fault-node",
            "1",
            "--duration",
            "900",
            "--listen",
            f"127.0.0.1:{port}",
            "--prometheus-port",
            str(free_port()),
            "--alertmanager-port",
            str(free_port()),
            "--base-port",
            str(20000 + free_port() % 20000),
        ],
        stdout=sys.stdout,
        stderr=sys.stderr,
    )
    try:
        base = f"http://127.0.0.1:{port}"
        if workload == "inference":
            wait_for(
                lambda: get_json(f"{base}/api/v1/findings?kind=failing_replica")["findings"],
                timeout=600,
                what="the failing replica's finding",
            )
            # Its replica stops serving a few scrapes after the XID: wait until the page can say so.
            with contextlib.suppress(SystemExit):
                wait_for(
                    lambda: any(
                        m["serving"] < len(m["replicas"]) for m in get_json(f"{base}/api/v1/models")["models"]
                    ),
                    timeout=120,
                    what="the replica to stop serving",
                )
        else:
            wait_for(lambda: get_json(f"{base}/api/v1/findings")["findings"], timeout=600, what="a finding")
            # The job's state follows its steps: wait until it reads as stopped (or a few minutes).
            with contextlib.suppress(SystemExit):
                wait_for(
                    lambda: any(j["state"] != "running" for j in get_json(f"{base}/api/v1/jobs")["jobs"]),
                    timeout=240,
                    what="the job's state",
                )
        chromium_screenshot(f"{base}/", out, 1400, 1300)
        print(f"wrote {out}")
    finally:
        demo.send_signal(signal.SIGINT)
        demo.wait(timeout=60)


# --- one dashboard panel from a recorded fixture ---------------------------------------------
def panel_by_title(title: str) -> tuple[dict, dict]:
    for path in sorted((ROOT / "dashboards").glob("*.json")):
        dash = json.loads(path.read_text())
        stack = list(dash.get("panels", []))
        while stack:
            panel = stack.pop(0)
            stack.extend(panel.get("panels", []))
            if panel.get("title") == title:
                return dash, panel
    raise SystemExit(f"no panel titled {title!r} in dashboards/*.json")


def substitute(expr: str, step: float, variables: dict[str, str]) -> str:
    """Grafana's variables: the given values, else 'All' (any value)."""
    expr = expr.replace("${__rate_interval}", "$__rate_interval").replace("${__interval}", "$__interval")
    expr = expr.replace("$__rate_interval", f"{int(4 * step)}s").replace("$__interval", f"{int(step)}s")
    for name, value in variables.items():
        expr = re.sub(rf"\$\{{?{name}\}}?(?!\w)", value, expr)
    return re.sub(r'(=~?)"\$\{?\w+(:\w+)?\}?"', r'=~".*"', expr)


def legend(fmt: str | None, labels: dict) -> str:
    if not fmt or fmt == "__auto":
        return ",".join(f"{k}={v}" for k, v in sorted(labels.items()) if k != "__name__")
    return re.sub(r"\{\{\s*(\w+)\s*\}\}", lambda m: labels.get(m.group(1), ""), fmt)


@contextlib.contextmanager
def running_prometheus(config: Path, data: Path):
    port = free_port()
    prom = subprocess.Popen(
        [
            "prometheus",
            f"--config.file={config}",
            f"--storage.tsdb.path={data}",
            f"--web.listen-address=127.0.0.1:{port}",
            "--storage.tsdb.retention.time=100y",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    base = f"http://127.0.0.1:{port}"
    try:
        wait_for(lambda: urllib.request.urlopen(f"{base}/-/ready", timeout=2).status == 200, 60, "prometheus")
        yield base
    finally:
        prom.terminate()
        prom.wait(timeout=30)


def dashboard_panel(out: Path, title: str, variables: dict[str, str]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    from datetime import UTC, datetime

    import matplotlib.dates as mdates
    import matplotlib.pyplot as plt

    from fleetscope.simulate.record import simulate, write_openmetrics
    from fleetscope.simulate.spec import FaultSpec, ScenarioSpec

    dash, panel = panel_by_title(title)
    spec = ScenarioSpec(
        name="screenshot",
        nodes=4,
        duration_s=1800,
        step_s=15,
        seed=7,
        faults=[FaultSpec(kind="thermal_throttle", at_s=600, node=1, gpu=3, slowdown=0.25)],
    )
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        recording = work / "recording.om"
        write_openmetrics(simulate(spec), recording)
        subprocess.run(
            ["promtool", "tsdb", "create-blocks-from", "openmetrics", str(recording), str(work / "data")],
            check=True,
            capture_output=True,
            timeout=600,
        )
        config = work / "prometheus.yml"
        config.write_text(json.dumps({"global": {"scrape_interval": "15s"}, "scrape_configs": []}))
        start, end, step = spec.start + 60, spec.start + spec.duration_s, 15.0
        exprs = [
            (substitute(t["expr"], step, variables), t.get("legendFormat")) for t in panel.get("targets", [])
        ]
        if any(":" in e for e, _ in exprs):
            # The panel reads recording rules: evaluate them over the recording (promtool backfill).
            with running_prometheus(config, work / "data") as base:
                rules = [str(p) for p in sorted((ROOT / "alerts").glob("*.rules.yml"))]
                subprocess.run(
                    [
                        "promtool",
                        "tsdb",
                        "create-blocks-from",
                        "rules",
                        f"--start={int(spec.start)}",
                        f"--end={int(end)}",
                        "--eval-interval=15s",
                        f"--url={base}",
                        f"--output-dir={work / 'data'}",
                        *rules,
                    ],
                    check=True,
                    capture_output=True,
                    timeout=600,
                )
        series = []
        with running_prometheus(config, work / "data") as base:
            for expr, legend_format in exprs:
                qs = urllib.parse.urlencode({"query": expr, "start": start, "end": end, "step": step})
                data = get_json(f"{base}/api/v1/query_range?{qs}", timeout=60)["data"]["result"]
                series.extend((legend(legend_format, s["metric"]), s["values"]) for s in data)
    if not series:
        raise SystemExit(f"panel {title!r} returned no data over the recording")

    plt.style.use("dark_background")
    fig, ax = plt.subplots(figsize=(11, 4.6), dpi=110)
    fig.patch.set_facecolor("#181b1f")
    ax.set_facecolor("#181b1f")
    for name, values in sorted(series, key=lambda s: s[0])[:16]:
        ts = [datetime.fromtimestamp(float(t), tz=UTC) for t, _ in values]
        ax.plot(ts, [float(v) for _, v in values], linewidth=1.3, label=name)
    unit = panel.get("fieldConfig", {}).get("defaults", {}).get("unit", "")
    where = ", ".join(f"{k}={v}" for k, v in variables.items())
    ax.set_title(f"{dash.get('title')} / {panel.get('title')}   ({where})", loc="left", fontsize=12)
    ax.set_ylabel(GRAFANA_UNITS.get(unit, unit))
    ax.grid(color="#2c3235", linewidth=0.6)
    ax.xaxis.set_major_formatter(mdates.DateFormatter("%H:%M", tz=UTC))
    ax.legend(fontsize=7, ncol=4, loc="upper left", bbox_to_anchor=(0, -0.12), frameon=False)
    fig.text(
        0.01,
        0.01,
        "Drawn with matplotlib (scripts/screenshots.py) from this panel's PromQL in dashboards/*.json, over "
        "a simulated\n30-minute recording backfilled into a real Prometheus; GPU 3 of this node thermally "
        "throttled from 10:10. Not a Grafana screenshot.",
        fontsize=7,
        color="#9fa7b3",
    )
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(out)
    print(f"wrote {out}")


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["web", "inference", "panel"], default=None)
    p.add_argument("--fault", default="gpu_lost", help="fault the demo injects for the web pages (gpu_lost)")
    p.add_argument("--panel-title", default="SM clock", help="the panel to draw (default: SM clock)")
    p.add_argument(
        "--var",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="a dashboard variable (default Hostname = the throttled node)",
    )
    args = p.parse_args()
    IMG.mkdir(parents=True, exist_ok=True)
    if args.only in (None, "web"):
        web_page(IMG / "web-page.png", args.fault)
    if args.only in (None, "inference"):
        web_page(IMG / "web-page-inference.png", args.fault, workload="inference")
    if args.only in (None, "panel"):
        from fleetscope.simulate.spec import node_name

        variables = {"Hostname": node_name(1), **dict(v.split("=", 1) for v in args.var)}
        dashboard_panel(IMG / "dashboard-panel.png", args.panel_title, variables)
    return 0


if __name__ == "__main__":
    sys.exit(main())
