"""Port picking: a taken port is never handed out, an explicitly asked-for one must be free."""

from __future__ import annotations

import socket

import pytest

from fleetscope.demo.net import local_address, pick_port, pick_port_range, port_free
from fleetscope.errors import FleetscopeError


def _listening() -> socket.socket:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    s.listen()
    return s


def test_pick_port_prefers_the_asked_for_then_the_default_else_any_free() -> None:
    with _listening() as taken:
        port = taken.getsockname()[1]
        assert not port_free("127.0.0.1", port)
        with pytest.raises(FleetscopeError, match=f"port {port} on 127.0.0.1 is in use"):
            pick_port("127.0.0.1", port, 9090)
        other = pick_port("127.0.0.1", None, port)
        assert other != port
        assert port_free("127.0.0.1", other)
        assert pick_port("127.0.0.1", None, other) == other


def test_pick_port_range_skips_a_block_holding_a_taken_port() -> None:
    with _listening() as taken:
        port = taken.getsockname()[1]
        start = pick_port_range("127.0.0.1", port, 3)
        assert not start <= port < start + 3
        assert all(port_free("127.0.0.1", p) for p in range(start, start + 3))


def test_a_wildcard_listen_address_is_reached_on_loopback() -> None:
    assert local_address("0.0.0.0") == "127.0.0.1"
    assert local_address("::") == "127.0.0.1"
    assert local_address("10.0.0.5") == "10.0.0.5"
