"""Frames over a socket: read one whole frame (its size checked before its body is read) and
write frames, with the socket's failures turned into the library's errors.

Owns: ``FramedSocket``, the one place where socket errors of either side become
ConnectionLostError (the peer went away) or ProtocolError (the bytes are not the protocol).

Invariants:
  1. ``recv`` reads the header, checks its length against the cap given (wire invariant 1)
     and the kind's own cap, and only then reads the body, growing its buffer as bytes arrive:
     memory follows what a peer sent, not what it claimed.
  2. Frames written by several threads never interleave: ``send`` holds the send lock for a
     whole frame.

Thread-safety: one reader thread at a time; ``send`` from any thread.
"""

from __future__ import annotations

import select
import socket
import threading
import time
from collections.abc import Mapping

from ..errors import ConnectionLostError, ProtocolError
from .wire import HEADER_SIZE, Header, encode_frame, parse_header

__all__ = ["FramedSocket", "CHUNK"]

CHUNK = 1 << 20  # a frame's body is read (and its buffer grown) this much at a time


class FramedSocket:
    """A connected socket that carries frames. ``what`` names the peer in errors."""

    def __init__(self, sock: socket.socket, what: str) -> None:
        self.sock = sock
        self.what = what
        self._send_lock = threading.Lock()
        self.closed = False

    def recv(self, cap: int, kind_caps: Mapping[int, int] | None = None,
             deadline: float | None = None) -> tuple[Header, bytes]:
        """The next frame: its header and body (invariant 1). ``kind_caps``: smaller caps for
        some kinds, checked on the header too. ``deadline`` (monotonic): the whole frame must
        have arrived by then (TimeoutError). ConnectionLostError at the end of the stream or on
        a socket error; ProtocolError for a bad header."""
        header = parse_header(self._exact(HEADER_SIZE, deadline), cap)
        if kind_caps is not None and header.length > kind_caps.get(header.kind, cap):
            raise ProtocolError(f"a frame of kind {header.kind} and {header.length} bytes is over "
                                f"its limit of {kind_caps[header.kind]} bytes")
        return header, self._exact(header.body_size, deadline) if header.body_size else b""

    def _exact(self, n: int, deadline: float | None) -> bytes:
        """``n`` bytes, the buffer growing as they arrive (a peer that claims a size and sends
        nothing makes nothing be allocated)."""
        buf = bytearray()
        while len(buf) < n:
            if deadline is not None:
                left = deadline - time.monotonic()
                if left <= 0:
                    raise TimeoutError(f"{self.what} did not send a whole message in time")
                self.sock.settimeout(left)
            try:
                chunk = self.sock.recv(min(n - len(buf), CHUNK))
            except TimeoutError:
                raise  # the caller's deadline (the handshake's)
            except OSError as exc:
                raise ConnectionLostError(f"the connection to {self.what} was lost: {exc}") from None
            if not chunk:
                raise ConnectionLostError(
                    f"the connection to {self.what} was closed"
                    + (" in the middle of a message" if buf else ""))
            buf += chunk
        return bytes(buf)

    def send(self, kind: int, request: int, body: bytes = b"") -> None:
        """Write one frame whole (invariant 2)."""
        frame = encode_frame(kind, request, body)
        with self._send_lock:
            try:
                self.sock.sendall(frame)
            except OSError as exc:
                raise ConnectionLostError(f"the connection to {self.what} was lost: {exc}") from None

    def readable(self) -> bool:
        """True if bytes (or the end of the stream) wait to be read, without blocking."""
        pending = getattr(self.sock, "pending", None)  # TLS: bytes already decrypted
        if pending is not None and pending():
            return True
        try:
            r, _, _ = select.select([self.sock], [], [], 0)
        except (OSError, ValueError):
            return True  # the next recv reports it
        return bool(r)

    def close(self) -> None:
        """Idempotent. Shuts the socket down first so a thread blocked in recv returns."""
        if self.closed:
            return
        self.closed = True
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
