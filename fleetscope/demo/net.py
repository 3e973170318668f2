"""Ports and HTTP probes of the demo (standard library only)."""

from __future__ import annotations

import json
import socket
import urllib.error
import urllib.request
from typing import Any

from fleetscope.errors import FleetscopeError


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        s.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True


def pick_port(host: str, preferred: int | None, default: int) -> int:
    """``preferred`` if given (it must be free), else ``default`` when free, else any free port."""
    if preferred is not None:
        if not port_free(host, preferred):
            raise FleetscopeError(f"port {preferred} on {host} is in use")
        return preferred
    if port_free(host, default):
        return default
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def pick_port_range(host: str, first: int, count: int) -> int:
    """The first port of ``count`` consecutive free ports, starting the search at ``first``."""
    for start in range(first, min(first + 2000, 65535 - count), count):
        if all(port_free(host, p) for p in range(start, start + count)):
            return start
    raise FleetscopeError(f"no {count} consecutive free ports from {first} on {host}")


def local_address(host: str) -> str:
    """Where a local client reaches a server listening on ``host`` (a wildcard means loopback)."""
    return "127.0.0.1" if host in ("0.0.0.0", "::", "") else host


def http_json(url: str, timeout: float = 3.0) -> Any:
    with urllib.request.urlopen(url, timeout=timeout) as resp:
        return json.loads(resp.read())


def http_ok(url: str, timeout: float = 2.0) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False
