"""Prometheus exporter-toolkit style ``--web.config.file``: TLS and basic auth.

The file has the same shape as the Go exporters' (``tls_server_config`` with ``cert_file``,
``key_file``, ``client_auth_type``, ``client_ca_file``, ``min_version``, ``max_version``;
``basic_auth_users`` mapping user names to bcrypt hashes; ``http_server_config.headers``), so one
file serves node_exporter, dcgm-exporter and fleetscope. Unknown keys are rejected, as the toolkit
does, so a typo does not silently disable auth; so are the toolkit options fleetscope cannot honour
(``client_allowed_sans``, ``cipher_suites``, ``curve_preferences``, inline ``cert``/``key``), rather
than pretending to apply them. The file is read once at startup (the toolkit re-reads it per request).

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
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

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


@dataclass
class WebConfig:
    """A parsed web config. ``users`` maps user name to bcrypt hash."""

    tls: dict[str, str] = field(default_factory=dict)
    users: dict[str, bytes] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)
    base_dir: Path = Path(".")
    _verified: dict[tuple[str, bytes], bool] = field(default_factory=dict, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

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
        """bcrypt check, cached per (user, password digest): bcrypt is slow on purpose."""
        hashed = self.users.get(user)
        if hashed is None:
            _checkpw(password.encode(), _DUMMY_HASH)
            return False
        key = (user, hashlib.sha256(password.encode()).digest())
        with self._lock:
            cached = self._verified.get(key)
        if cached is None:
            cached = _checkpw(password.encode(), hashed)
            with self._lock:
                if len(self._verified) > 1024:
                    self._verified.clear()
                self._verified[key] = cached
        return cached

    def authorized(self, header: str | None) -> bool:
        """True when no users are configured, or the Authorization header names a valid user."""
        if not self.users:
            return True
        if not header or not header.startswith("Basic "):
            return False
        try:
            user, sep, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
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
    if data.get("rate_limit"):
        log.warning("web config: rate_limit is not implemented by fleetscope and is ignored")

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
    )
