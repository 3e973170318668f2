"""Ask one NCCL RAS listener for its status report, within a deadline and a byte limit.

The protocol is NCCL's (src/ras/client_support.cc; docs/hang.md#nccl-ras): send ``CLIENT PROTOCOL
2``, read ``SERVER PROTOCOL 2``; ``TIMEOUT <s>`` (how long RAS may gather), read ``OK``; ``SET FORMAT
json``, read ``OK`` (NCCL >= 2.28.7) or ``ERROR: Unknown command`` (older: the report comes as text);
``STATUS``, then the report until RAS closes the connection.

The peer is a process of someone's job, so it is not trusted: every read waits at most until the
deadline of the whole query, a line longer than :data:`MAX_LINE` and a report longer than
``max_bytes`` are refused, and a connection that closes early or answers anything else is an error.
A slow, dead or hostile RAS thus costs at most ``timeout_s`` and ``max_bytes`` of memory.

Standard library only (the node agent).
"""

from __future__ import annotations

import socket
import time

from fleetscope.hang.ras_parse import CLIENT_HANDSHAKE, DEFAULT_RAS_PORT, SERVER_HANDSHAKE

#: Longest reply line to a command (NCCL's own are under 100 characters).
MAX_LINE = 4096
#: Default bound of one report (a 4,096-rank job's JSON is a few MB).
DEFAULT_MAX_BYTES = 32 * 1024 * 1024


class RasQueryError(Exception):
    """The query failed; ``reason`` is the collector-error label (docs/exporter.md#the-nccl_ras-collector)."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(detail)
        self.reason = reason


def parse_address(text: str) -> tuple[str, int]:
    """``host:port``, ``[v6]:port`` or ``host`` (NCCL's default port 28028) -> (host, port)."""
    text = text.strip()
    host, port = text, str(DEFAULT_RAS_PORT)
    if text.startswith("["):
        host, sep, rest = text[1:].partition("]")
        if not sep or (rest and not rest.startswith(":")):
            raise ValueError(f"bad RAS address {text!r}")
        port = rest[1:] or port
    elif text.count(":") == 1:
        host, port = text.split(":")
    if not host or not port.isascii() or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"bad RAS address {text!r} (expected host:port)")
    return host, int(port)


class _Conn:
    """A socket whose every read ends by one deadline and whose total input is bounded."""

    def __init__(self, sock: socket.socket, deadline: float, max_bytes: int) -> None:
        self.sock = sock
        self.deadline = deadline
        self.max_bytes = max_bytes
        self.buf = b""
        self.total = 0
        self.eof = False

    def _recv(self) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RasQueryError("timeout", "RAS did not answer in time")
        self.sock.settimeout(left)
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise RasQueryError("timeout", "RAS did not answer in time") from None
        except OSError as exc:
            raise RasQueryError("unreachable", f"reading from RAS: {exc.strerror or exc}") from None
        if not chunk:
            self.eof = True
            return
        self.total += len(chunk)
        if self.total > self.max_bytes:
            raise RasQueryError("oversize", f"RAS sent more than {self.max_bytes} bytes")
        self.buf += chunk

    def send(self, text: str) -> None:
        left = self.deadline - time.monotonic()
        if left <= 0:
            raise RasQueryError("timeout", "RAS did not answer in time")
        self.sock.settimeout(left)
        try:
            self.sock.sendall(text.encode("ascii"))
        except TimeoutError:
            raise RasQueryError("timeout", "RAS did not take the command in time") from None
        except OSError as exc:
            raise RasQueryError("unreachable", f"writing to RAS: {exc.strerror or exc}") from None

    def line(self) -> str:
        while b"\n" not in self.buf:
            if len(self.buf) > MAX_LINE:
                raise RasQueryError("protocol", f"RAS sent a reply line over {MAX_LINE} bytes")
            if self.eof:
                raise RasQueryError("protocol", "RAS closed the connection before answering")
            self._recv()
        raw, _, self.buf = self.buf.partition(b"\n")
        return raw.decode("ascii", errors="replace").rstrip("\r")

    def rest(self) -> bytes:
        while not self.eof:
            self._recv()
        out, self.buf = self.buf, b""
        return out


def query(
    host: str,
    port: int,
    timeout_s: float,
    max_bytes: int = DEFAULT_MAX_BYTES,
) -> tuple[str, str]:
    """One status report: (``json`` or ``text``, its text). Raises :class:`RasQueryError`.

    A text report is asked for verbose: it then lists the ranks of every outlier group under half
    the communicator (the plain one only groups of at most 10 ranks and a quarter of it)."""
    deadline = time.monotonic() + timeout_s
    try:
        sock = socket.create_connection((host, port), timeout=timeout_s)
    except TimeoutError:
        raise RasQueryError("timeout", f"connecting to RAS at {host}:{port} timed out") from None
    except OSError as exc:
        raise RasQueryError("unreachable", f"RAS at {host}:{port}: {exc.strerror or exc}") from None
    with sock:
        conn = _Conn(sock, deadline, max_bytes)
        conn.send(CLIENT_HANDSHAKE)
        reply = conn.line()
        if not reply.upper().startswith(SERVER_HANDSHAKE.rsplit(" ", 1)[0]):
            raise RasQueryError("protocol", f"not a RAS server (answered {reply[:60]!r})")
        # RAS may gather for this long; it answers (partially) before our own deadline.
        conn.send(f"TIMEOUT {max(1, int(timeout_s) - 1)}\n")
        if (reply := conn.line()) != "OK":
            raise RasQueryError("protocol", f"RAS refused TIMEOUT ({reply[:60]!r})")
        conn.send("SET FORMAT json\n")
        reply = conn.line()
        if reply == "OK":
            fmt = "json"
        elif reply.upper().startswith("ERROR"):
            fmt = "text"  # NCCL < 2.28.7 knows no SET FORMAT: the text report
        else:
            raise RasQueryError("protocol", f"unexpected answer to SET FORMAT ({reply[:60]!r})")
        conn.send("VERBOSE STATUS\n" if fmt == "text" else "STATUS\n")
        body = conn.rest()
    try:
        return fmt, body.decode("utf-8")
    except UnicodeDecodeError:
        raise RasQueryError("malformed", "the RAS report is not UTF-8") from None
