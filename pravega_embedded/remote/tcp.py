"""Serving a store over TCP, and connecting to one: ``serve_tcp`` in the owner, ``pe.connect``
in a client on another machine or container (docs/multiprocess.md, "Serving over TCP").

Invariants:
  1. A TCP server needs tokens (auth), listens on loopback unless given another address, and
     is closed by the store's close, before the store's lock is released.
  2. ``connect`` speaks the same protocol as the unix socket: the store it returns is a
     ``RemoteStore`` with the same API; every call is checked against the token's grants.
  3. TLS is the ``ssl`` module's: the server loads a certificate and key; the client verifies
     the server against the system's CAs or ``cafile`` (``tls://`` URLs), never unverified
     unless given its own ``ssl_context``.

Thread-safety: functions; the server has its own threads.
"""

from __future__ import annotations

import os
import ssl
from urllib.parse import urlsplit

from ..errors import InvalidConfigurationError
from ..store import Store
from .auth import TokenTable, load_tokens
from .client import RemoteStore
from .connection import TcpTarget
from .server import OwnerServer

__all__ = ["serve_tcp", "connect", "parse_listen", "DEFAULT_PORT", "IDLE_TIMEOUT"]

DEFAULT_PORT = 9090
IDLE_TIMEOUT = 600.0  # seconds without a request before the owner closes a TCP connection


def parse_listen(text: str) -> tuple[str, int]:
    """``host:port`` (``[v6]:port``; a bare ``port`` is on loopback)."""
    host, sep, port = text.rpartition(":")
    if not sep:
        host, port = "127.0.0.1", text
    host = host.strip("[]") or "127.0.0.1"
    try:
        number = int(port)
    except ValueError:
        number = -1
    if not 0 <= number <= 65535:
        raise InvalidConfigurationError(f"listen address {text!r} is not host:port")
    return host, number


def serve_tcp(store: Store, listen: str = f"127.0.0.1:{DEFAULT_PORT}", *,
              tokens: "TokenTable | str | os.PathLike[str]",
              tls_cert: "str | os.PathLike[str] | None" = None,
              tls_key: "str | os.PathLike[str] | None" = None,
              idle_timeout: float | None = IDLE_TIMEOUT) -> OwnerServer:
    """Serve ``store`` (opened here, as its owner) on TCP at ``listen`` (invariant 1);
    ``tokens``: a TokenTable or a token file. Returns the server (``.address`` is where it
    listens: port 0 picks a free one); the store's close closes it."""
    if not isinstance(store, Store):
        raise InvalidConfigurationError("serve_tcp serves a store this process owns (pe.open as the owner)")
    table = tokens if isinstance(tokens, TokenTable) else load_tokens(tokens)
    ctx = None
    if tls_cert is not None or tls_key is not None:
        if tls_cert is None:
            raise InvalidConfigurationError("TLS needs a certificate (tls_cert) as well as a key")
        ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
        try:
            ctx.load_cert_chain(os.fspath(tls_cert), None if tls_key is None else os.fspath(tls_key))
        except (OSError, ssl.SSLError) as exc:
            raise InvalidConfigurationError(f"cannot load the TLS certificate {os.fspath(tls_cert)!r}: {exc}") from None
    if idle_timeout is not None and not (isinstance(idle_timeout, (int, float)) and idle_timeout > 0):
        raise InvalidConfigurationError(f"idle_timeout must be seconds > 0 or None, got {idle_timeout!r}")
    server = OwnerServer(store, address=parse_listen(listen), tokens=table, ssl_context=ctx,
                         idle_timeout=idle_timeout)
    try:
        store.add_server(server)
    except BaseException:
        server.close()
        raise
    return server


def connect(url: str, token: "str | bytes | None" = None, *, cafile: "str | os.PathLike[str] | None" = None,
            ssl_context: ssl.SSLContext | None = None, timeout: float = 10.0) -> RemoteStore:
    """A store served over TCP: ``tcp://host:port`` or ``tls://host:port`` (invariants 2, 3)."""
    parts = urlsplit(url)
    if parts.scheme not in ("tcp", "tls") or not parts.hostname:
        raise InvalidConfigurationError(f"connect takes tcp://host:port or tls://host:port, got {url!r}")
    try:
        port = parts.port or DEFAULT_PORT
    except ValueError:
        raise InvalidConfigurationError(f"{url!r} has a bad port") from None
    raw = token.encode() if isinstance(token, str) else (token or b"")
    if parts.scheme == "tls" and ssl_context is None:
        ssl_context = ssl.create_default_context(cafile=None if cafile is None else os.fspath(cafile))
    target = TcpTarget(parts.hostname, port, raw, ssl_context)
    return RemoteStore(url, tcp=target)
