"""The owner's server: a store opened by one process serves every other process that opens
the same directory, over a unix socket inside it (docs/multiprocess.md).

Owns: ``<store>/owner.sock`` (created 0600 while the store lock is held, removed at close),
the accepting thread, one thread per connection, the handshake, the peer check, the caps.

Invariants:
  1. Only a peer running as the owner's user is served (SO_PEERCRED); any other gets an
     ERROR (PermissionDeniedError) and is disconnected before a byte of its is read.
  2. Before the handshake a frame is at most ``HELLO_MAX`` bytes and the whole HELLO must
     arrive within ``HANDSHAKE_TIMEOUT`` (a deadline, not a per-read timeout); after it, a CALL
     is at most ``CALL_MAX`` and any frame at most ``FRAME_MAX``, both checked on the header
     before the body is read, whose buffer grows only as bytes arrive (framing invariant 1).
  3. At most ``MAX_CONNECTIONS`` connections are served, of which at most ``PENDING_MAX``
     still in their handshake (``PENDING_PER_PEER`` from one TCP host); one more is refused
     with an ERROR.
  4. A failed call answers ERROR and the connection goes on; bytes that are not the protocol
     answer ERROR (ProtocolError) and close the connection. Nothing a client sends can stop
     the server or another connection.
  5. ``close`` (the store's close calls it first) stops accepting, wakes and disconnects every
     client (their calls raise ConnectionLostError), closes their handles and removes the
     socket, before the store releases its lock.
  6. Over TCP (``address``): TLS first if configured (within the handshake's deadline), then
     the HELLO's token must be in ``tokens`` (auth invariant 1) before any other frame is
     read; a wrong or missing token is refused alike. Each call is checked against the
     token's grants (session). A connection idle ``idle_timeout`` seconds between requests
     is closed. Nothing else differs from the unix socket.

Thread-safety: ``close`` from any thread; each connection's thread drives its own session.
Lock order: ``_lock`` (the connection table) is never held while calling into the store.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import struct
import threading
import time
from typing import TYPE_CHECKING, Callable

from ..errors import (
    ConnectionLostError,
    InvalidConfigurationError,
    PermissionDeniedError,
    PravegaEmbeddedError,
    ProtocolError,
)
from .auth import FULL, TokenTable
from .framing import FramedSocket
from .session import POLL_S, Session
from .values import dumps, encode_error, loads
from .wire import (
    FRAME_MAX,
    HELLO_MAX,
    VERSION,
    Kind,
    encode_events,
    encode_welcome,
    parse_bytes_write,
    parse_hello,
    parse_write,
)

if TYPE_CHECKING:
    import ssl

    from ..store import Store

__all__ = ["OwnerServer", "SOCKET_NAME", "MAX_CONNECTIONS", "PENDING_MAX", "HANDSHAKE_TIMEOUT", "CALL_MAX",
           "socket_path"]

LOG = logging.getLogger("pravega_embedded.remote")

SOCKET_NAME = "owner.sock"
MAX_CONNECTIONS = 256
PENDING_MAX = 64  # connections not yet through their handshake, in all ...
PENDING_PER_PEER = 16  # ... and from one host (TCP): a flood of silent sockets is bounded
HANDSHAKE_TIMEOUT = 5.0
CALL_MAX = 1 << 20
CLOSE_WAIT_S = 5.0  # close waits this long in all for the connection threads
_UCRED = struct.Struct("3i")  # pid, uid, gid
_KIND_CAPS = {Kind.CALL: CALL_MAX + 5}  # frame lengths count kind and request id
_NO_META = dumps({"ctx": [], "runs": [], "marker": None})  # a group read that found nothing
ACCEPT_BACKOFF_S = 0.1  # after a failed accept (out of descriptors, memory)


def socket_path(dirfd: int) -> str:
    """The socket's path through an open descriptor of the store directory: short whatever the
    directory's path (a unix socket path is at most 107 bytes)."""
    return f"/proc/self/fd/{dirfd}/{SOCKET_NAME}"


class OwnerServer:
    """Serves ``store`` on ``<store>/owner.sock`` until ``close``; or, given ``address``, on
    TCP (invariant 6): ``tokens`` required, ``ssl_context`` for TLS, ``idle_timeout`` seconds
    without a request end a connection."""

    def __init__(self, store: "Store", *, address: tuple[str, int] | None = None,
                 tokens: "TokenTable | None" = None, ssl_context: "ssl.SSLContext | None" = None,
                 idle_timeout: float | None = None) -> None:
        self.store = store
        self._lock = threading.Lock()
        self._conns: dict[FramedSocket, Session | None] = {}
        self._threads: set[threading.Thread] = set()
        self._on_idle: list[Callable[[], None]] = []  # called once no connection is open
        self._closed = False
        self._uid = os.geteuid()
        self._tokens, self._ssl, self._idle = tokens, ssl_context, idle_timeout
        self._dirfd: int | None = None
        self._path: str | None = None
        if address is not None:
            if tokens is None:
                raise InvalidConfigurationError("serving over TCP needs tokens (auth invariant 1)")
            family = socket.AF_INET6 if ":" in address[0] else socket.AF_INET
            try:
                self._listener = socket.create_server(address, family=family, backlog=64)
            except OSError as exc:
                raise InvalidConfigurationError(f"cannot listen on {address[0]}:{address[1]}: "
                                                f"{exc.strerror or exc}") from None
            self.address: tuple[str, int] = self._listener.getsockname()[:2]
            where = f"tcp {self.address[0]}:{self.address[1]}"
        else:
            self._listen_unix(store)
            self.address = ("", 0)
            where = "unix"
        self._info = json.dumps({"pid": os.getpid(), "durability": store.durability,
                                 "large_event_limit": store.large_event_limit})
        self._acceptor = threading.Thread(target=self._accept_loop, name=f"pe-owner-accept-{where}",
                                          daemon=True)
        self._acceptor.start()

    def _listen_unix(self, store: "Store") -> None:
        self._dirfd = os.open(store.path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
        try:
            self._path = socket_path(self._dirfd)
            try:
                os.unlink(self._path)  # a dead owner's: we hold the store lock
            except FileNotFoundError:
                pass
            self._listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            try:
                self._listener.bind(self._path)
                os.chmod(self._path, 0o600)  # before listen(): nobody could connect yet
                self._listener.listen(64)
            except BaseException:
                self._listener.close()
                raise
        except BaseException:
            os.close(self._dirfd)
            raise

    # ------------------------------------------------------------------ accepting
    def _accept_loop(self) -> None:
        failing = False
        while True:
            try:
                sock, _ = self._listener.accept()
            except OSError as exc:
                if self._closed:
                    return
                if not failing:
                    LOG.error("store %s: accepting a connection failed (%s); trying again every "
                              "%.1f s", self.store.path, exc, ACCEPT_BACKOFF_S)
                failing = True
                time.sleep(ACCEPT_BACKOFF_S)  # EMFILE and the like do not go away at once
                continue
            failing = False
            if self._closed:
                sock.close()
                return
            fs = FramedSocket(sock, "a client")
            peer = _peer_host(sock)
            with self._lock:
                pending = [f for f, sess in self._conns.items() if sess is None]
                full = len(self._conns) >= MAX_CONNECTIONS
                busy = len(pending) >= PENDING_MAX or \
                    sum(1 for f in pending if _peer_host(f.sock) == peer) >= PENDING_PER_PEER
                if not full and not busy:
                    self._conns[fs] = None
            if full or busy:  # invariant 3
                _refuse(fs, InvalidConfigurationError(
                    f"the owner of store {self.store.path} serves at most {MAX_CONNECTIONS} "
                    "connections: close some" if full else
                    f"the owner of store {self.store.path} has too many connections still in their "
                    "handshake: try again"))
                continue
            t = threading.Thread(target=self._serve, args=(fs,), name="pe-owner-conn", daemon=True)
            with self._lock:
                self._threads.add(t)
            t.start()

    def _serve(self, fs: FramedSocket) -> None:
        session = None
        try:
            session = self._handshake(fs)
            if session is not None:
                self._loop(fs, session)
        except Exception:  # noqa: BLE001 - logged; the server goes on (invariant 4)
            LOG.exception("store %s: serving %s failed", self.store.path, fs.what)
        finally:
            if session is not None:
                session.close()
            fs.close()
            with self._lock:
                self._conns.pop(fs, None)
                self._threads.discard(threading.current_thread())
                idle, self._on_idle = (self._on_idle, []) if not self._conns else ([], self._on_idle)
            for fn in idle:
                fn()

    def _peer(self, fs: FramedSocket) -> bool:
        """Invariant 1 on the unix socket; on TCP the TLS handshake, within the handshake's
        deadline. False: refused (and closed)."""
        sock = fs.sock
        if self._path is not None:
            pid, uid, _ = _UCRED.unpack(sock.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _UCRED.size))
            fs.what = f"client pid {pid}"
            if uid != self._uid:
                LOG.warning("store %s: refused pid %d of uid %d (the store is served to uid %d only)",
                            self.store.path, pid, uid, self._uid)
                _refuse(fs, PermissionDeniedError(
                    f"store {self.store.path} is served only to processes of uid {self._uid}"))
                return False
            return True
        try:
            host, port = sock.getpeername()[:2]
        except OSError:
            fs.close()
            return False
        fs.what = f"client {host}:{port}"
        if self._ssl is not None:
            try:
                sock.settimeout(HANDSHAKE_TIMEOUT)
                fs.sock = self._ssl.wrap_socket(sock, server_side=True)
            except (OSError, ValueError) as exc:  # ssl.SSLError is an OSError; timeouts too
                LOG.info("store %s: TLS handshake with %s failed: %s", self.store.path, fs.what, exc)
                fs.close()
                sock.close()
                return False
        return True

    def _handshake(self, fs: FramedSocket) -> Session | None:
        """Invariants 1, 2 and 6: the peer, then its HELLO (and token); the session, or None."""
        if not self._peer(fs):
            return None
        sock = fs.sock
        try:
            header, body = fs.recv(HELLO_MAX, deadline=time.monotonic() + HANDSHAKE_TIMEOUT)
            if header.kind != Kind.HELLO:
                raise ProtocolError(f"the first message must be a HELLO, not kind {header.kind}")
            hello = parse_hello(body)
            if not hello.min_version <= VERSION <= hello.max_version:
                raise ProtocolError(f"the owner speaks protocol version {VERSION}, the client "
                                    f"{hello.min_version}..{hello.max_version}: upgrade one of them")
        except TimeoutError:
            _refuse(fs, ProtocolError(f"no HELLO within {HANDSHAKE_TIMEOUT} s"))
            return None
        except ProtocolError as exc:
            _refuse(fs, exc)
            return None
        except PravegaEmbeddedError:
            return None  # gone already
        grants = FULL
        if self._tokens is not None:  # invariant 6: the token, before anything else is read
            found = self._tokens.lookup(hello.token)
            if found is None:
                LOG.warning("store %s: refused %s: %s token", self.store.path, fs.what,
                            "a wrong" if hello.token else "no")
                _refuse(fs, PermissionDeniedError(
                    "the owner needs a valid token: pe.connect(url, token=...) with a token from "
                    "its token file"))
                return None
            grants = found
            fs.what = f"{fs.what} (token {grants.name!r})"
        sock.settimeout(None)
        with self._lock:
            if self._closed:
                return None
            session = self._conns[fs] = Session(self.store, fs.what,
                                                lambda: self._closed or fs.closed or fs.readable(),
                                                self.store.reader_timeout, grants,
                                                local=self._path is not None)
        fs.send(Kind.WELCOME, header.request, encode_welcome(VERSION, self._info))
        return session

    # ------------------------------------------------------------------ serving
    def _loop(self, fs: FramedSocket, session: Session) -> None:
        while True:
            try:
                deadline = None if self._idle is None else time.monotonic() + self._idle
                header, body = fs.recv(FRAME_MAX, _KIND_CAPS, deadline=deadline)
            except TimeoutError:
                LOG.info("store %s: %s was idle %s s: disconnected", self.store.path, fs.what, self._idle)
                _refuse(fs, ConnectionLostError(f"the connection was idle over {self._idle} s"))
                return
            except PravegaEmbeddedError as exc:
                if isinstance(exc, ProtocolError):
                    _refuse(fs, exc)
                return
            try:
                self._one(fs, session, header.kind, header.request, body)
            except ProtocolError as exc:  # invariant 4: not the protocol: answer, then close
                _refuse(fs, exc, header.request)
                return
            except PravegaEmbeddedError as exc:
                if fs.closed or self._closed:
                    return
                try:
                    fs.send(Kind.ERROR, header.request, encode_error(exc))
                except PravegaEmbeddedError:
                    return
            except Exception as exc:  # noqa: BLE001 - a bug: logged, reported, the server goes on
                if not isinstance(exc, TimeoutError):  # a wait that timed out is an answer
                    LOG.exception("store %s: a call of %s failed", self.store.path, fs.what)
                try:
                    fs.send(Kind.ERROR, header.request, encode_error(exc))
                except PravegaEmbeddedError:
                    return

    def _one(self, fs: FramedSocket, session: Session, kind: int, request: int, body: bytes) -> None:
        if kind in (Kind.WRITE, Kind.WRITE_ATOMIC):
            session.write(parse_write(body), atomic=kind == Kind.WRITE_ATOMIC)
            return
        if kind == Kind.BYTES:
            session.write_bytes(*parse_bytes_write(body))
            return
        if kind != Kind.CALL:
            raise ProtocolError(f"a client does not send messages of kind {kind}")
        msg = loads(body)
        if not isinstance(msg, dict) or not isinstance(msg.get("m"), str):
            raise ProtocolError("a CALL is a map with a method name")
        handle, method = msg.get("h", 0), msg["m"]
        args, kwargs = msg.get("a", []), msg.get("k", {})
        if not isinstance(handle, int) or not isinstance(args, list) or not isinstance(kwargs, dict) \
                or not all(isinstance(k, str) for k in kwargs):
            raise ProtocolError("a CALL's handle is an int, its args a list, its kwargs a map")
        if method == "read" and handle:
            timeout, max_events, ranges = (list(args) + [None, 1, False][len(args):])[:3]
            if not isinstance(max_events, int) or not isinstance(ranges, bool):
                raise InvalidConfigurationError("read takes (timeout, max_events, ranges)")
            fs.send(Kind.EVENTS, request, self._read(fs, session, handle, timeout, max_events, ranges))
        elif method == "reread" and handle:
            events, end, meta = session.reread(handle, args[0] if args else None)
            fs.send(Kind.EVENTS, request, encode_events(events, end, meta))
        elif method == "fetch_event" and handle == 0:
            events, meta = session.fetch(args[0] if args else None)
            fs.send(Kind.EVENTS, request, encode_events(events, False, meta))
        elif method == "arrow" and handle:
            part, last = session.arrow(handle, *args[:3])
            fs.send(Kind.ARROW, request, (b"\x01" if last else b"\x00") + part)
        elif method == "read_bytes" and handle:
            fs.send(Kind.BYTES, request, session.read_bytes(handle, args[0] if args else None))
        elif method == "large_part":
            fs.send(Kind.BYTES, request, session.large_part(handle, args[0] if args else None))
        else:
            fs.send(Kind.RESULT, request, dumps(session.call(handle, method, args, kwargs)))

    def _read(self, fs: FramedSocket, session: Session, handle: int, timeout: object,
              max_events: int, ranges: bool) -> bytes:
        """A read that may wait: it waits in steps, and gives up when its client is gone."""
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise InvalidConfigurationError(f"a read timeout is seconds or None, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            left = POLL_S if deadline is None else max(0.0, deadline - time.monotonic())
            events, end, meta = session.read(handle, min(POLL_S, left), max_events, ranges)
            if events or end or meta is not None and meta != _NO_META or \
                    (deadline is not None and time.monotonic() >= deadline):
                return encode_events(events, end, meta)
            if self._closed or fs.readable():  # a client waiting for an answer sends nothing
                return encode_events(events, end, meta)

    # ------------------------------------------------------------------ closing
    def when_idle(self, fn: Callable[[], None]) -> bool:
        """True if no connection is open; else False, and ``fn()`` is called once the last
        one has gone (a store dropped without close() stays open for its clients)."""
        with self._lock:
            if not self._conns or self._closed:
                return True
            self._on_idle.append(fn)
            return False

    def close(self) -> None:
        """Invariant 5. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            conns = list(self._conns.items())
            threads = list(self._threads)
        try:
            self._listener.shutdown(socket.SHUT_RDWR)  # wakes accept()
        except OSError:
            pass
        self._listener.close()
        if self._path is not None and self._dirfd is not None:
            try:
                os.unlink(self._path)
            except OSError:
                pass
            os.close(self._dirfd)
        for fs, session in conns:
            fs.close()
            if session is not None:
                session.close()  # wakes a read waiting in the store
        deadline = time.monotonic() + CLOSE_WAIT_S  # a call stuck in the store is not waited out
        self._acceptor.join(max(0.0, deadline - time.monotonic()))
        for t in threads:
            t.join(max(0.0, deadline - time.monotonic()))


def _refuse(fs: FramedSocket, exc: PravegaEmbeddedError, request: int = 0) -> None:
    """Answer ERROR and disconnect (invariants 1, 3, 4)."""
    try:
        fs.send(Kind.ERROR, request, encode_error(exc))
    except PravegaEmbeddedError:
        pass
    fs.close()


def _peer_host(sock: socket.socket) -> str:
    """The peer's host (TCP), or "" (a unix socket's peers are told apart by uid instead)."""
    try:
        peer = sock.getpeername()
    except OSError:
        return ""
    return str(peer[0]) if isinstance(peer, tuple) else ""
