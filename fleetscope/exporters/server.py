"""The exporter's HTTP(S) server: ``/metrics``, a landing page, and the web config's TLS and auth.

Built on the standard library's threaded WSGI server, because client_python's own server has TLS
but no basic auth. ``/metrics`` is rendered by :func:`render_text`, a faster equivalent of
client_python's ``generate_latest`` for the Prometheus text format 0.0.4 (the format node_exporter
serves by default): an EFA + Lustre scrape of a p5.48xlarge has about 1,300 samples, and
``generate_latest`` spends most of a scrape escaping the same label sets again on every scrape.
"""

from __future__ import annotations

import errno
import functools
import gzip
import io
import logging
import socket
import socketserver
import ssl
import threading
import time
from collections.abc import Callable, Iterable
from typing import Any, Protocol
from urllib.parse import parse_qs
from wsgiref.simple_server import WSGIRequestHandler, WSGIServer

from prometheus_client import generate_latest
from prometheus_client.utils import floatToGoString

from fleetscope import __version__
from fleetscope.clientlimits import Admission, ClientSlots, per_client_share
from fleetscope.errors import FleetscopeError
from fleetscope.exporters.webconfig import WebConfig
from fleetscope.textformat import escape_label_value

log = logging.getLogger(__name__)

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
#: Seconds a client may stay silent while the answer is sent.
REQUEST_TIMEOUT = 10.0
#: Seconds a client has to finish the TLS handshake, and then to send its whole request head: a
#: client that trickles its head (a header line every few seconds) is cut off, its slot reclaimed.
HEAD_DEADLINE_S = 5.0
#: Connections without valid credentials served at once (one thread each). One client address
#: holds at most a quarter of them (:func:`~fleetscope.clientlimits.per_client_share`); when all are
#: taken, a newcomer takes the place of the connection that has waited longest for its request head
#: (:class:`~fleetscope.clientlimits.Admission`), and only when every one is being answered is it
#: refused (503). With ``basic_auth_users`` configured, a request with valid credentials moves its
#: connection to a second pool of the same size that unauthenticated connections cannot fill.
#: A node is scraped by one or two Prometheus servers, plus a person with curl now and then.
DEFAULT_MAX_CONNECTIONS = 64
#: The listen backlog: connections the kernel queues before the accept loop takes them. A fleet's
#: Prometheus pairs may all hit one node in the same second; Go's default is the kernel's somaxconn.
LISTEN_BACKLOG = 128
_BUSY_RESPONSE = b"HTTP/1.0 503 Service Unavailable\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"

_LANDING = f"""<!doctype html><html><head><title>fleetscope exporter</title></head>
<body><h1>fleetscope exporter {__version__}</h1>
<p><a href="metrics">Metrics</a></p></body></html>""".encode()


class SupportsCollect(Protocol):
    def collect(self) -> Iterable[Any]: ...


# --- exposition ---------------------------------------------------------------------------------
_TYPES = {"counter": "counter", "gauge": "gauge", "unknown": "untyped", "untyped": "untyped"}
_label_cache: dict[tuple, str] = {}
_LABEL_CACHE_MAX = 100_000


def _labelstr(labels: dict[str, str]) -> str:
    key = tuple(labels.items())
    text = _label_cache.get(key)
    if text is None:
        if len(_label_cache) >= _LABEL_CACHE_MAX:
            _label_cache.clear()
        inner = ",".join(f'{k}="{escape_label_value(str(v))}"' for k, v in sorted(labels.items()))
        text = _label_cache[key] = "{" + inner + "}" if inner else ""
    return text


def _value(v: float) -> str:
    if type(v) is int and -(2**53) < v < 2**53:
        return str(v)
    return floatToGoString(v)


class _Only:
    """The families of ``collector`` named in ``names`` (client_python's ``?name[]=`` filter): a
    family matches by its name or its samples' name (``..._total`` of a counter)."""

    def __init__(self, collector: SupportsCollect, names: set[str]) -> None:
        self.collector = collector
        self.names = names

    def collect(self) -> Iterable[Any]:
        for metric in self.collector.collect():
            if metric.name in self.names or any(s.name in self.names for s in metric.samples[:1]):
                yield metric


#: ``name[]`` values one ``/metrics`` request may give, and their length.
MAX_NAME_FILTERS = 256
MAX_NAME_CHARS = 256


def name_filter(query: str) -> set[str] | None:
    """The ``name[]`` values of a query string (None when it has none), bounded in count and size."""
    if "name" not in query:
        return None
    values = parse_qs(query, max_num_fields=4 * MAX_NAME_FILTERS).get("name[]", [])
    return {v[:MAX_NAME_CHARS] for v in values[:MAX_NAME_FILTERS]} or None


class _One:
    def __init__(self, metric: Any) -> None:
        self.metric = metric

    def collect(self) -> list[Any]:
        return [self.metric]


def render_text(collector: SupportsCollect) -> bytes:
    """The Prometheus text format (0.0.4) of everything ``collector`` yields.

    Same series, names, HELP and TYPE lines as ``generate_latest``; plain gauges and counters take a
    fast path (label sets rendered once and cached; integers printed as integers), any other family
    (histograms, summaries, info, ``_created`` samples) is rendered by ``generate_latest`` itself.

    It never raises on what a collector yields: a sample whose value cannot be printed (an int
    beyond float range, a string) or a family the fallback cannot render is dropped and logged
    (:class:`~fleetscope.exporters.registry.NodeCollector` has already dropped and counted those of
    its collectors; this is the last guard, so one bad value can never turn a scrape into a 500).
    """
    out: list[str] = []
    append = out.append
    dropped = 0
    for metric in collector.collect():
        mtype = _TYPES.get(metric.type)
        sample_name = metric.name + "_total" if metric.type == "counter" else metric.name
        if mtype is None or any(s.name != sample_name for s in metric.samples):
            try:
                append(generate_latest(_One(metric)).decode())
            except Exception as exc:  # noqa: BLE001 - one family must not fail the scrape
                dropped += len(metric.samples)
                log.warning("family %s not rendered: %s", metric.name, exc)
            continue
        lines = []
        for s in metric.samples:
            try:
                lines.append(f"{sample_name}{_labelstr(s.labels)} {_value(s.value)}\n")
            except (TypeError, ValueError, OverflowError):
                dropped += 1
        if lines or not metric.samples:
            doc = metric.documentation.replace("\\", r"\\").replace("\n", r"\n")
            append(f"# HELP {sample_name} {doc}\n# TYPE {sample_name} {mtype}\n")
            out.extend(lines)
    if dropped:
        log.warning("dropped %d sample(s) that could not be rendered", dropped)
    return "".join(out).encode()


# --- HTTP ---------------------------------------------------------------------------------------
def parse_listen_address(address: str) -> tuple[str, int]:
    """``:9401``, ``0.0.0.0:9401``, ``[::1]:9401`` -> (host, port)."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or int(port) > 65535:
        raise FleetscopeError(f"invalid --web.listen-address {address!r}: expected [host]:port")
    host = host.strip("[]") or "0.0.0.0"
    return host, int(port)


class _DeadlineReader(io.RawIOBase):
    """A socket's reads that all end by one deadline (a whole request head, not each recv)."""

    def __init__(self, sock: socket.socket, deadline: float) -> None:
        self.sock = sock
        self.deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise TimeoutError("request head not received in time")
        self.sock.settimeout(min(left, REQUEST_TIMEOUT))
        return self.sock.recv_into(buffer)


def _cut(fd: int) -> None:
    """End a connection another thread is reading (its blocked ``recv`` returns end-of-file)."""
    dup = socket.fromfd(fd, socket.AF_INET, socket.SOCK_STREAM)
    try:
        dup.shutdown(socket.SHUT_RDWR)
    finally:
        dup.close()


class _ThreadingWSGIServer(socketserver.ThreadingMixIn, WSGIServer):
    daemon_threads = True
    allow_reuse_address = True
    request_queue_size = LISTEN_BACKLOG
    ssl_context: ssl.SSLContext | None = None
    max_connections = DEFAULT_MAX_CONNECTIONS
    head_deadline = HEAD_DEADLINE_S
    #: Checks a request's ``Authorization`` header; None when no credentials are configured.
    authorize: Callable[[str | None], bool] | None = None
    _admission: Admission | None = None
    _clients: ClientSlots | None = None
    #: Connections refused because every slot, or the client's share of them, was taken.
    refused = 0

    def _refuse(self, request: Any, client_address: Any, why: str) -> None:
        self.refused += 1
        log.debug("refused %s: %s", client_address, why)
        if self.ssl_context is None:
            try:
                request.setblocking(False)
                request.send(_BUSY_RESPONSE)
            except OSError:
                pass
        self.shutdown_request(request)

    def process_request(self, request: Any, client_address: Any) -> None:
        # Called by the accept loop: a connection over a cap is refused here, before a thread.
        if self._admission is None or self._clients is None:
            self._admission = Admission(self.max_connections, self.max_connections)
            self._clients = ClientSlots(per_client_share(self.max_connections))
        client = str(client_address[0])
        if not self._clients.acquire(client):
            self._refuse(
                request, client_address, f"{self._clients.per_client} connections of it already open"
            )
            return
        fd = request.fileno()
        if not self._admission.admit(fd, functools.partial(_cut, fd)):
            self._clients.release(client)
            self._refuse(request, client_address, f"{self.max_connections} requests being answered")
            return
        try:
            super().process_request(request, client_address)
        except BaseException:
            self._admission.release(fd)
            self._clients.release(client)
            raise

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        try:
            super().process_request_thread(request, client_address)
        finally:
            assert self._clients is not None
            self._clients.release(str(client_address[0]))

    def server_bind(self) -> None:
        # HTTPServer.server_bind() resolves the host's FQDN, which can hang on a node without DNS.
        socketserver.TCPServer.server_bind(self)
        host, port = self.server_address[:2]
        self.server_name, self.server_port = str(host), port
        self.setup_environ()

    def finish_request(self, request: Any, client_address: Any) -> None:
        fd = request.fileno()
        released = False

        def release() -> None:
            # Before the socket is closed (by the TLS socket, or shutdown_request), so its
            # descriptor number, which the next accepted connection may get, is never released
            # on that connection's behalf.
            nonlocal released
            if not released and self._admission is not None:
                self._admission.release(fd)
            released = True

        try:
            self._finish_request(request, client_address, release)
        finally:
            release()

    def _finish_request(self, request: Any, client_address: Any, release: Callable[[], None]) -> None:
        # TLS handshakes run here, in the request's own thread, so a client that never completes
        # one cannot block the accept loop.
        if self.ssl_context is None:
            super().finish_request(request, client_address)
            return
        request.settimeout(self.head_deadline)
        try:
            # wrap_socket takes over the descriptor; shutdown_request then finds it detached.
            tls = self.ssl_context.wrap_socket(request, server_side=True, do_handshake_on_connect=False)
        except (OSError, ssl.SSLError) as exc:
            log.debug("TLS setup with %s failed: %s", client_address, exc)
            return
        try:
            try:
                tls.do_handshake()
            except (OSError, ssl.SSLError) as exc:
                log.debug("TLS handshake with %s failed: %s", client_address, exc)
                return
            super().finish_request(tls, client_address)
        finally:
            release()
            tls.close()

    def shutdown_request(self, request: Any) -> None:
        if request.fileno() == -1:  # handed over to (and closed by) the TLS socket
            return
        super().shutdown_request(request)


class _IPv6Server(_ThreadingWSGIServer):
    address_family = socket.AF_INET6


class _QuietHandler(WSGIRequestHandler):
    timeout = REQUEST_TIMEOUT

    def setup(self) -> None:
        super().setup()
        deadline = time.monotonic() + getattr(self.server, "head_deadline", HEAD_DEADLINE_S)
        self.rfile = io.BufferedReader(_DeadlineReader(self.connection, deadline))

    def parse_request(self) -> bool:
        ok = super().parse_request()
        self.connection.settimeout(REQUEST_TIMEOUT)  # the head is in: the answer has its own timeout
        if not ok:
            return False
        admission: Admission | None = getattr(self.server, "_admission", None)
        if admission is None:
            return True
        authorize = getattr(self.server, "authorize", None)
        authenticated = authorize is not None and authorize(self.headers.get("Authorization"))
        if admission.head_received(self.connection.fileno(), authenticated):
            return True
        try:  # cut to make room for a newer connection, or the authenticated pool is full
            self.wfile.write(_BUSY_RESPONSE)
        except OSError:
            pass
        return False

    def handle(self) -> None:
        try:
            super().handle()
        except TimeoutError:
            log.debug("%s: request head not received within the deadline; closed", self.address_string())

    def log_message(self, format: str, *args: object) -> None:
        log.debug("%s " + format, self.address_string(), *args)


def make_app(collector: SupportsCollect, web_config: WebConfig) -> Callable:
    """The WSGI app: the client's own rate limit (429), method (405), auth (401), the server's
    rate limit (429), then ``/metrics``, ``/`` or 404. A client without credentials spends only its
    own bucket, never the one the authenticated scrapes share.

    ``HEAD`` is answered like ``GET`` (same status and headers, ``Content-Length`` included) without
    the body, as Go's ``net/http`` does; any other method is ``405 Method Not Allowed``.
    """
    extra_headers = list(web_config.headers.items())
    limiter = web_config.rate_limiter()
    per_client = web_config.client_rate_limiter()

    def app(environ: dict, start_response: Callable) -> Iterable[bytes]:
        head = environ.get("REQUEST_METHOD", "GET") == "HEAD"

        def respond(status: str, headers: list[tuple[str, str]], body: bytes) -> list[bytes]:
            start_response(status, [*headers, *extra_headers, ("Content-Length", str(len(body)))])
            return [] if head else [body]

        too_many = ("429 Too Many Requests", [("Content-Type", "text/plain")], b"Too Many Requests\n")
        if per_client is not None and not per_client.allow(str(environ.get("REMOTE_ADDR", ""))):
            return respond(*too_many)
        if environ.get("REQUEST_METHOD", "GET") not in ("GET", "HEAD"):
            return respond(
                "405 Method Not Allowed",
                [("Allow", "GET, HEAD"), ("Content-Type", "text/plain")],
                b"Method Not Allowed\n",
            )
        if not web_config.authorized(environ.get("HTTP_AUTHORIZATION")):
            return respond(
                "401 Unauthorized",
                [("WWW-Authenticate", 'Basic realm="fleetscope"'), ("Content-Type", "text/plain")],
                b"Unauthorized\n",
            )
        if limiter is not None and not limiter.allow():
            return respond(*too_many)
        path = environ.get("PATH_INFO", "/")
        if path == "/metrics":
            try:
                names = name_filter(environ.get("QUERY_STRING", ""))
            except ValueError:  # more fields than parse_qs allows
                return respond(
                    "400 Bad Request", [("Content-Type", "text/plain")], b"Too many query fields\n"
                )
            body = render_text(collector if names is None else _Only(collector, names))
            headers = [("Content-Type", CONTENT_TYPE)]
            if "gzip" in environ.get("HTTP_ACCEPT_ENCODING", ""):
                body = gzip.compress(body, compresslevel=1)
                headers.append(("Content-Encoding", "gzip"))
            return respond("200 OK", headers, body)
        if path == "/":
            return respond("200 OK", [("Content-Type", "text/html; charset=utf-8")], _LANDING)
        return respond("404 Not Found", [("Content-Type", "text/plain")], b"Not Found\n")

    return app


class ExporterServer:
    """Binds at construction (so a port in use is reported before anything else starts)."""

    def __init__(
        self,
        address: str,
        collector: SupportsCollect,
        web_config: WebConfig,
        max_connections: int = DEFAULT_MAX_CONNECTIONS,
    ) -> None:
        if max_connections < 1:
            raise FleetscopeError(f"--web.max-connections must be at least 1, not {max_connections}")
        host, port = parse_listen_address(address)
        server_class = _IPv6Server if ":" in host else _ThreadingWSGIServer
        ctx = web_config.ssl_context()  # a bad certificate is reported before binding
        try:
            self.httpd = server_class((host, port), _QuietHandler)
        except OSError as exc:
            why = "address already in use" if exc.errno == errno.EADDRINUSE else (exc.strerror or str(exc))
            raise FleetscopeError(f"cannot listen on {address}: {why}") from None
        self.httpd.ssl_context = ctx
        self.httpd.max_connections = max_connections
        self.httpd.authorize = web_config.authorized if web_config.users else None
        self.httpd.set_app(make_app(collector, web_config))
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
        if self._thread is not None:
            self.httpd.shutdown()
        self.httpd.server_close()
