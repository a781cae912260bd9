"""Frames over a socket: read one whole frame (its size checked before its body is read) and
write frames, with the socket's failures turned into the library's errors.

Owns: ``FramedSocket``, the one place where socket errors of either side become
ConnectionLostError (the peer went away) or ProtocolError (the bytes are not the protocol).

Invariants:
  1. ``recv`` reads the header, checks its length against the cap given (wire invariant 1),
     and only then allocates and reads the body.
  2. Frames written by several threads never interleave: ``send`` holds the send lock for a
     whole frame.

Thread-safety: one reader thread at a time; ``send`` from any thread.
"""

from __future__ import annotations

import select
import socket
import threading

from ..errors import ConnectionLostError
from .wire import HEADER_SIZE, Header, encode_frame, parse_header

__all__ = ["FramedSocket"]


class FramedSocket:
    """A connected socket that carries frames. ``what`` names the peer in errors."""

    def __init__(self, sock: socket.socket, what: str) -> None:
        self.sock = sock
        self.what = what
        self._send_lock = threading.Lock()
        self.closed = False

    def recv(self, cap: int) -> tuple[Header, bytes]:
        """The next frame: its header and body (invariant 1). ConnectionLostError at the end
        of the stream or on a socket error; ProtocolError for a bad header; socket.timeout
        (TimeoutError) when the socket's timeout passes."""
        head = self._exact(HEADER_SIZE)
        header = parse_header(head, cap)
        return header, self._exact(header.body_size) if header.body_size else b""

    def _exact(self, n: int) -> bytes:
        buf = bytearray(n)
        view = memoryview(buf)
        got = 0
        while got < n:
            try:
                k = self.sock.recv_into(view[got:], n - got)
            except TimeoutError:
                raise  # the caller's deadline (the handshake's)
            except OSError as exc:
                raise ConnectionLostError(f"the connection to {self.what} was lost: {exc}") from None
            if k == 0:
                raise ConnectionLostError(
                    f"the connection to {self.what} was closed"
                    + (" in the middle of a message" if got else ""))
            got += k
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
