"""Hostile HTTP peers on 127.0.0.1 for the robustness tests: a server that trickles its answer a
byte at a time, and one that sends a huge answer. Real sockets, real threads; stopped on exit."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def trickling_server(phase: str = "body", gap_s: float = 0.2) -> Iterator[str]:
    """A server that reads the request, then sends one byte every ``gap_s`` seconds: of its header
    (``phase="head"``) or, after a whole header announcing 1 MB, of its body (``"body"``)."""
    stop = threading.Event()
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)

    def feed(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                if phase == "body":
                    conn.sendall(
                        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\n"
                        b"Content-Length: 1000000\r\n\r\n"
                    )
                data = b"HTTP/1.1 200 OK\r\nX-Slow: " + b"x" * 100000 if phase == "head" else b" " * 1000000
                for i in range(len(data)):
                    if stop.wait(gap_s):
                        return
                    conn.sendall(data[i : i + 1])
            except OSError:
                return

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            threading.Thread(target=feed, args=(conn,), daemon=True).start()

    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}"
    finally:
        stop.set()
        thread.join(5)
        srv.close()


@contextmanager
def oversize_server(size: int, chunked: bool = False) -> Iterator[tuple[str, list[int]]]:
    """A server answering every request with a ``size``-byte JSON-looking body (with a
    Content-Length, or chunked without one); yields the URL and a list of bytes actually sent."""
    stop = threading.Event()
    srv = socket.create_server(("127.0.0.1", 0))
    srv.settimeout(0.1)
    sent: list[int] = []
    block = b" " * 65536

    def answer(conn: socket.socket) -> None:
        with conn:
            try:
                conn.recv(65536)
                n = 0
                if chunked:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
                    while n < size and not stop.is_set():
                        conn.sendall(b"%x\r\n%s\r\n" % (len(block), block))
                        n += len(block)
                    conn.sendall(b"0\r\n\r\n")
                else:
                    conn.sendall(b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n" % size)
                    while n < size and not stop.is_set():
                        conn.sendall(block[: min(len(block), size - n)])
                        n += min(len(block), size - n)
            except OSError:
                pass
            finally:
                sent.append(n)

    def accept() -> None:
        while not stop.is_set():
            try:
                conn, _ = srv.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            t = threading.Thread(target=answer, args=(conn,), daemon=True)
            answering.append(t)
            t.start()

    answering: list[threading.Thread] = []
    thread = threading.Thread(target=accept, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{srv.getsockname()[1]}", sent
    finally:
        stop.set()
        thread.join(5)
        for t in answering:  # each has said what it sent before the caller looks at ``sent``
            t.join(5)
        srv.close()


def wait_until(predicate, timeout: float = 10.0, every: float = 0.05) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(every)
    return predicate()
