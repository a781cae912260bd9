"""A client of a shared store: the handle ``pe.open`` returns in a process that is not the
owner, with the store's API, every call carried to the owner (docs/multiprocess.md).

Owns: ``RemoteStore``, ``RemoteWriter`` and ``RemoteReader`` (the other handles are in
``handles``; the socket is ``connection.Connection``).

Invariants:
  1. Each writer and each reader has a connection of its own, so a reader waiting at the tail
     never holds up a writer or an admin call.
  2. A writer numbers its events as the owner's writer would (``last_sequence + 1``, ...) and
     sends them in batches (WRITE) without waiting; the owner writes them with those numbers,
     so a batch resent to a new owner is dropped as a duplicate. A WRITE is answered only when
     it fails; the failure is raised by the writer's next call.
  3. ``flush`` returns once every event written before it is durable in the owner.
  6. A writer keeps every batch it sent until the owner reports it durable; after a failure
     (raised by the next call, never dropped, also when the linger thread met it) it sends
     them all again, in order, before anything new: the owner drops what it has, so a failed
     batch is never skipped and a later one never makes it look durable.
  4. A reader takes events in batches; ``position()`` is just after the last event it
     returned, not after the batch (``EventStreamReader.position_before`` in the owner).
  5. The connection's loss raises ConnectionLostError from every call, and the handle is
     dead: the application opens the store again.
  7. ``write_event`` takes no lock: the batch being filled is swapped out (by a full batch,
     the linger thread, ``flush`` or ``close``, each under the writer's lock) only when the
     writing thread is outside the per-event critical region, by the in-process writer's
     handshake (``writer`` invariant 6): it raises ``_busy`` then checks ``_drain_pending``;
     a drainer raises ``_drain_pending`` then waits for ``_busy`` to fall. ``close`` marks
     the writer closed inside that handshake, so no event gets in after its last batch.

Thread-safety: every public method is thread-safe (a connection's lock is held for a whole
request and answer; a writer's lock for its buffer), except that, as in process, a writer's
``write_event``/``write_events`` are called from one thread at a time (one writer per thread).
"""

from __future__ import annotations

import os
import struct
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Protocol, Sequence, TypeVar

from ..batch import SegmentRange, Truncation
from ..config import one_stream, stream_configuration
from ..errors import (
    ConnectionLostError,
    EventTooLargeError,
    InvalidConfigurationError,
    InvalidSequenceError,
    PravegaEmbeddedError,
    ProtocolError,
    ReaderClosedError,
    SerializationError,
    StoreClosedError,
    WriterClosedError,
)
from ..events import EventPointer, EventRead
from ..readergroup.config import ReaderGroupConfig
from ..routing import encode_key
from ..serializers import Serializer, resolve
from ..streamcut import StreamCut
from ..timelookup import Timestamp, iso_utc, timestamp_ns
from ..transactions import TransactionInfo
from ..writer import MAX_EVENT_SIZE, MAX_PENDING_EVENTS
from .connection import Connection, TcpTarget, with_large
from .handles import (
    RemoteByteStream,
    RemoteReaderGroup,
    RemoteSegmentWatcher,
    RemoteSlice,
    RemoteTransactionalWriter,
)
from .values import Handle
from .wire import Kind, WireEvent, encode_write, encode_write_parts, key_part

if TYPE_CHECKING:
    from ..background import StoreStatus
    from ..config import StreamConfiguration
    from ..stream import StreamInfo
    from ..tiering import TieringStatus
    from ..watch import SegmentCountChange
    from ..watermarks import TimeWindow

class _Closeable(Protocol):
    def close(self) -> None: ...


_H = TypeVar("_H", bound=_Closeable)

__all__ = ["RemoteStore", "RemoteWriter", "RemoteReader", "connect_local"]

READ_BATCH = 1024  # events a reader asks for at once
KEY_CACHE = 4096  # routing keys a writer keeps encoded
WRITE_MAX = 16 << 20  # a writer sends its buffer before it takes more than this in a WRITE
ATOMIC_MAX = 64 << 20  # the largest write_events batch from a client (under wire.FRAME_MAX)
EVENT_OVERHEAD = 6  # a WRITE's bytes per event besides key and payload (a frame header)
_PARTS_MAX = 3 * MAX_PENDING_EVENTS  # a batch's parts: three per event
_U32 = struct.Struct("<I").pack  # a frame's payload length
_SMALL = 1024
_U32_SMALL = [_U32(n) for n in range(_SMALL)]  # ... made once for small events (the hot path)
UNACKED_MAX = 32 << 20  # a writer keeps this much sent but not known durable, then flushes
LARGE_PART = 16 << 20  # a large event goes in BYTES frames of this size


def connect_local(path: str, deadline: float) -> "RemoteStore":
    """A client of the owner of the store at ``path``, trying until ``deadline`` (monotonic)
    while the owner is still starting to serve."""
    while True:
        try:
            return RemoteStore(path)
        except ConnectionLostError:
            if time.monotonic() >= deadline:
                raise
            time.sleep(0.02)


class RemoteStore:
    """A store opened by another process, used from this one: the same API as ``Store``
    (docs/multiprocess.md lists what is not carried yet). Close it (or use ``with``)."""

    def __init__(self, path: str, tcp: TcpTarget | None = None) -> None:
        self.path = os.path.abspath(path) if tcp is None else path
        self._tcp = tcp
        self._conn = Connection(self.path, tcp=tcp)
        info = self._conn.info
        self.durability = str(info.get("durability", "fsync"))
        self.owner_pid = info.get("pid")
        self._handles: set[_Closeable] = set()
        self._lock = threading.Lock()
        self._fetch_lock = threading.Lock()
        self._closed = False

    def _call(self, method: str, *args: object, **kwargs: object) -> object:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        return self._conn.call(0, method, *args, **kwargs)

    # ------------------------------------------------------------------ admin
    def create_scope(self, scope: str, *, exist_ok: bool = False) -> bool:
        return bool(self._call("create_scope", scope, exist_ok=exist_ok))

    def list_scopes(self) -> list[str]:
        return list(self._call("list_scopes"))  # type: ignore[call-overload]

    def delete_scope(self, scope: str) -> None:
        self._call("delete_scope", scope)

    def create_stream(self, scope: str, stream: str, config: "StreamConfiguration | int | None" = None, *,
                      exist_ok: bool = False) -> bool:
        return bool(self._call("create_stream", scope, stream, stream_configuration(config), exist_ok=exist_ok))

    def list_streams(self, scope: str) -> list[str]:
        return list(self._call("list_streams", scope))  # type: ignore[call-overload]

    def stream_info(self, scope: str, stream: str) -> "StreamInfo":
        return self._call("stream_info", scope, stream)  # type: ignore[return-value]

    def tiered_bytes(self, scope: str, stream: str) -> int:
        return int(self._call("tiered_bytes", scope, stream))  # type: ignore[call-overload]

    def seal_stream(self, scope: str, stream: str) -> None:
        self._call("seal_stream", scope, stream)

    def delete_stream(self, scope: str, stream: str) -> None:
        self._call("delete_stream", scope, stream)

    def scale_stream(self, scope: str, stream: str, seal: list[int],
                     new_ranges: list[tuple[float, float]]) -> None:
        self._call("scale_stream", scope, stream, list(seal), [tuple(r) for r in new_ranges])

    def update_stream(self, scope: str, stream: str, config: "StreamConfiguration") -> None:
        self._call("update_stream", scope, stream, config)

    def truncate_stream(self, scope: str, stream: str, cut: "StreamCut") -> None:
        self._call("truncate_stream", scope, stream, cut)

    def reclaim(self) -> int:
        return int(self._call("reclaim"))  # type: ignore[call-overload]

    def checkpoint(self) -> int:
        return int(self._call("checkpoint"))  # type: ignore[call-overload]

    def status(self) -> "StoreStatus":
        return self._call("status")  # type: ignore[return-value]

    def tiering_status(self) -> "TieringStatus":
        return self._call("tiering_status")  # type: ignore[return-value]

    def flush_tier2(self, timeout: float | None = None) -> None:
        self._call("flush_tier2", timeout)

    def list_reader_groups(self) -> list[str]:
        return list(self._call("list_reader_groups"))  # type: ignore[call-overload]

    def fetch_event(self, pointer: EventPointer, *, serializer: Serializer | str | None = None) -> EventRead:
        """Read the one event an EventPointer points to."""
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        with self._fetch_lock:  # a large event's parts are the connection's until all taken
            (ev,), _, meta = self._conn.read(0, "fetch_event", pointer)
            if meta is not None:
                ev = with_large(self._conn, 0, ev, meta)
        return _event_read(ev, resolve(serializer), (pointer.scope, pointer.stream))

    # ------------------------------------------------------------------ writers and readers
    def create_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                      serializer: Serializer | str | None = None, linger: float = 0.001,
                      batch_bytes: int = 256 * 1024,
                      automatically_note_time: bool = False) -> "RemoteWriter":
        """A writer whose events go to the owner in batches (invariants 1 and 2)."""
        ser = resolve(serializer)
        conn = self._open_connection()
        try:
            h = conn.call(0, "create_writer", scope, stream, writer_id, linger=linger,
                          batch_bytes=batch_bytes, automatically_note_time=automatically_note_time)
            if not isinstance(h, Handle):
                raise ProtocolError("create_writer did not answer a handle")
        except BaseException:
            conn.close()
            raise
        w = RemoteWriter(conn, h, scope, stream, ser, batch_bytes, linger, self._forget)
        self._keep(w)
        return w

    def create_reader(self, scope: str, stream: str, start: "StreamCut | None" = None,
                      end: "StreamCut | None" = None, *,
                      serializer: Serializer | str | None = None,
                      starting_timestamp: "Timestamp | None" = None) -> "RemoteReader":
        """A standalone reader (invariants 1 and 4)."""
        ser = resolve(serializer)
        if starting_timestamp is not None:
            if start is not None:
                raise InvalidConfigurationError("give start or starting_timestamp, not both")
            start = self.get_stream_cut_at(scope, stream, starting_timestamp)
        conn = self._open_connection()
        try:
            h = conn.call(0, "create_reader", scope, stream, start, end)
            if not isinstance(h, Handle):
                raise ProtocolError("create_reader did not answer a handle")
        except BaseException:
            conn.close()
            raise
        r = RemoteReader(conn, h, scope, stream, ser, self._forget)
        self._keep(r)
        return r

    # ------------------------------------------------------------------ groups, transactions, ...
    def create_reader_group(self, group_name: str, config: "ReaderGroupConfig | list[tuple[str, str]] | str",
                            stream: str | None = None, *, exist_ok: bool = False,
                            starting_timestamp: "Timestamp | None" = None) -> RemoteReaderGroup:
        config = one_stream(config, stream)  # type: ignore[assignment]
        if isinstance(config, str):
            config = [config]  # type: ignore[list-item]
        if not isinstance(config, ReaderGroupConfig):
            config = [x if isinstance(x, str) else tuple(x) for x in config]  # type: ignore[misc]
        kwargs: dict[str, object] = {"exist_ok": exist_ok}
        if starting_timestamp is not None:  # the store's lookup, at the owner: sent as UTC text
            kwargs["starting_timestamp"] = iso_utc(timestamp_ns(starting_timestamp, "starting_timestamp"))
        return self._group(self._call("create_reader_group", group_name, config, **kwargs))

    def get_reader_group(self, group_name: str) -> RemoteReaderGroup:
        return self._group(self._call("get_reader_group", group_name))

    def delete_reader_group(self, group_name: str) -> None:
        self._call("delete_reader_group", group_name)

    def _group(self, h: object) -> RemoteReaderGroup:
        if not isinstance(h, Handle):
            raise ProtocolError("a reader group call did not answer a handle")
        return RemoteReaderGroup(self._conn, h, self._open_connection, self._keep, self._forget)

    def create_transactional_writer(self, scope: str, stream: str, writer_id: str | None = None, *,
                                    serializer: Serializer | str | None = None) -> RemoteTransactionalWriter:
        ser = resolve(serializer)
        conn, h = self._open_handle("create_transactional_writer", scope, stream, writer_id)
        return self._keep(RemoteTransactionalWriter(conn, h, scope, stream, ser, self._forget))

    def create_byte_stream(self, scope: str, stream: str,
                           config: "StreamConfiguration | None" = None) -> RemoteByteStream:
        conn, h = self._open_handle("create_byte_stream", scope, stream, config)
        return self._keep(RemoteByteStream(conn, h, self._forget))

    def watch_segments(self, scope: str, stream: str,
                       callback: "Callable[[SegmentCountChange], object] | None" = None, *,
                       initial: bool = True) -> RemoteSegmentWatcher:
        from ..errors import InvalidConfigurationError
        if callback is not None and not callable(callback):
            raise InvalidConfigurationError(f"callback must be callable, got {callback!r}")
        conn, h = self._open_handle("watch_segments", scope, stream, initial=initial)
        return self._keep(RemoteSegmentWatcher(conn, h, callback, self._forget))

    def read_slice(self, scope: str, stream: str, start: "StreamCut | None" = None,
                   end: "StreamCut | None" = None, *,
                   serializer: Serializer | str | None = None) -> RemoteSlice:
        """The events between two cuts, as a snapshot the owner holds (close it when done;
        the owner keeps the last few a connection made)."""
        ser = resolve(serializer)
        h = self._call("read_slice", scope, stream, start, end)
        if not isinstance(h, Handle):
            raise ProtocolError("read_slice did not answer a handle")
        return RemoteSlice(self._conn, h, scope, stream, ser)

    def get_segments(self, scope: str, stream: str, start: "StreamCut | None" = None,
                     end: "StreamCut | None" = None, *, max_bytes: int | None = None) -> "list[SegmentRange]":
        """As ``Store.get_segments``."""
        out = self._call("get_segments", scope, stream, start, end, max_bytes=max_bytes)
        if not isinstance(out, list) or not all(isinstance(r, SegmentRange) for r in out):
            raise ProtocolError("get_segments did not answer a list of SegmentRange")
        return out

    def read_segment_range(self, rng: "SegmentRange", *,
                           serializer: Serializer | str | None = None) -> RemoteSlice:
        """As ``Store.read_segment_range``: a snapshot the owner holds (close it when done)."""
        ser = resolve(serializer)
        h = self._call("read_segment_range", rng)
        if not isinstance(h, Handle):
            raise ProtocolError("read_segment_range did not answer a handle")
        return RemoteSlice(self._conn, h, rng.scope, rng.stream, ser)

    def get_next_stream_cut(self, scope: str, stream: str, start: "StreamCut | None",
                            approx_bytes: int, *, max_events: int | None = None,
                            end: "StreamCut | None" = None, min_events: int | None = None) -> "StreamCut":
        """As ``Store.get_next_stream_cut``."""
        kwargs: dict[str, object] = {"max_events": max_events, "end": end}
        if min_events is not None:  # an owner of the last release knows no min_events
            kwargs["min_events"] = min_events
        out = self._call("get_next_stream_cut", scope, stream, start, approx_bytes, **kwargs)
        if not isinstance(out, StreamCut):
            raise ProtocolError("get_next_stream_cut did not answer a StreamCut")
        return out

    def get_stream_cut_at(self, scope: str, stream: str, timestamp: Timestamp) -> "StreamCut":
        """As ``Store.get_stream_cut_at`` (the time is sent as UTC text: one meaning on both
        sides, whatever either's time zone)."""
        out = self._call("get_stream_cut_at", scope, stream, iso_utc(timestamp_ns(timestamp)))
        if not isinstance(out, StreamCut):
            raise ProtocolError("get_stream_cut_at did not answer a StreamCut")
        return out

    def list_transactions(self, scope: str, stream: str) -> list[TransactionInfo]:
        """As ``Store.list_transactions``."""
        return self._call("list_transactions", scope, stream)  # type: ignore[return-value]

    def write_times(self, pointers: "Sequence[EventPointer]") -> list[int | None]:
        """As ``Store.write_times``."""
        out = self._call("write_times", list(pointers))
        if not isinstance(out, list) or not all(t is None or type(t) is int for t in out):
            raise ProtocolError("write_times did not answer a list of times")
        return out

    def get_stream_cut_from_tail(self, scope: str, stream: str, events: int) -> "StreamCut":
        """As ``Store.get_stream_cut_from_tail``."""
        out = self._call("get_stream_cut_from_tail", scope, stream, events)
        if not isinstance(out, StreamCut):
            raise ProtocolError("get_stream_cut_from_tail did not answer a StreamCut")
        return out

    def skip_truncated(self, scope: str, stream: str, cut: "StreamCut") -> Truncation:
        """As ``Store.skip_truncated``."""
        out = self._call("skip_truncated", scope, stream, cut)
        if not isinstance(out, Truncation):
            raise ProtocolError("skip_truncated did not answer a Truncation")
        return out

    def _open_handle(self, method: str, *args: object, **kwargs: object) -> tuple[Connection, Handle]:
        conn = self._open_connection()
        try:
            h = conn.call(0, method, *args, **kwargs)
            if not isinstance(h, Handle):
                raise ProtocolError(f"{method} did not answer a handle")
        except BaseException:
            conn.close()
            raise
        return conn, h

    def _open_connection(self) -> Connection:
        if self._closed:
            raise StoreClosedError(f"store {self.path} is closed")
        return Connection(self.path, tcp=self._tcp)

    def _keep(self, h: _H) -> _H:
        with self._lock:
            closed = self._closed
            if not closed:
                self._handles.add(h)
        if closed:
            h.close()
            raise StoreClosedError(f"store {self.path} is closed")
        return h

    def _forget(self, h: object) -> None:
        with self._lock:
            self._handles.discard(h)

    # ------------------------------------------------------------------ closing
    @property
    def closed(self) -> bool:
        return self._closed

    def close(self) -> None:
        """Flush and close this process's writers, close its readers and connections.
        Idempotent. The store stays open in its owner."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            handles = list(self._handles)
        first: BaseException | None = None
        for h in handles:
            try:
                h.close()
            except PravegaEmbeddedError as exc:
                first = first or exc
        self._conn.close()
        if first is not None and not isinstance(first, ConnectionLostError):
            raise first

    def __enter__(self) -> "RemoteStore":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<RemoteStore {self.path!r} owner pid {self.owner_pid}"
                f"{' closed' if self._closed else ''}>")


class RemoteWriter:
    """A writer of a client process: ``EventStreamWriter``'s API (invariants 2 and 3)."""

    def __init__(self, conn: Connection, handle: Handle, scope: str, stream: str,
                 serializer: Serializer | None, batch_bytes: int, linger: float,
                 forget: "Callable[[RemoteWriter | RemoteReader], None]") -> None:
        self._conn = conn
        self._handle = handle.id
        self.scope, self.stream = scope, stream
        self.writer_id = str(handle.info["writer_id"])
        self._seq = int(handle.info["last_sequence"])  # type: ignore[call-overload]
        self._durable = self._seq
        self._ser = serializer
        self.batch_bytes = batch_bytes
        self.linger = linger
        self._forget = forget
        self._lock = threading.RLock()
        self._buf: list[bytes] = []  # the batch as WRITE frames: per event its length, key part, bytes
        self._first = self._seq + 1  # the sequence of the batch's first event
        self._nbytes = 0  # payload bytes in _buf (batch_bytes counts these, as in process)
        self._wire = 0  # the bytes _buf takes in a WRITE (kept under WRITE_MAX)
        self._unacked: deque[tuple[int, bytes, int]] = deque()  # (last sequence, body, kind) sent
        self._unacked_bytes = 0
        self._resend = False  # a batch failed: send every unacknowledged one again first
        self._closed = False
        self._linger_thread: threading.Thread | None = None
        self._wake = threading.Condition(threading.Lock())  # signals the linger thread only
        self._started = False  # a batch began since the linger thread last looked (under _wake)
        self._t0 = 0.0  # when the batch being filled began (monotonic)
        self._busy = False  # invariant 7: the writing thread is in write_event's critical region
        self._drain_pending = False  # ... and another thread waits to take the batch
        self.duplicates_dropped = 0
        self._keys: dict[str | None, tuple[bytes, int]] = {None: (key_part(None), EVENT_OVERHEAD)}

    def _event(self, event: object) -> bytes:
        if self._ser is not None:
            event = self._ser.serialize(event)
        if type(event) is not bytes:
            if isinstance(event, (bytearray, memoryview)):
                event = bytes(event)
            else:
                raise SerializationError(
                    f"event must be bytes-like (or create the writer with serializer='text' or "
                    f"'json'), not {type(event).__name__}")
        return event

    def write_event(self, event: object, routing_key: str | None = None, *, sequence: int | None = None) -> int:
        """Buffer one event; return its sequence number (``EventStreamWriter.write_event``).
        No lock on this path (invariant 7): from one thread at a time, as in process."""
        ev = event if type(event) is bytes and self._ser is None else self._event(event)
        try:
            kpart, over = self._keys[routing_key]
        except (KeyError, TypeError):
            kpart, over = self._key(routing_key)
        n = len(ev)
        if n > MAX_EVENT_SIZE:
            return self._write_large(ev, routing_key, sequence)
        if sequence is not None:
            return self._write_numbered(ev, kpart, over, sequence)
        self._busy = True
        try:
            if self._drain_pending:
                self._yield_to_drain()
            if self._closed:
                self._check()
            self._seq = seq = self._seq + 1
            buf = self._buf
            buf += (_U32_SMALL[n] if n < _SMALL else _U32(n), kpart, ev)
            self._nbytes = nbytes = self._nbytes + n
            self._wire = wire = self._wire + n + over
        finally:
            self._busy = False
        if nbytes >= self.batch_bytes or wire >= WRITE_MAX or len(buf) >= _PARTS_MAX:
            with self._lock:
                if not self._closed:  # else a close() in another thread took this event
                    self._send()
        elif len(buf) == 3 and self.linger > 0:
            self._linger()
        return seq

    def _write_numbered(self, ev: bytes, kpart: bytes, over: int, sequence: int) -> int:
        """``write_event`` with an explicit ``sequence`` (under the lock: the writing thread,
        so no other is in the critical region, and drainers wait for the lock)."""
        with self._lock:
            self._check()
            if type(sequence) is not int or not 0 <= sequence < (1 << 63):
                raise InvalidSequenceError(
                    f"writer {self.writer_id!r} on {self.scope}/{self.stream}: sequence must "
                    f"be an int in [0, 2**63), got {sequence!r}")
            if sequence <= self._seq:
                self.duplicates_dropped += 1
                return sequence
            if sequence != self._seq + 1:  # a batch's numbers are consecutive: start anew
                self._send()
                self._first = sequence
            self._seq = sequence
            buf = self._buf
            buf += (_U32(len(ev)), kpart, ev)
            self._nbytes += len(ev)
            self._wire += len(ev) + over
            if self._nbytes >= self.batch_bytes or self._wire >= WRITE_MAX or len(buf) >= _PARTS_MAX:
                self._send()
        if len(buf) == 3 and self.linger > 0:
            self._linger()
        return sequence

    def _yield_to_drain(self) -> None:
        """The writing thread, in the critical region, saw a drainer: step out until it is done."""
        while self._drain_pending:
            self._busy = False
            while self._drain_pending:
                time.sleep(0)
            self._busy = True

    def _take(self, *, closing: bool = False) -> tuple[list[bytes], int]:
        """Swap out the batch being filled (invariant 7; under the lock): its parts and the
        sequence of its first event. ``closing``: no write_event gets in after it."""
        self._drain_pending = True
        try:
            while self._busy:
                time.sleep(0)
            buf, first = self._buf, self._first
            if closing:
                self._closed = True
            if buf:
                self._buf, self._nbytes, self._wire = [], 0, 0
                self._first = self._seq + 1
            return buf, first
        finally:
            self._drain_pending = False

    def _write_large(self, ev: bytes, routing_key: str | None, sequence: int | None) -> int:
        """A large event (over MAX_EVENT_SIZE): what was written before is made durable, the
        bytes go as BYTES frames, then ``write_large`` writes them with the next (or given)
        sequence, durable before this returns (so nothing large waits to be sent again)."""
        with self._lock:
            self._check()
            if sequence is not None and (type(sequence) is not int or not 0 <= sequence < (1 << 63)):
                raise InvalidSequenceError(
                    f"writer {self.writer_id!r} on {self.scope}/{self.stream}: sequence must "
                    f"be an int in [0, 2**63), got {sequence!r}")
            seq = self._seq + 1 if sequence is None else sequence
            if seq <= self._seq:
                self.duplicates_dropped += 1
                return seq
            limit = self._conn.info.get("large_event_limit")
            if isinstance(limit, int) and len(ev) > limit:
                raise EventTooLargeError(
                    f"an event of {len(ev)} bytes for {self.scope}/{self.stream} is over the store's "
                    f"large_event_limit of {limit} bytes")
            self._send()
            self._flush_owner(None)
            view = memoryview(ev)
            for i in range(0, len(view), LARGE_PART):
                self._conn.write_bytes(self._handle, view[i:i + LARGE_PART])
            self._conn.call(self._handle, "write_large", routing_key, seq)
            self._seq = seq
            self._first = seq + 1
            self._flush_owner(None)
            return seq

    def _key(self, key: object) -> tuple[bytes, int]:
        """The key's part of a frame (its length and UTF-8 bytes) and the bytes an event takes
        in a WRITE besides its payload."""
        kb = encode_key(key)  # InvalidRoutingKeyError for a key that is not one
        got = (key_part(kb), EVENT_OVERHEAD + (len(kb) if kb else 0))
        if len(self._keys) < KEY_CACHE:
            self._keys[key] = got  # type: ignore[index]
        return got

    def write_events(self, events: "Iterable[object]", routing_key: str | None = None) -> int:
        """Write ``events`` atomically (one journal record in the owner); the last sequence."""
        evs = [self._event(e) for e in events]
        kb = encode_key(routing_key)
        if not evs:
            return self._seq
        biggest = max(len(e) for e in evs)
        if biggest > MAX_EVENT_SIZE:
            raise EventTooLargeError(
                f"an event of {biggest} bytes in a batch for {self.scope}/{self.stream} is over the "
                f"{MAX_EVENT_SIZE}-byte limit of a batch; nothing of this batch was written "
                "(write large events one at a time with write_event)")
        size = sum(len(e) + (len(kb) if kb else 0) + EVENT_OVERHEAD for e in evs)
        if size > ATOMIC_MAX or len(evs) > MAX_PENDING_EVENTS:
            raise EventTooLargeError(
                f"a batch of {size} bytes ({len(evs)} events) for {self.scope}/{self.stream}: from "
                f"a client process an atomic batch is at most {ATOMIC_MAX} bytes and "
                f"{MAX_PENDING_EVENTS} events; write it in parts")
        with self._lock:
            self._check()
            self._send()
            first = self._seq + 1
            body = encode_write(self._handle, first, [(kb, e) for e in evs])
            self._conn.write(body, Kind.WRITE_ATOMIC)
            self._seq = first + len(evs) - 1
            self._sent(self._seq, body, Kind.WRITE_ATOMIC)
            self._first = self._seq + 1
            return self._seq

    def _send(self, *, closing: bool = False) -> None:
        """Hand the buffer to the owner (invariant 2; under the lock). A failure of an earlier
        batch is raised first, with this buffer kept, and every batch not yet known durable is
        sent again before anything new (invariant 6)."""
        if self._conn.collect():
            self._resend = True
            self._conn.raise_write_error()
        if self._resend:
            for _, body, kind in self._unacked:  # in order; what the owner has is dropped there
                self._conn.write(body, kind)
            self._resend = False
        self._send_batch(closing=closing)

    def _send_batch(self, *, closing: bool = False) -> None:
        """Send the batch being filled (under the lock; ``_send`` without raising or resending
        what failed before)."""
        buf, first = self._take(closing=closing)
        if not buf:
            return
        count = len(buf) // 3
        body = encode_write_parts(self._handle, first, count, buf)
        self._conn.write(body)  # a failure here ends the connection: the writer is dead
        self._sent(first + count - 1, body, Kind.WRITE)

    def _sent(self, last: int, body: bytes, kind: int) -> None:
        """Keep a batch sent until the owner says it is durable (invariant 6); past
        ``UNACKED_MAX`` bytes, wait for that (the owner's pace bounds the client's memory)."""
        self._unacked.append((last, body, kind))
        self._unacked_bytes += len(body)
        if self._unacked_bytes > UNACKED_MAX:
            self._flush_owner(None)

    def _flush_owner(self, timeout: float | None) -> int:
        try:
            durable = int(self._conn.call(self._handle, "flush", timeout))  # type: ignore[call-overload]
        except ConnectionLostError:
            raise
        except PravegaEmbeddedError:
            self._resend = True  # a batch may have failed: send what is not durable again
            raise
        self._acked(durable)
        return durable

    def _acked(self, durable: int) -> None:
        self._durable = durable
        while self._unacked and self._unacked[0][0] <= durable:
            self._unacked_bytes -= len(self._unacked.popleft()[1])

    def _linger(self) -> None:
        """A batch began: send it ``linger`` seconds from now if nothing sends it before."""
        self._t0 = time.monotonic()
        if self._linger_thread is None:
            with self._lock:
                if self._linger_thread is None:
                    self._linger_thread = threading.Thread(target=self._linger_loop, daemon=True,
                                                           name="pe-client-linger")
                    self._linger_thread.start()
        with self._wake:
            self._started = True
            self._wake.notify()

    def _linger_loop(self) -> None:
        """Send a buffer ``linger`` seconds old. A failure is left for the application's next
        call to raise (never taken here), and the loop goes on."""
        wake = self._wake
        while True:
            with wake:
                while not self._started and not self._closed:
                    wake.wait()
                self._started = False
            if self._closed:
                return
            first = self._first
            delay = self._t0 + self.linger - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            with self._lock:
                if self._closed:
                    return
                if not self._buf or self._first != first:
                    continue  # sent meanwhile
                try:
                    if not self._conn.collect() and not self._resend:
                        self._send_batch()  # a failure waits for the application's next call
                except PravegaEmbeddedError:
                    pass  # the connection is gone, or the owner's flush failed (_resend): the
                    # application's next call raises it

    def note_time(self, timestamp: int) -> None:
        with self._lock:
            self._check()
            self._send()
            self._conn.call(self._handle, "note_time", timestamp)

    @property
    def last_sequence(self) -> int:
        return self._seq

    @property
    def durable_sequence(self) -> int:
        """The highest sequence number the owner knows durable."""
        with self._lock:
            if not self._closed:
                self._acked(int(self._conn.call(self._handle, "durable_sequence")))  # type: ignore[call-overload]
            return self._durable

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every event written so far is durable (invariant 3)."""
        with self._lock:
            self._check()
            self._send()
            return self._flush_owner(timeout)

    def _check(self) -> None:
        if self._closed:
            raise WriterClosedError(f"writer {self.writer_id!r} on {self.scope}/{self.stream} is closed")

    def close(self) -> None:
        """Flush and close. Idempotent. After a failure the application was told of (a call
        raised it), what was not written is dropped, as an in-process writer drops events it
        refused, and close does not raise it again."""
        with self._lock:
            if self._closed:
                return
            try:
                if self._resend:
                    self._take(closing=True)
                    self._conn.collect()
                    self._conn.discard_write_errors()
                else:
                    self._send(closing=True)
                self._conn.call(self._handle, "close")
            finally:
                if not self._closed:  # a failure before the last batch was taken: none gets in
                    self._take(closing=True)
                self._closed = True
                with self._wake:
                    self._wake.notify_all()
                self._conn.close()
                self._forget(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "RemoteWriter":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class RemoteReader:
    """A standalone reader of a client process: ``EventStreamReader``'s API (invariant 4)."""

    def __init__(self, conn: Connection, handle: Handle, scope: str, stream: str,
                 serializer: Serializer | None,
                 forget: "Callable[[RemoteWriter | RemoteReader], None]") -> None:
        self._conn = conn
        self._handle = handle.id
        self.scope, self.stream = scope, stream
        self._names = (scope, stream)
        self._ser = serializer
        self._forget = forget
        self._buf: deque[WireEvent] = deque()
        self._lock = threading.RLock()
        self._closed = False
        self._ended = False

    def read_next_event(self, timeout: float | None = None) -> EventRead | None:
        """The next event, or None when ``timeout`` passes without one or the end is reached."""
        with self._lock:
            if self._closed:
                raise ReaderClosedError(f"reader of {self.scope}/{self.stream} is closed")
            if not self._buf:
                if self._ended:
                    return None
                try:
                    evs, end, meta = self._conn.read(self._handle, "read", timeout, READ_BATCH)
                except ConnectionLostError:
                    if self._closed:  # close() in another thread ended this read
                        raise ReaderClosedError(f"reader of {self.scope}/{self.stream} is closed") from None
                    raise
                if len(evs) == 1 and meta is not None:
                    evs = [with_large(self._conn, self._handle, evs[0], meta)]
                self._buf.extend(evs)
                self._ended = end
                if not self._buf:
                    return None
            ev = _event_read(self._buf[0], self._ser, self._names)  # a payload that does not
            self._buf.popleft()                                      # deserialize stays first
            return ev

    def __iter__(self) -> Iterator[EventRead]:
        while True:
            ev = self.read_next_event(None)
            if ev is None:
                return
            yield ev

    @property
    def at_end(self) -> bool:
        """True once a read returned None because everything up to the end was read."""
        return self._ended and not self._buf

    def position(self) -> "StreamCut":
        """The StreamCut just after the last event returned (invariant 4)."""
        with self._lock:
            if not self._buf:
                return self._conn.call(self._handle, "position")  # type: ignore[return-value]
            first: dict[int, int] = {}
            for ev in self._buf:
                first.setdefault(ev.segment_id, ev.offset)
            return self._conn.call(self._handle, "position_before", first)  # type: ignore[return-value]

    def position_before(self, unreturned: "Mapping[int, int]") -> "StreamCut":
        """``position()`` before events this reader returned that its caller has not taken
        yet (``{segment_id: offset of the first such event}``), as
        ``EventStreamReader.position_before``: for a proxy that reads ahead (``aio``)."""
        with self._lock:
            first = {sid: off for sid, off in unreturned.items()}
            for ev in self._buf:
                first[ev.segment_id] = min(first.get(ev.segment_id, ev.offset), ev.offset)
            if not first:
                return self._conn.call(self._handle, "position")  # type: ignore[return-value]
            return self._conn.call(self._handle, "position_before", first)  # type: ignore[return-value]

    def get_current_time_window(self) -> "TimeWindow":
        """The event-time window at the owner's reader (which may be a batch ahead)."""
        with self._lock:
            return self._conn.call(self._handle, "get_current_time_window")  # type: ignore[return-value]

    def close(self) -> None:
        """Idempotent; a read waiting in another thread raises ReaderClosedError. The owner
        closes its reader when the connection ends."""
        if self._closed:
            return
        self._closed = True
        self._conn.close()
        self._forget(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "RemoteReader":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _event_read(ev: WireEvent, ser: Serializer | None, names: tuple[str, str]) -> EventRead:
    payload: object = ev.event
    if ser is not None:
        payload = ser.deserialize(ev.event)
    return EventRead.make(payload, ev.routing_key, ev.segment_id, ev.offset, ev.length, names)


if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Mapping
