"""The exporter's HTTP(S) server: ``/metrics``, a landing page, and the web config's auth.

Built on the standard library's WSGI server (threaded) and client_python's WSGI app, because
client_python's own server has TLS but no basic auth.
"""

from __future__ import annotations

import errno
import logging
import socket
import threading
from collections.abc import Callable, Iterable
from socketserver import ThreadingMixIn
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer, make_server

from prometheus_client import CollectorRegistry, make_wsgi_app

from fleetscope import __version__
from fleetscope.errors import FleetscopeError
from fleetscope.exporters.webconfig import WebConfig

log = logging.getLogger(__name__)

_LANDING = f"""<!doctype html><html><head><title>fleetscope exporter</title></head>
<body><h1>fleetscope exporter {__version__}</h1>
<p><a href="metrics">Metrics</a></p></body></html>""".encode()


def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9401``, ``0.0.0.0:9401``, ``[::1]:9401`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise FleetscopeError(f"invalid --web.listen-address {address!r}: expected [host]:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _ThreadingWSGIServer(ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True


class _IPv6Server(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def make_app(registry: CollectorRegistry, web_config: WebConfig) -> Callable:
    metrics_app = make_wsgi_app(registry)

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        if not web_config.authorized(environ.get("HTTP_AUTHORIZATION")):
            start_response(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="fleetscope"'), ("Content-Type", "text/plain")],
            )
            return [b"Unauthorized\n"]
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            return metrics_app(environ, start_response)
        if path == "/":
            start_response("200 OK", [("Content-Type", "text/html; charset=utf-8")])
            return [_LANDING]
        start_response("404 Not Found", [("Content-Type", "text/plain")])
        return [b"Not Found\n"]

    return app


class ExporterServer:
    """Binds at construction (so a port in use is reported before anything else starts)."""

    def __init__(self, address: str, registry: CollectorRegistry, web_config: WebConfig) -> None:
        host, port = parse_listen_address(address)
        server_class = _IPv6Server if ":" in host else _ThreadingWSGIServer
        try:
            self.httpd = make_server(host, port, make_app(registry, web_config), server_class, _QuietHandler)
        except OSError as exc:
            why = "address already in use" if exc.errno == errno.EADDRINUSE else exc.strerror
            raise FleetscopeError(f"cannot listen on {address}: {why}") from None
        ctx = web_config.ssl_context()
        if ctx is not None:
            self.httpd.socket = ctx.wrap_socket(self.httpd.socket, server_side=True)
        self.scheme = "https" if ctx else "http"
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return self.httpd.server_address[1]

    def serve_forever(self) -> None:
        self.httpd.serve_forever(poll_interval=0.2)

    def start(self) -> None:
        self._thread = threading.Thread(target=self.serve_forever, name="exporter-http", daemon=True)
        self._thread.start()

    def shutdown(self) -> None:
        self.httpd.shutdown()
        self.httpd.server_close()
