"""Prometheus exporter-toolkit style ``--web.config.file``: TLS and basic auth.

The file has the same shape as the Go exporters' (``tls_server_config`` with ``cert_file``,
``key_file``, ``client_auth_type``, ``client_ca_file``, ``min_version``; ``basic_auth_users`` mapping
user names to bcrypt hashes), so one file serves node_exporter, dcgm-exporter and fleetscope.
Unknown keys are rejected, as the toolkit does, so a typo does not silently disable auth.
"""

from __future__ import annotations

import hashlib
import hmac
import ssl
import threading
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from fleetscope.errors import FleetscopeError

_TLS_KEYS = {
    "cert_file", "key_file", "client_auth_type", "client_ca_file", "min_version", "max_version",
    "cipher_suites", "curve_preferences", "prefer_server_cipher_suites", "client_allowed_sans",
}  # fmt: skip
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


@dataclass
class WebConfig:
    """A parsed web config. ``users`` maps user name to bcrypt hash."""

    tls: dict[str, str] = field(default_factory=dict)
    users: dict[str, bytes] = field(default_factory=dict)
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
        auth = self.tls.get("client_auth_type", "NoClientCert")
        ctx.verify_mode = _CLIENT_AUTH[auth]
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
            # Spend the same time as a real check so user names cannot be probed by timing.
            import bcrypt

            bcrypt.checkpw(b"x", b"$2b$10$" + b"." * 53)
            return False
        key = (user, hashlib.sha256(password.encode()).digest())
        with self._lock:
            cached = self._verified.get(key)
        if cached is None:
            import bcrypt

            cached = bcrypt.checkpw(password.encode(), hashed)
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
        import base64
        import binascii

        try:
            user, _, password = base64.b64decode(header[6:], validate=True).decode().partition(":")
        except (binascii.Error, UnicodeDecodeError):
            return False
        ok = self.check_password(user, password)
        return hmac.compare_digest(b"1" if ok else b"0", b"1")


def load_web_config(path: str | Path | None) -> WebConfig:
    """Read and validate a web config file; ``None`` means no TLS and no auth."""
    if path is None:
        return WebConfig()
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text()) or {}
    except OSError as exc:
        raise FleetscopeError(f"web config {p}: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise FleetscopeError(f"web config {p}: not valid YAML: {exc}") from None
    if not isinstance(data, dict):
        raise FleetscopeError(f"web config {p}: expected a mapping at the top level")
    unknown = set(data) - {"tls_server_config", "basic_auth_users", "http_server_config", "rate_limit"}
    if unknown:
        raise FleetscopeError(f"web config {p}: unknown keys {sorted(unknown)}")
    tls = data.get("tls_server_config") or {}
    if not isinstance(tls, dict):
        raise FleetscopeError(f"web config {p}: tls_server_config must be a mapping")
    if set(tls) - _TLS_KEYS:
        raise FleetscopeError(
            f"web config {p}: unknown tls_server_config keys {sorted(set(tls) - _TLS_KEYS)}"
        )
    if tls and not ("cert_file" in tls and "key_file" in tls):
        raise FleetscopeError(f"web config {p}: tls_server_config needs cert_file and key_file")
    if tls.get("client_auth_type", "NoClientCert") not in _CLIENT_AUTH:
        raise FleetscopeError(f"web config {p}: unknown client_auth_type {tls['client_auth_type']!r}")
    for key in ("min_version", "max_version"):
        if key in tls and tls[key] not in _TLS_VERSIONS:
            raise FleetscopeError(f"web config {p}: unknown {key} {tls[key]!r}")
    users_raw = data.get("basic_auth_users") or {}
    if not isinstance(users_raw, dict):
        raise FleetscopeError(f"web config {p}: basic_auth_users must be a mapping")
    users: dict[str, bytes] = {}
    for user, hashed in users_raw.items():
        h = str(hashed).encode()
        if not h.startswith((b"$2a$", b"$2b$", b"$2y$")):
            raise FleetscopeError(f"web config {p}: password of user {user!r} is not a bcrypt hash")
        users[str(user)] = h
    return WebConfig(tls={k: str(v) for k, v in tls.items()}, users=users, base_dir=p.parent)
