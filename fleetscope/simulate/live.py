"""Serve the model live: one ``/metrics`` endpoint per virtual node, advancing in real time.

Each node's endpoint serves exactly what ``fleetscope exporter`` would serve on that node (GPU, XID,
EFA, Lustre and training series plus ``fleetscope_collector_success``), in the Prometheus text
format, without timestamps; Prometheus adds ``job`` and ``instance`` when it scrapes. The model is
advanced to "now" on every scrape, in ticks of at most ``tick_s`` seconds; ``speed`` runs the
scenario's clock (fault onsets, stalls, checkpoints) faster, while counters grow at real-time rates.
"""

from __future__ import annotations

import dataclasses
import logging
import math
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

from fleetscope import contract as c
from fleetscope import strictjson
from fleetscope.errors import FleetscopeError
from fleetscope.simulate.exposition import text_family
from fleetscope.simulate.families import cluster_model
from fleetscope.simulate.spec import ScenarioSpec

log = logging.getLogger(__name__)
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


class LiveCluster:
    """``LiveCluster(spec, host, base_port).start()`` serves node i on ``base_port + i``."""

    def __init__(
        self,
        spec: ScenarioSpec,
        host: str = "127.0.0.1",
        base_port: int = 9500,
        speed: float = 1.0,
        tick_s: float = 1.0,
        targets_file: str | Path | None = None,
    ) -> None:
        self.spec = spec
        self.host = host
        self.base_port = base_port
        self.speed = speed
        self.tick_s = tick_s
        self.targets_file = Path(targets_file) if targets_file else None
        self._t0 = time.time()
        # The model's clock starts now (real time), so Prometheus sees fresh samples.
        self.model = cluster_model(dataclasses.replace(spec, start=self._t0), scrape_labels=False)
        self._lock = threading.Lock()
        self._real = 0.0  # real seconds the model has been advanced by
        self.servers: list[ThreadingHTTPServer] = []
        self.threads: list[threading.Thread] = []

    @property
    def ports(self) -> list[int]:
        return [s.server_address[1] for s in self.servers]

    @property
    def targets(self) -> list[str]:
        return [f"{self.host}:{p}" for p in self.ports]

    def advance(self) -> None:
        """Bring the model to now: counters at real-time rates, the scenario ``speed`` times faster."""
        with self._lock:
            target = time.time() - self._t0
            while self._real + 1e-9 < target:
                dt = min(self.tick_s, target - self._real)
                if dt < 1e-3:
                    break
                self.model.tick(dt, dt * self.speed)
                self._real += dt

    def render(self, node: int) -> str:
        """The exposition text of virtual node ``node``."""
        self.advance()
        with self._lock:
            series = self.model.series()
            host = self.model.hostnames[node]
        out: list[str] = []
        for name, s in series.items():
            if c.NODE_LABEL not in s.labels:
                continue
            hi = s.labels.index(c.NODE_LABEL)
            rows = [
                (zip(s.labels, k, strict=True), v)
                for k, v in zip(s.keys, s.values.tolist(), strict=True)
                if k[hi] == host and not math.isnan(v)
            ]
            out.append(text_family(name, rows))
        return "".join(out)

    def start(self) -> LiveCluster:
        cluster = self
        for i in range(self.spec.nodes):

            class Handler(BaseHTTPRequestHandler):
                node = i

                def do_GET(self) -> None:
                    if self.path.split("?")[0] != "/metrics":
                        self.send_response(404)
                        self.end_headers()
                        return
                    body = cluster.render(self.node).encode()
                    self.send_response(200)
                    self.send_header("Content-Type", CONTENT_TYPE)
                    self.send_header("Content-Length", str(len(body)))
                    self.end_headers()
                    self.wfile.write(body)

                def log_message(self, format: str, *args: object) -> None:
                    log.debug(format, *args)

            port = self.base_port + i if self.base_port else 0
            try:
                server = ThreadingHTTPServer((self.host, port), Handler)
            except OSError as exc:
                self.stop()
                raise FleetscopeError(f"cannot listen on {self.host}:{port}: {exc.strerror}") from None
            server.daemon_threads = True
            self.servers.append(server)
            t = threading.Thread(target=server.serve_forever, name=f"sim-node-{i}", daemon=True)
            t.start()
            self.threads.append(t)
        if self.targets_file:
            self.write_targets(self.targets_file)
        return self

    def write_targets(self, path: Path) -> None:
        """A Prometheus file_sd JSON with one target per virtual node."""
        groups = [
            {"targets": [t], "labels": {"fleetscope_sim_node": self.model.hostnames[i]}}
            for i, t in enumerate(self.targets)
        ]
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_suffix(path.suffix + ".tmp")
        tmp.write_text(strictjson.dumps(groups, indent=2) + "\n")
        tmp.replace(path)

    def stop(self) -> None:
        for s in self.servers:
            s.shutdown()
            s.server_close()
        self.servers.clear()
        self.threads.clear()

    def __enter__(self) -> LiveCluster:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
