"""A connection to the owner of a shared store: one socket, the handshake, calls and their
answers, pipelined writes (docs/wire-protocol.md).

Invariants:
  1. A request and its answer are one exchange under the connection's lock; answers to earlier
     WRITE and BYTES frames (sent without waiting: only failures are answered) that arrive
     first are kept and raised by the next call (``raise_write_error``).
  2. Any failure inside an exchange closes the connection: where the next frame starts is
     unknown. Its loss raises ConnectionLostError from every call after.

Thread-safety: every method is thread-safe.
"""

from __future__ import annotations

import json
import os
import socket
import threading
from collections import deque
from dataclasses import dataclass
from typing import TYPE_CHECKING

from ..errors import ConnectionLostError, PravegaEmbeddedError, ProtocolError, storage_error
from ..writer import MAX_EVENT_SIZE
from .framing import FramedSocket
from .server import socket_path
from .values import decode_error, dumps, loads
from .wire import FRAME_MAX, EventsBody, Kind, WireEvent, encode_bytes_write, encode_hello, parse_events, parse_welcome

if TYPE_CHECKING:
    import ssl

__all__ = ["Connection", "TcpTarget", "with_large"]


@dataclass(frozen=True, slots=True)
class TcpTarget:
    """Where a TCP owner listens and how to talk to it (``pe.connect``)."""

    host: str
    port: int
    token: bytes
    ssl_context: "ssl.SSLContext | None" = None


class Connection:
    """One socket to the owner of the store at ``path`` (a directory), or over TCP to
    ``tcp`` (``path`` is then the URL, for messages)."""

    def __init__(self, path: str, timeout: float = 10.0, tcp: TcpTarget | None = None) -> None:
        self.path = path
        self.local = tcp is None  # ``path`` is the store's directory on this machine
        sock = _connect_tcp(tcp, timeout, path) if tcp is not None else _connect_unix(path, timeout)
        self._fs = FramedSocket(sock, f"the owner of store {path}")
        self._lock = threading.Lock()
        self._next = 1
        self._write_errors: deque[PravegaEmbeddedError] = deque()
        self._writes: set[int] = set()  # request ids of WRITEs not known to have failed
        try:
            self._fs.send(Kind.HELLO, 0, encode_hello(b"" if tcp is None else tcp.token))
            header, body = self._fs.recv(FRAME_MAX)
            if header.kind == Kind.ERROR:
                raise decode_error(body)
            if header.kind != Kind.WELCOME:
                raise ProtocolError(f"the owner answered a HELLO with kind {header.kind}")
            self.info = _welcome_info(parse_welcome(body).info)
        except TimeoutError:
            self._fs.close()
            raise ConnectionLostError(f"the owner of store {path} did not answer within {timeout} s") from None
        except BaseException:
            self._fs.close()
            raise
        sock.settimeout(None)

    def _request(self) -> int:
        rid = self._next
        self._next = rid + 1 if rid < 0xFFFFFFFF else 1
        return rid

    def call(self, handle: int, method: str, *args: object, **kwargs: object) -> object:
        """A CALL and its answer's value (RESULT), or its error raised."""
        body = dumps({"h": handle, "m": method, "a": list(args), "k": kwargs})
        kind, answer = self._exchange(Kind.CALL, body)
        if kind != Kind.RESULT:
            raise ProtocolError(f"the owner answered {method} with kind {kind}")
        return loads(answer)

    def read(self, handle: int, method: str, *args: object) -> EventsBody:
        """A CALL answered with EVENTS (a reader's read, fetch_event)."""
        return parse_events(self.fetch(Kind.EVENTS, handle, method, *args))

    def fetch(self, expect: int, handle: int, method: str, *args: object) -> bytes:
        """A CALL answered with a binary body of kind ``expect`` (EVENTS, ARROW, BYTES)."""
        kind, answer = self._exchange(Kind.CALL, dumps({"h": handle, "m": method, "a": list(args)}))
        if kind != expect:
            raise ProtocolError(f"the owner answered {method} with kind {kind}")
        return answer

    def _exchange(self, kind: int, body: bytes) -> tuple[int, bytes]:
        with self._lock:
            rid = self._request()
            try:
                self._fs.send(kind, rid, body)
                while True:
                    header, answer = self._fs.recv(FRAME_MAX)
                    if header.request == rid:
                        break
                    self._late(header.kind, header.request, answer)
            except BaseException:
                self._fs.close()  # where the next frame starts is unknown: the connection ends
                raise
        self.raise_write_error()
        if header.kind == Kind.ERROR:
            raise decode_error(answer)
        return header.kind, answer

    def _late(self, kind: int, request: int, body: bytes) -> None:
        """An answer to an earlier WRITE: only failures are answered (invariant 2)."""
        if kind != Kind.ERROR or request not in self._writes:
            raise ProtocolError(f"the owner sent kind {kind} for request {request}, which is not waiting")
        self._writes.discard(request)
        self._write_errors.append(decode_error(body))

    def collect(self) -> bool:
        """Take in the failures of earlier WRITEs that have arrived, without blocking; True if
        one waits to be raised (``raise_write_error``)."""
        with self._lock:
            try:
                while self._fs.readable():
                    header, answer = self._fs.recv(FRAME_MAX)
                    self._late(header.kind, header.request, answer)
            except BaseException:
                self._fs.close()
                raise
            return bool(self._write_errors)

    def write(self, body: bytes, kind: int = Kind.WRITE) -> None:
        """Send a WRITE without waiting for it (invariant 2)."""
        with self._lock:
            rid = self._request()
            if len(self._writes) > 100_000:
                self._writes.clear()  # ids of WRITEs long since applied
            self._writes.add(rid)
            try:
                self._fs.send(kind, rid, body)
            except BaseException:
                self._fs.close()
                raise

    def write_bytes(self, handle: int, data: bytes | bytearray | memoryview) -> None:
        """Send a BYTES write to a byte stream without waiting for it (invariant 1)."""
        self.write(encode_bytes_write(handle, data), Kind.BYTES)

    def raise_write_error(self) -> None:
        if self._write_errors:
            raise self._write_errors.popleft()

    def discard_write_errors(self) -> None:
        self._write_errors.clear()

    def close(self) -> None:
        self._fs.close()

    @property
    def closed(self) -> bool:
        return self._fs.closed


def _welcome_info(text: str) -> dict[str, object]:
    try:
        info = json.loads(text)
    except ValueError:
        raise ProtocolError("a WELCOME's info is not JSON") from None
    if not isinstance(info, dict):
        raise ProtocolError("a WELCOME's info is not a JSON object")
    return info


def _connect_unix(path: str, timeout: float) -> socket.socket:
    try:
        dirfd = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError as exc:
        raise storage_error(exc.errno or 0, "opening the store directory", path=path) from None
    try:
        try:
            sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        except OSError as exc:  # no socket could be made (out of descriptors, memory)
            raise storage_error(exc.errno or 0, "making a socket to the owner", path=path) from None
        try:
            sock.settimeout(timeout)
            sock.connect(socket_path(dirfd))
        except OSError as exc:  # no owner serving (yet, or any more): the caller may take the store
            sock.close()
            raise ConnectionLostError(f"cannot connect to the owner of store {path}: {exc}") from None
    finally:
        os.close(dirfd)
    return sock


def _connect_tcp(tcp: TcpTarget, timeout: float, url: str) -> socket.socket:
    try:
        sock = socket.create_connection((tcp.host, tcp.port), timeout=timeout)
    except OSError as exc:
        raise ConnectionLostError(f"cannot connect to {url}: {exc.strerror or exc}") from None
    if tcp.ssl_context is None:
        return sock
    try:
        return tcp.ssl_context.wrap_socket(sock, server_hostname=tcp.host)
    except (OSError, ValueError) as exc:  # ssl.SSLError (a bad certificate, ...) is an OSError
        sock.close()
        raise ConnectionLostError(f"the TLS handshake with {url} failed: {exc}") from None


def with_large(conn: Connection, handle: int, ev: WireEvent, meta: bytes) -> WireEvent:
    """The event with its payload, if the answer says it is a large one (its bytes are taken
    in parts, ``large_part``)."""
    m = loads(meta)
    size = m.get("large") if isinstance(m, dict) else None
    if size is None:
        return ev
    if isinstance(size, bool) or not isinstance(size, int) or size <= MAX_EVENT_SIZE or ev.event:
        raise ProtocolError(f"a large event's size {size!r} is not one")
    parts, got = [], 0
    while got < size:
        part = conn.fetch(Kind.BYTES, handle, "large_part", got)
        if not part or got + len(part) > size:
            raise ProtocolError(f"a large event's part at {got} of {size} bytes is {len(part)} bytes")
        parts.append(part)
        got += len(part)
    return ev._replace(event=b"".join(parts))
