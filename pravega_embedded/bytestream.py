"""Byte streams: a one-segment stream used as a seekable, append-only sequence of bytes.

Owns: ByteStream, an ``io.RawIOBase`` over one byte stream: writes append BYTES records at the
tail (``staging.append_bytes``); reads and seeks work at any offset between the head and the
durable tail; ``truncate_before`` moves the head.

Invariants:
  1. A byte stream has exactly one segment for its life (no scaling) and holds raw bytes, no
     event frames; the event API on it, and this API on an event stream, raise StreamKindError.
  2. Writes append at the tail whatever the read position (like a file opened "a+"); after a
     write the position is the end of the bytes written. Every write is atomic and contiguous,
     whatever its size (over 4 MiB it is staged and merged in one record, ``staging``), also
     with other writers of the same stream.
  3. A read returns only durable bytes. It waits for bytes already written (read your writes),
     so it returns min(size, bytes written before it - position), but never waits for bytes not
     yet written: at the tail it returns b"" (end of file, for now).

Thread-safety: one ByteStream object is used by one thread at a time; several objects (also in
several threads) may read and write one byte stream at once.
"""

from __future__ import annotations

import io
from typing import TYPE_CHECKING, Callable

from .errors import (
    InvalidPositionError,
    StoreClosedError,
    StreamNotFoundError,
    TruncatedDataError,
)
from .segsource import SegmentSource
from .staging import append_bytes

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer, WriteableBuffer

    from .engine import Engine
    from .stream import StreamState

__all__ = ["ByteStream"]


class ByteStream(io.RawIOBase):
    """Create with ``store.create_byte_stream(scope, stream)``; see docs/byte-streams.md."""

    def __init__(self, engine: "Engine", st: "StreamState", *, seal: Callable[[], None]) -> None:
        super().__init__()
        self._engine = engine
        self._seal = seal
        self._st = st
        self.scope, self.stream = st.scope, st.name
        (self._seg,) = st.segments.values()
        self._src = SegmentSource(engine, self._seg)
        self._pos = st.head.get(self._seg.segment_id, 0)
        self._written = 0  # journal end of this object's last write
        self._closing = False

    # ------------------------------------------------------------------ io.RawIOBase
    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _check(self) -> None:
        if self.closed:
            raise ValueError(f"I/O operation on closed byte stream {self._st.key}")
        if self._engine.closed:
            raise StoreClosedError(f"store {self._engine.path} is closed")
        if self._st.deleted:
            raise StreamNotFoundError(f"stream {self._st.key} was deleted")

    def write(self, b: ReadableBuffer) -> int:
        """Append ``b`` at the tail; returns its length. Durable after ``flush()``."""
        self._check()
        view = memoryview(b).cast("B")
        if not len(view):
            return 0
        self._written, self._pos = append_bytes(self._engine, self._st, self._seg, view,
                                                f"write to byte stream {self._st.key}")
        return len(view)

    def flush(self) -> None:
        """Wait until every byte written through this object is durable."""
        if self._closing:
            return  # io's close() calls flush() once more: nothing left to do
        self._check()  # ValueError once closed, as for files
        if self._written:
            self._engine.journal.wait_acked(self._written, None, what=f"flush of byte stream {self._st.key}")

    def readinto(self, b: WriteableBuffer) -> int:
        """Read up to ``len(b)`` bytes at the position into ``b``; 0 at the durable tail."""
        self._check()
        out = memoryview(b).cast("B")
        if not len(out):
            return 0
        seg, src, pos = self._seg, self._src, self._pos
        head = self._st.head.get(seg.segment_id, 0)
        if pos < head:
            raise TruncatedDataError(
                f"offset {pos} of byte stream {self._st.key} was truncated (head {head}); seek "
                f"to {head} or later"
            )
        journal = self._engine.journal
        visible = src.visible_length(journal.acked())
        if visible < min(seg.length, pos + len(out)):  # written, not yet durable: wait (inv. 3)
            journal.wait_acked(journal.written(), None, what=f"read of byte stream {self._st.key}")
            visible = src.visible_length(journal.acked())
        stop = min(visible, pos + len(out))
        got = 0
        while pos < stop:
            data, nxt = src.read_raw(pos, stop, copy=False)
            n = nxt - pos
            out[got : got + n] = data
            got += n
            pos = nxt
        self._pos = pos
        return got

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        """Move the read position (SEEK_END: the durable tail); returns it."""
        self._check()
        if isinstance(offset, bool) or not isinstance(offset, int):
            raise InvalidPositionError(f"seek offset must be an int, got {offset!r}")
        if whence == io.SEEK_SET:
            pos = offset
        elif whence == io.SEEK_CUR:
            pos = self._pos + offset
        elif whence == io.SEEK_END:
            pos = self.tail_offset() + offset
        else:
            raise InvalidPositionError(f"whence must be io.SEEK_SET, SEEK_CUR or SEEK_END, got {whence!r}")
        if pos < 0:
            raise InvalidPositionError(f"cannot seek byte stream {self._st.key} to {pos}")
        self._pos = pos
        return pos

    def tell(self) -> int:
        self._check()
        return self._pos

    def truncate(self, size: int | None = None) -> int:
        raise io.UnsupportedOperation(
            f"byte stream {self._st.key} is append-only; truncate_before(offset) drops a prefix"
        )

    def close(self) -> None:
        """Flush and close. Idempotent."""
        if self.closed:
            return
        try:
            if not self._engine.closed and not self._st.deleted:
                self.flush()
        finally:
            self._closing = True
            try:
                super().close()
            finally:
                self._closing = False

    # ------------------------------------------------------------------ byte-stream specific
    def head_offset(self) -> int:
        """The first readable offset (moved by ``truncate_before`` and retention)."""
        self._check()
        return self._st.head.get(self._seg.segment_id, 0)

    def tail_offset(self) -> int:
        """The offset after the last durable byte."""
        self._check()
        return self._src.visible_length(self._engine.journal.acked())

    def available(self) -> int:
        """Bytes readable now without waiting."""
        return max(0, self.tail_offset() - self._pos)

    def truncate_before(self, offset: int) -> None:
        """Drop every byte before ``offset`` (it becomes the head); journal files that held
        only dropped bytes are deleted."""
        self._check()
        if isinstance(offset, bool) or not isinstance(offset, int) or not 0 <= offset <= self._seg.length:
            raise InvalidPositionError(
                f"truncate_before needs an offset in [0, {self._seg.length}] of {self._st.key}, got {offset!r}"
            )
        engine = self._engine
        if engine.truncate(self._st, {self._seg.segment_id: offset}, "truncate"):
            engine.checkpoint()
            engine.reclaim()

    def seal(self) -> None:
        """Flush, then seal the stream: no more writes, by anyone."""
        self.flush()
        self._seal()

    def __repr__(self) -> str:
        state = " closed" if self.closed else f" position={self._pos}"
        return f"<ByteStream {self._st.key}{state}>"
