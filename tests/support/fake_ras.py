"""A fake NCCL RAS listener on 127.0.0.1 speaking the client protocol (src/ras/client_support.cc):
``CLIENT PROTOCOL n`` -> ``SERVER PROTOCOL 2``, ``TIMEOUT n`` -> ``OK``, ``SET FORMAT json`` -> ``OK``
(or ``ERROR: Unknown command`` as NCCL < 2.28.7 answers), ``STATUS`` / ``VERBOSE STATUS`` -> the
report, then it closes the connection, as NCCL does.

``mode`` makes it misbehave: ``slow`` (never answers STATUS until stopped), ``close`` (closes as
soon as a client connects), ``endless`` (answers STATUS with an endless stream), ``trickle`` (one
byte of the report every 0.2 s), ``not_ras`` (answers the handshake with an HTTP line).
"""

from __future__ import annotations

import socket
import threading
from pathlib import Path

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "hang" / "ras"


class FakeRas:
    def __init__(self, report: str = "", mode: str = "ok", json_format: bool = True) -> None:
        self.report = report
        self.mode = mode
        self.json_format = json_format
        self.stop_event = threading.Event()
        self.commands: list[str] = []
        self.connections = 0
        self.sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        self.sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        self.sock.bind(("127.0.0.1", 0))
        self.sock.listen(16)
        self.port = self.sock.getsockname()[1]
        self.thread = threading.Thread(target=self._serve, daemon=True)

    @classmethod
    def fixture(cls, name: str, **kw: object) -> FakeRas:
        return cls((FIXTURES / name).read_text(), **kw)  # type: ignore[arg-type]

    @property
    def address(self) -> str:
        return f"127.0.0.1:{self.port}"

    def __enter__(self) -> FakeRas:
        self.thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop_event.set()
        try:
            self.sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() (closing alone does not, on Linux)
        except OSError:
            pass  # a test closed it already
        self.sock.close()
        self.thread.join(5)
        assert not self.thread.is_alive(), "the fake RAS listener did not stop"

    def _serve(self) -> None:
        while not self.stop_event.is_set():
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            self.connections += 1
            threading.Thread(target=self._client, args=(conn,), daemon=True).start()

    def _client(self, conn: socket.socket) -> None:
        with conn:
            if self.mode == "close":
                return
            buf = b""
            while not self.stop_event.is_set():
                try:
                    chunk = conn.recv(4096)
                except OSError:
                    return
                if not chunk:
                    return
                buf += chunk
                while b"\n" in buf:
                    raw, _, buf = buf.partition(b"\n")
                    if not self._command(conn, raw.decode().strip()):
                        return

    def _command(self, conn: socket.socket, cmd: str) -> bool:
        self.commands.append(cmd)
        low = cmd.lower()
        try:
            if low.startswith("client protocol "):
                not_ras = self.mode == "not_ras"
                conn.sendall(b"HTTP/1.1 400 Bad Request\n" if not_ras else b"SERVER PROTOCOL 2\n")
            elif low.startswith("timeout "):
                conn.sendall(b"OK\n")
            elif low.startswith("set format "):
                conn.sendall(b"OK\n" if self.json_format else f"ERROR: Unknown command {cmd}\n".encode())
            elif low in ("status", "verbose status"):
                self._status(conn)
                return False  # NCCL closes after the report
            else:
                conn.sendall(f"ERROR: Unknown command {cmd}\n".encode())
        except OSError:
            return False
        return True

    def _status(self, conn: socket.socket) -> None:
        if self.mode == "slow":
            self.stop_event.wait(60)
        elif self.mode == "endless":
            block = b'{"communicators": [' + b"0" * 65536
            while not self.stop_event.is_set():
                conn.sendall(block)
        elif self.mode == "trickle":
            for ch in self.report.encode():
                if self.stop_event.wait(0.2):
                    return
                conn.sendall(bytes([ch]))
        else:
            conn.sendall(self.report.encode())
