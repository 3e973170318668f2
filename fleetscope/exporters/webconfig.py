"""Prometheus exporter-toolkit style ``--web.config.file``: TLS and basic auth.

The file has the same shape as the Go exporters' (``tls_server_config`` with ``cert_file``,
``key_file``, ``client_auth_type``, ``client_ca_file``, ``min_version``, ``max_version``;
``basic_auth_users`` mapping user names to bcrypt hashes; ``http_server_config.headers``), so one
file serves node_exporter, dcgm-exporter and fleetscope. Unknown keys are rejected, as the toolkit
does, so a typo does not silently disable auth; so are the toolkit options fleetscope cannot honour
(``client_allowed_sans``, ``cipher_suites``, ``curve_preferences``, inline ``cert``/``key``), rather
than pretending to apply them. The file is read once at startup (the toolkit re-reads it per request).

``rate_limit`` is the toolkit's token bucket, refilled one request per ``interval`` (a Go duration:
``100ms``, ``1s``, ``1m30s``; ``0`` disables it) and holding up to ``burst`` requests; a request
beyond it is answered ``429 Too Many Requests``. Unlike the toolkit's single bucket, taken before
authentication (so 4 unauthenticated flooders made 29 of 30 real scrapes 429), each client address
first spends its own bucket of the same size, before any authentication work, and only an
authenticated request spends the server's shared one.

Basic auth follows the toolkit too: one bcrypt check at a time (bcrypt costs ~50 ms of CPU on
purpose), and every answer cached by (user, password) in a bounded cache, failures included, so a
flood of one wrong password costs one bcrypt, not one per request. Successes are kept apart from
failures, so a flood of distinct wrong passwords cannot evict the scrapers' cached success.

Example::

    tls_server_config:
      cert_file: node.crt
      key_file: node.key
    basic_auth_users:
      prometheus: $2b$10$...   # htpasswd -nBC 10 "" | tr -d ':\\n'
"""

from __future__ import annotations

import base64
import binascii
import hashlib
import logging
import re
import ssl
import threading
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from fleetscope.clientlimits import ClientBuckets
from fleetscope.errors import FleetscopeError

log = logging.getLogger(__name__)

_TOP_KEYS = {"tls_server_config", "basic_auth_users", "http_server_config", "rate_limit"}
_TLS_KEYS = {
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
    "prefer_server_cipher_suites",
}  # fmt: skip
#: Toolkit options that exist but that fleetscope does not implement: refused, never ignored.
_TLS_UNSUPPORTED = {"client_allowed_sans", "cipher_suites", "curve_preferences", "cert", "key", "client_ca"}
_HTTP_KEYS = {"http2", "headers"}
_RATE_KEYS = {"interval", "burst"}
_CLIENT_AUTH = {
    "NoClientCert": ssl.CERT_NONE,
    "RequestClientCert": ssl.CERT_OPTIONAL,
    "RequireAnyClientCert": ssl.CERT_REQUIRED,
    "VerifyClientCertIfGiven": ssl.CERT_OPTIONAL,
    "RequireAndVerifyClientCert": ssl.CERT_REQUIRED,
}
_TLS_VERSIONS = {
    "TLS10": ssl.TLSVersion.TLSv1,
    "TLS11": ssl.TLSVersion.TLSv1_1,
    "TLS12": ssl.TLSVersion.TLSv1_2,
    "TLS13": ssl.TLSVersion.TLSv1_3,
}
#: A syntactically valid bcrypt hash that matches nothing: checked against for unknown users so
#: that user names cannot be probed by timing.
_DUMMY_HASH = b"$2b$10$" + b"." * 53
#: Cached bcrypt answers: successes (a handful of scrapers) and failures, each bounded (LRU).
_SUCCESS_CACHE = 256
_FAILURE_CACHE = 4096
_DURATION_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")
_DURATION_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}


class TokenBucket:
    """golang.org/x/time/rate's ``Limiter.Allow`` (what the toolkit uses): ``1/interval`` per second."""

    def __init__(self, interval: float, burst: int) -> None:
        self.interval = interval
        self.burst = burst
        self._tokens = float(burst)
        self._at = time.monotonic()
        self._lock = threading.Lock()

    def allow(self) -> bool:
        with self._lock:
            now = time.monotonic()
            self._tokens = min(float(self.burst), self._tokens + (now - self._at) / self.interval)
            self._at = now
            if self._tokens >= 1.0:
                self._tokens -= 1.0
                return True
            return False


@dataclass
class WebConfig:
    """A parsed web config. ``users`` maps user name to bcrypt hash."""

    tls: dict[str, str] = field(default_factory=dict)
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    base_dir: Path = Path(".")
    #: ``rate_limit``: seconds per request and burst; ``interval`` 0 means no limit.
    rate_interval: float = 0.0
    rate_burst: int = 0
    _ok: OrderedDict[tuple[str, bytes], None] = field(default_factory=OrderedDict, repr=False)
    _failed: OrderedDict[tuple[str, bytes], None] = field(default_factory=OrderedDict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: One bcrypt at a time, as the toolkit: a flood of guesses gets one core, never all of them.
    _bcrypt_lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: bcrypt checks done (the cache's misses); tests and debugging read it.
    bcrypt_checks: int = 0

    def rate_limiter(self) -> TokenBucket | None:
        """The server's token bucket, or ``None`` without ``rate_limit``."""
        return TokenBucket(self.rate_interval, self.rate_burst) if self.rate_interval > 0 else None

    def client_rate_limiter(self) -> ClientBuckets | None:
        """One token bucket of ``rate_limit``'s size per client address, or ``None`` without it."""
        if self.rate_interval <= 0:
            return None
        return ClientBuckets(lambda: TokenBucket(self.rate_interval, self.rate_burst))

    @property
    def tls_enabled(self) -> bool:
        return bool(self.tls)

    def ssl_context(self) -> ssl.SSLContext | None:
        if not self.tls:
            return None
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.minimum_version = _TLS_VERSIONS[self.tls.get("min_version", "TLS12")]
        if "max_version" in self.tls:
            ctx.maximum_version = _TLS_VERSIONS[self.tls["max_version"]]
        try:
            ctx.load_cert_chain(self._path("cert_file"), self._path("key_file"))
        except (OSError, ssl.SSLError) as exc:
            raise FleetscopeError(f"web config: cannot load TLS certificate or key: {exc}") from None
        ctx.verify_mode = _CLIENT_AUTH[self.tls.get("client_auth_type", "NoClientCert")]
        if "client_ca_file" in self.tls:
            try:
                ctx.load_verify_locations(self._path("client_ca_file"))
            except (OSError, ssl.SSLError) as exc:
                raise FleetscopeError(f"web config: cannot load client_ca_file: {exc}") from None
        return ctx

    def _path(self, key: str) -> str:
        p = Path(self.tls[key])
        return str(p if p.is_absolute() else self.base_dir / p)

    def check_password(self, user: str, password: str) -> bool:
        """bcrypt check, its answer cached per (user, password digest): bcrypt is slow on purpose.

        An unknown user is checked against a dummy hash (so user names cannot be probed by timing)
        and cached like any failure.
        """
        key = (user, hashlib.sha256(password.encode()).digest())
        with self._lock:
            if key in self._ok:
                self._ok.move_to_end(key)
                return True
            if key in self._failed:
                self._failed.move_to_end(key)
                return False
        hashed = self.users.get(user)
        with self._bcrypt_lock:
            self.bcrypt_checks += 1
            ok = _checkpw(password.encode(), hashed if hashed is not None else _DUMMY_HASH)
        ok = ok and hashed is not None
        with self._lock:
            cache, size = (self._ok, _SUCCESS_CACHE) if ok else (self._failed, _FAILURE_CACHE)
            cache[key] = None
            while len(cache) > size:
                cache.popitem(last=False)
        return ok

    def authorized(self, header: str | None) -> bool:
        """True when no users are configured, or the Authorization header names a valid user.

        The scheme is case-insensitive (RFC 9110 section 11.1), as Go's ``Request.BasicAuth``.
        """
        if not self.users:
            return True
        if not header:
            return False
        scheme, _, credentials = header.strip().partition(" ")
        if scheme.lower() != "basic":
            return False
        try:
            decoded = base64.b64decode(credentials.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError, ValueError):
            return False
        user, sep, password = decoded.partition(":")
        return bool(sep) and self.check_password(user, password)


def _checkpw(password: bytes, hashed: bytes) -> bool:
    import bcrypt

    try:
        return bcrypt.checkpw(password, hashed)
    except ValueError:  # bcrypt >= 5 refuses passwords over 72 bytes: they match nothing
        return False


def _mapping(value: Any, where: str, p: Path) -> dict:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise FleetscopeError(f"web config {p}: {where} must be a mapping")
    return value


def _check_keys(section: dict, allowed: set[str], where: str, p: Path) -> None:
    unsupported = sorted(set(section) & _TLS_UNSUPPORTED) if where == "tls_server_config" else []
    if unsupported:
        raise FleetscopeError(
            f"web config {p}: {where} option(s) {unsupported} are not supported by fleetscope"
        )
    unknown = sorted(set(section) - allowed)
    if unknown:
        raise FleetscopeError(f"web config {p}: unknown {where} key(s) {unknown}")


def _read_yaml(p: Path) -> object:
    try:
        return yaml.safe_load(p.read_text())
    except OSError as exc:
        raise FleetscopeError(f"web config {p}: {exc.strerror or exc}") from None
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        one_line = " ".join(str(exc).split())
        raise FleetscopeError(f"web config {p}: not valid YAML: {one_line}") from None


def _tls_config(tls: dict, p: Path) -> dict:
    """``tls_server_config`` checked (keys, the files each mode needs, versions); returned as is."""
    _check_keys(tls, _TLS_KEYS, "tls_server_config", p)
    if tls and not (tls.get("cert_file") and tls.get("key_file")):
        raise FleetscopeError(f"web config {p}: tls_server_config needs cert_file and key_file")
    auth = tls.get("client_auth_type", "NoClientCert")
    if auth not in _CLIENT_AUTH:
        raise FleetscopeError(f"web config {p}: unknown client_auth_type {auth!r}")
    if auth != "NoClientCert" and not tls.get("client_ca_file"):
        raise FleetscopeError(f"web config {p}: client_auth_type {auth} needs client_ca_file")
    for key in ("min_version", "max_version"):
        if key in tls and tls[key] not in _TLS_VERSIONS:
            raise FleetscopeError(f"web config {p}: unknown {key} {tls[key]!r} (TLS10..TLS13)")
    tls.pop("prefer_server_cipher_suites", None)  # a no-op in Go's crypto/tls as well
    return tls


def load_web_config(path: str | Path | None) -> WebConfig:
    """Read and validate a web config file; ``None`` means no TLS and no auth."""
    if path is None:
        return WebConfig()
    p = Path(path)
    data = _mapping(_read_yaml(p), "the top level", p)
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise FleetscopeError(f"web config {p}: unknown key(s) {unknown}")

    tls = _tls_config(_mapping(data.get("tls_server_config"), "tls_server_config", p), p)
    http = _mapping(data.get("http_server_config"), "http_server_config", p)
    _check_keys(http, _HTTP_KEYS, "http_server_config", p)
    if http.get("http2"):
        log.info("web config: http2 requested; fleetscope serves HTTP/1.x")
    headers = _mapping(http.get("headers"), "http_server_config.headers", p)
    interval, burst = _rate_limit(_mapping(data.get("rate_limit"), "rate_limit", p), p)

    users: dict[str, bytes] = {}
    for user, hashed in _mapping(data.get("basic_auth_users"), "basic_auth_users", p).items():
        h = str(hashed).encode()
        if not h.startswith((b"$2a$", b"$2b$", b"$2y$")) or len(h) != 60:
            raise FleetscopeError(f"web config {p}: password of user {user!r} is not a bcrypt hash")
        users[str(user)] = h
    return WebConfig(
        tls={k: str(v) for k, v in tls.items()},
        users=users,
        headers={str(k): str(v) for k, v in headers.items()},
        base_dir=p.parent,
        rate_interval=interval,
        rate_burst=burst,
    )


def parse_duration(value: object) -> float | None:
    """A Go duration (``1m30s``, ``250ms``, ``0``) in seconds; ``None`` if it is not one."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        return float(value) if value == 0 else None  # Go wants a unit on anything but 0
    text = str(value).strip()
    if text == "0":
        return 0.0
    pos, total = 0, 0.0
    while pos < len(text):
        m = _DURATION_PART.match(text, pos)
        if m is None:
            return None
        total += float(m[1]) * _DURATION_UNITS[m[2]]
        pos = m.end()
    return total if text else None


def _rate_limit(section: dict, p: Path) -> tuple[float, int]:
    """``rate_limit`` checked: (seconds per request, burst); (0, 0) when absent or disabled."""
    _check_keys(section, _RATE_KEYS, "rate_limit", p)
    if not section:
        return 0.0, 0
    interval = parse_duration(section.get("interval", 0))
    if interval is None:
        raise FleetscopeError(
            f"web config {p}: rate_limit.interval {section.get('interval')!r} is not a duration (e.g. 1s, "
            "100ms)"
        )
    burst = section.get("burst", 0)
    if isinstance(burst, bool) or not isinstance(burst, int) or burst < 0:
        raise FleetscopeError(f"web config {p}: rate_limit.burst must be a whole number >= 0, not {burst!r}")
    if interval > 0 and burst < 1:
        # Go's limiter with burst 0 refuses every request: that is a typo, not a policy.
        raise FleetscopeError(f"web config {p}: rate_limit.burst must be at least 1 when interval is set")
    return interval, burst
