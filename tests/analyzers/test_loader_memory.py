"""A window whose answers fit the loader's budgets but not the memory left (issue 36, item 5):
answers just under the cap added up to a ``MemoryError`` traceback at 4.0 GB under a 4.5 GiB limit.
Here a child process with a small address-space limit loads a window of 24 MB answers from a local
server: one clear line, no traceback."""

from __future__ import annotations

import subprocess
import sys
import textwrap
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
T0 = 1_796_000_000
POINTS = 240
SERIES = 4000


def _body() -> bytes:
    values = "[" + ",".join(f'[{T0 + 15 * k},"{k % 7}.5"]' for k in range(POINTS)) + "]"
    one = '{{"metric":{{"Hostname":"n{}","gpu":"0"}},"values":' + values + "}}"
    result = ",".join(one.format(i) for i in range(SERIES))
    return ('{"status":"success","data":{"resultType":"matrix","result":[' + result + "]}}").encode()


def test_answers_past_the_memory_left_are_one_clear_line() -> None:
    body = _body()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            self.rfile.read(int(self.headers.get("Content-Length") or 0))
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{server.server_address[1]}"
    child = textwrap.dedent(
        f"""
        import resource, sys
        from fleetscope.errors import FleetscopeError
        from fleetscope.window.prometheus import PrometheusAccess, load_prometheus
        size = int(open("/proc/self/status").read().split("VmSize:")[1].split()[0]) * 1024
        resource.setrlimit(resource.RLIMIT_AS, (size + (400 << 20), resource.RLIM_INFINITY))
        names = [f"metric_{{k}}" for k in range(40)]
        try:
            access = PrometheusAccess({url!r})
            load_prometheus(access, {T0}, {T0 + 15 * (POINTS - 1)}, 15.0, names, concurrency=1)
        except FleetscopeError as exc:
            print(f"fleetscope: error: {{exc}}", file=sys.stderr)
            sys.exit(1)
        print("loaded")
        """
    )
    try:
        done = subprocess.run(
            [sys.executable, "-c", child], capture_output=True, timeout=300, env={"PYTHONPATH": str(ROOT)}
        )
    finally:
        server.shutdown()
        server.server_close()
    err = done.stderr.decode()
    assert done.returncode == 1, (done.returncode, done.stdout.decode()[-500:], err[-2000:])
    assert "Traceback" not in err and "did not fit in the memory left" in err
    assert len(err.strip().splitlines()) == 1, err[-2000:]
