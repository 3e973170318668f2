"""Limits per client address, so no client without credentials can starve the others.

A shared cap alone (the exporter's 64 connections, ``serve``'s 256, the web config's one
``rate_limit`` bucket) lets one address take all of it: 200 clients trickling a header line every
5 s held the exporter's 64 slots, 300 idle connections held ``serve``'s, 4 unauthenticated flooders
emptied the one bucket before authentication. Each address here gets its own share:
:class:`ClientSlots` counts its open connections, :class:`ClientBuckets` gives it its own token
bucket. Both are bounded in the addresses they remember.

A share per address is not enough on its own: four addresses hold four quarters. So the servers
also admit in two pools (:class:`Admission`): a connection starts in the open pool (bounded in
total, and in time by the server's request-head deadline), and when the open pool is full the
oldest connection still waiting for its request head is cut to make room, so idle and trickling
clients are pushed out by newcomers, never the other way round. A request that presents valid
credentials moves its connection to a separate pool that unauthenticated connections cannot fill,
whatever the number of source addresses.

Standard library only: the node agent imports this.
"""

from __future__ import annotations

import threading
from collections import Counter, OrderedDict
from collections.abc import Callable, Hashable
from typing import Protocol

#: Client addresses a :class:`ClientBuckets` remembers; the least recently seen is forgotten first.
MAX_CLIENTS = 4096


def per_client_share(total: int) -> int:
    """Connections one address may hold of ``total``: a quarter (a Prometheus HA pair, a person
    with curl and a spare), at least one."""
    return max(1, total // 4)


class ClientSlots:
    """Open connections per client address, at most ``per_client`` each. Thread-safe."""

    def __init__(self, per_client: int) -> None:
        self.per_client = per_client
        self._open: Counter[str] = Counter()
        self._lock = threading.Lock()

    def acquire(self, client: str) -> bool:
        with self._lock:
            if self._open[client] >= self.per_client:
                return False
            self._open[client] += 1
            return True

    def release(self, client: str) -> None:
        with self._lock:
            self._open[client] -= 1
            if self._open[client] <= 0:
                del self._open[client]

    def open(self, client: str) -> int:
        with self._lock:
            return self._open.get(client, 0)


class Limiter(Protocol):
    def allow(self) -> bool: ...


class ClientBuckets:
    """One rate limiter per client address (made by ``make``), for the :data:`MAX_CLIENTS` most
    recently seen addresses. Thread-safe."""

    def __init__(self, make: Callable[[], Limiter], max_clients: int = MAX_CLIENTS) -> None:
        self.make = make
        self.max_clients = max_clients
        self._buckets: OrderedDict[str, Limiter] = OrderedDict()
        self._lock = threading.Lock()

    def allow(self, client: str) -> bool:
        with self._lock:
            bucket = self._buckets.get(client)
            if bucket is None:
                bucket = self._buckets[client] = self.make()
                if len(self._buckets) > self.max_clients:
                    self._buckets.popitem(last=False)
            else:
                self._buckets.move_to_end(client)
        return bucket.allow()


_WAITING, _BUSY, _AUTHENTICATED, _CUT = "waiting", "busy", "authenticated", "cut"


class Admission:
    """The two connection pools of a server. Thread-safe.

    * The open pool (``open_limit``): every connection starts here, *waiting* for its request head.
      When the pool is full, a newcomer takes the place of the connection that has waited longest
      (it is cut: ``cut()`` is called, and the connection's own :meth:`release` then changes
      nothing); only when no connection is waiting (every one has a request being answered) is
      the newcomer refused.
    * The authenticated pool (``authenticated_limit``): a connection whose request head carries
      valid credentials moves here (:meth:`head_received`) and stays until it closes; nothing in
      the open pool can take its place or cut it.

    Keys are whatever identifies a connection for its whole life (a file descriptor, a protocol
    object); ``release`` must be called before the key can be reused.
    """

    def __init__(self, open_limit: int, authenticated_limit: int) -> None:
        self.open_limit = max(1, open_limit)
        self.authenticated_limit = max(1, authenticated_limit)
        self.open = 0
        self.authenticated = 0
        #: Connections cut to make room (a refused newcomer is counted by the server that refuses it).
        self.cut = 0
        self._state: dict[Hashable, str] = {}
        self._waiting: OrderedDict[Hashable, Callable[[], None]] = OrderedDict()
        self._lock = threading.Lock()

    def admit(self, key: Hashable, cut: Callable[[], None]) -> bool:
        """Admit a new connection to the open pool (cutting the longest-waiting one if it is full);
        False when it is full of connections being answered."""
        with self._lock:
            if self.open >= self.open_limit:
                if not self._waiting:
                    return False
                victim, victim_cut = self._waiting.popitem(last=False)
                self._state[victim] = _CUT
                self.cut += 1
                try:
                    victim_cut()
                except OSError:
                    pass
            else:
                self.open += 1
            self._state[key] = _WAITING
            self._waiting[key] = cut
            return True

    def head_received(self, key: Hashable, authenticated: bool) -> bool:
        """A whole request head came in. With valid credentials the connection moves to the
        authenticated pool. False when the connection was cut meanwhile, or its credentials are
        valid but the authenticated pool is full (answer 503)."""
        with self._lock:
            state = self._state.get(key)
            if state is None or state == _CUT:
                return False
            self._waiting.pop(key, None)
            if state == _AUTHENTICATED:
                return True
            if authenticated:
                if self.authenticated >= self.authenticated_limit:
                    self._state[key] = _BUSY
                    return False
                self.open -= 1
                self.authenticated += 1
                self._state[key] = _AUTHENTICATED
                return True
            self._state[key] = _BUSY
            return True

    def answered(self, key: Hashable, cut: Callable[[], None]) -> None:
        """A kept-alive connection of the open pool waits for its next request head: it may be cut
        again (as the newest waiter)."""
        with self._lock:
            if self._state.get(key) == _BUSY:
                self._state[key] = _WAITING
                self._waiting[key] = cut

    def release(self, key: Hashable) -> None:
        """The connection is closing (call it before its key can be reused)."""
        with self._lock:
            state = self._state.pop(key, None)
            self._waiting.pop(key, None)
            if state in (_WAITING, _BUSY):
                self.open -= 1
            elif state == _AUTHENTICATED:
                self.authenticated -= 1
