"""One client connection's work in the owner: its handles and the calls it may make.

Owns: the table of handles a connection created (writers, readers, reader groups and their
readers, checkpoints in progress, transactional writers and transactions, byte streams,
segment watchers, slices), the allowlist of methods each kind of handle answers
(``HANDLE_KINDS``), and turning a CALL, a WRITE or a BYTES write into a call on the store.

Invariants:
  1. Only the methods in ``STORE_CALLS`` and a kind's allowlist can be called; anything else
     is refused with InvalidConfigurationError before any work. A value of a kind in
     ``HANDLE_KINDS`` that a call returns becomes a handle of this connection.
  2. A handle is usable only from the connection that created it; closing the connection
     closes its handles (writers flush what they were sent, readers close), except that a
     group reader is *abandoned* when the connection is lost: it stays in the group, as the
     reader of a process that died, and is put offline (its segments go back at its last
     checkpoint) after ``reader_timeout`` unless its reader id joined again. Transactions
     stay open: an abandoned one aborts when its lease expires.
  3. A writer's events are written with the client's sequence numbers (explicit sequences), so
     a batch resent after a lost connection is dropped as duplicates: exactly once.
  4. Serializers never cross the wire: handles in the owner carry bytes; the client serializes
     and deserializes. Keyword arguments starting with ``_`` are refused.
  5. A read never loses an event its handle took: what does not fit in one answer (or an
     error after some events) is held and answered by the next read.
  6. A group reader's batch is one chunk (``GroupReader.read_batch``): the group protocol
     runs at the next read, when the client has handed out the whole batch; the answer
     carries the chunk contexts so ``EventRead.position`` in the client is the owner's.
  7. A large event (over MAX_EVENT_SIZE) comes alone, its payload empty and its size in the
     answer's JSON section (``large``); the client takes its bytes with ``large_part`` (BYTES
     answers) before its next read. A client writes one as BYTES frames to its writer handle
     and then ``write_large(key, sequence)``; one at a time per connection, up to the
     store's ``large_event_limit`` and an owner-wide budget of twice that, else refused whole.
  8. ``close_before`` and ``position_before`` of a group reader count only offsets of events
     in the last batch sent on it: a client cannot move a position anywhere else (in a
     journal range: an event boundary inside it, checked in the segment).
  9. A client on this machine (unix socket) that asks for them gets a group reader's chunks
     of journal data as journal ranges (``journalrange``): where the bytes lie, not the
     events; it reads the files itself. The range is the batch (invariant 6); ``reread``
     answers its events from the owner for a client that could not read the files.

Thread-safety: a session is driven by its connection's thread; ``close`` may come from the
server's closing thread as well (it only closes handles, which are thread-safe).
"""

from __future__ import annotations

import heapq
import inspect
import logging
import threading
import time
from collections import deque
from collections.abc import Iterator
from typing import TYPE_CHECKING, Callable, NamedTuple

from ..bytestream import ByteStream
from ..errors import (
    EventTooLargeError,
    InvalidConfigurationError,
    InvalidEventPointerError,
    PravegaEmbeddedError,
)
from ..events import EventPointer, EventRead
from ..reader import EventStreamReader, Slice
from ..readergroup.group import ReaderGroup
from ..readergroup.reader import GroupReader, chunk_context, marker_of, range_of
from ..readergroup.state import CheckpointFuture
from ..transactions import Transaction, TransactionalEventStreamWriter
from ..watch import SegmentWatcher
from ..writer import MAX_EVENT_SIZE, EventStreamWriter
from .auth import FULL, Grants
from .permissions import Authorizer, bind
from .values import Handle, dumps
from .wire import WireEvent, WriteBatch

if TYPE_CHECKING:
    import pyarrow

    from ..store import Store

__all__ = ["Session", "HandleKind", "HANDLE_KINDS", "STORE_CALLS", "READ_MAX_EVENTS",
           "READ_MAX_BYTES", "POLL_S"]

LOG = logging.getLogger("pravega_embedded.remote")

STORE_CALLS = frozenset({
    "create_scope", "list_scopes", "delete_scope", "create_stream", "list_streams", "stream_info",
    "seal_stream", "delete_stream", "scale_stream", "update_stream", "truncate_stream",
    "tiered_bytes", "tiering_status", "flush_tier2", "status", "checkpoint", "reclaim",
    "list_reader_groups", "create_writer", "create_reader", "create_reader_group",
    "get_reader_group", "delete_reader_group", "create_transactional_writer",
    "create_byte_stream", "watch_segments", "read_slice", "get_segments", "read_segment_range",
    "get_next_stream_cut", "get_stream_cut_at", "get_stream_cut_from_tail", "skip_truncated",
    "write_times", "list_transactions",
})
_NO_SERIALIZER = frozenset({"create_writer", "create_reader", "create_transactional_writer", "read_slice",
                            "read_segment_range"})


class HandleKind(NamedTuple):
    """What a kind of handle is on the wire: its name and the calls a client may make."""

    name: str
    calls: frozenset[str]


HANDLE_KINDS: dict[type, HandleKind] = {
    EventStreamWriter: HandleKind("writer", frozenset({
        "flush", "note_time", "last_sequence", "durable_sequence"})),
    EventStreamReader: HandleKind("reader", frozenset({
        "position", "position_before", "get_current_time_window"})),
    ReaderGroup: HandleKind("group", frozenset({
        "config", "reader_offline", "online_readers", "initiate_checkpoint",
        "cancel_outstanding_checkpoints", "outstanding_checkpoints", "last_checkpoint",
        "update_retention_cut", "retention_cuts", "get_stream_cuts", "generate_stream_cuts",
        "reset", "unread_bytes", "unread_events", "segment_distribution"})),
    GroupReader: HandleKind("group_reader", frozenset({
        "position", "position_before", "get_current_time_window", "close_before"})),
    CheckpointFuture: HandleKind("checkpoint", frozenset({"result", "done", "name"})),
    TransactionalEventStreamWriter: HandleKind("txn_writer", frozenset({
        "begin_txn", "get_txn", "commit_transactions", "last_mark"})),
    Transaction: HandleKind("txn", frozenset({"flush", "commit", "abort", "ping", "status", "txn_id"})),
    ByteStream: HandleKind("byte_stream", frozenset({
        "seek", "tell", "flush", "head_offset", "tail_offset", "available", "truncate_before",
        "seal"})),
    SegmentWatcher: HandleKind("watcher", frozenset({"get"})),
    Slice: HandleKind("slice", frozenset({"ranges", "nbytes", "rewind"})),
}
READABLE = (EventStreamReader, GroupReader, Slice)  # handles a read (EVENTS) is made of
_POLLED = {("checkpoint", "result"), ("watcher", "get")}  # calls that wait: in steps (_poll)
READ_MAX_EVENTS = 4096  # the most events one read answer carries ...
READ_MAX_BYTES = 4 << 20  # ... and about the most payload bytes
RANGE_MAX_BYTES = 16 << 20  # about the most bytes of one journal range (invariant 9)
ARROW_PART = 8 << 20  # about the most bytes of one ARROW answer
ARROW_STREAMS = 8  # tables of one slice a connection reads at once
BYTES_PART = 8 << 20  # the most bytes of one BYTES answer (a byte stream read)
HANDLES_MAX = 1024  # handles one connection may hold open
SLICES_MAX = 64  # slices one connection keeps; a new one closes the oldest
POLL_S = 0.25  # a call that waits looks this often whether its client is still there
READER_TIMEOUT_S = 10.0  # an abandoned group reader is put offline after this (invariant 2)


class Session:
    """The handles and calls of one connection to ``store``; ``gone()`` says whether the
    client has gone away (or the server is closing) while a call waits for it."""

    def __init__(self, store: "Store", peer: str, gone: Callable[[], bool],
                 reader_timeout: float = READER_TIMEOUT_S, grants: Grants = FULL,
                 local: bool = False) -> None:
        self.store = store
        self.peer = peer
        self.local = local  # a client on this machine (unix socket): it may read journal files
        self.grants = grants
        self.auth = Authorizer(store, grants)
        self._gone = gone
        self._reader_timeout = reader_timeout
        self._handles: dict[int, object] = {}
        self._held: dict[int, deque[EventRead | PravegaEmbeddedError]] = {}  # invariant 5
        self._iters: dict[int, Iterator[EventRead] | None] = {}  # a slice's events (None: done)
        self._arrows: dict[tuple[int, int], _ArrowParts] = {}  # (slice, stream): batches, made as sent
        self._batches: dict[int, dict[str, "set[int] | _Span"]] = {}  # a group reader's last batch
        self._large_out: dict[int, bytes] = {}  # a large event being read, by handle (0: fetch)
        self._large_in: dict[int, bytearray | None] = {}  # a large event being written (None: refused)
        self._ranges: dict[int, tuple[EventRead, str]] = {}  # a group reader's last journal range
        self._next = 1
        self._lock = threading.Lock()
        self.closed = False

    # ------------------------------------------------------------------ calls
    def call(self, handle: int, method: str, args: list[object], kwargs: dict[str, object]) -> object:
        """A CALL (invariant 1); the value to send back."""
        if not isinstance(method, str):
            raise InvalidConfigurationError("a call names its method with a string")
        if any(k.startswith("_") for k in kwargs):  # private arguments stay private
            raise InvalidConfigurationError(f"{method!r} takes no argument "
                                            f"{next(k for k in kwargs if k.startswith('_'))!r}")
        if handle == 0:
            return self._wrap(self._store_call(method, args, kwargs))
        obj = self._get(handle)
        if method == "write_large" and isinstance(obj, EventStreamWriter):
            return self._write_large(handle, obj, args)
        if method == "close":
            self._close_handle(handle)
            return None
        kind = HANDLE_KINDS[type(obj)]
        if method not in kind.calls:
            raise _refused(kind.name, method)
        self.auth.handle(obj, method, args, kwargs)
        if (kind.name, method) in _POLLED:
            return self._wrap(self._poll(obj, method, args, kwargs))
        if method == "generate_stream_cuts":  # waits for the readers: as a polled future
            timeout = bind(obj.generate_stream_cuts, args, kwargs, method).get("timeout")  # type: ignore[attr-defined]
            cp = self._poll(obj.begin_stream_cuts(), "result", [timeout], {})  # type: ignore[attr-defined]
            return dict(cp.stream_cuts)  # type: ignore[attr-defined]
        if method in ("close_before", "position_before") and isinstance(obj, GroupReader):
            unreturned = self._unreturned(handle, args[0] if args else None)  # invariant 8
            if method == "position_before":
                return obj.position_before(unreturned)  # type: ignore[attr-defined]
            self._close_handle(handle, unreturned)
            return None
        if method == "position_before" and not (args and isinstance(args[0], dict)):
            raise InvalidConfigurationError("position_before takes {segment id: offset}")
        if method == "rewind":  # a slice's iteration starts again
            self._iters.pop(handle, None)
            self._held.pop(handle, None)
            return None
        attr = getattr(obj, method)
        return self._wrap(_invoke(attr, args, kwargs, method) if callable(attr) else attr)

    def _store_call(self, method: str, args: list[object], kwargs: dict[str, object]) -> object:
        if method not in STORE_CALLS and method != "open_group_reader":
            raise _refused("store", method)
        self.auth.before(method, args, kwargs)
        if method == "open_group_reader":  # a group's reader on a connection of its own
            group, reader_id = (list(args) + [None, None])[:2]
            if not isinstance(group, str) or not isinstance(reader_id, str):
                raise InvalidConfigurationError("open_group_reader takes (group name, reader id)")
            g = self.store.get_reader_group(group)
            try:
                return self.auth.after(method, args, kwargs, g.create_reader(reader_id))
            finally:
                g.close()
        if method in _NO_SERIALIZER:
            kwargs.pop("serializer", None)  # invariant 4
        if method == "watch_segments" and kwargs.get("callback") is not None:
            raise InvalidConfigurationError("a client runs its watcher's callback itself")
        return self.auth.after(method, args, kwargs, _invoke(getattr(self.store, method), args, kwargs, method))

    def _poll(self, obj: object, method: str, args: list[object], kwargs: dict[str, object]) -> object:
        """A call that waits up to ``timeout``, in steps, given up when the client is gone."""
        timeout = (list(args) + [kwargs.get("timeout")])[0]
        if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
            raise InvalidConfigurationError(f"a timeout is seconds or None, got {timeout!r}")
        deadline = None if timeout is None else time.monotonic() + max(0.0, float(timeout))
        while True:
            step = POLL_S if deadline is None else max(0.0, min(POLL_S, deadline - time.monotonic()))
            if isinstance(obj, CheckpointFuture):
                try:
                    return obj.result(step)
                except TimeoutError:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise
            else:
                assert isinstance(obj, SegmentWatcher)
                got = obj.get(step)
                if got is not None or obj.closed or (deadline is not None and time.monotonic() >= deadline):
                    return got
            if self._gone():
                raise InvalidConfigurationError(f"{method} was given up: the client went away")

    def fetch(self, pointer: object) -> tuple[list[WireEvent], bytes | None]:
        if not isinstance(pointer, EventPointer):
            raise InvalidEventPointerError(f"expected an EventPointer, got {type(pointer).__name__}")
        self.grants.check("read", f"{pointer.scope}/{pointer.stream}", "fetch_event")
        wire = self._wire_event(0, self.store.fetch_event(pointer))
        return [wire], (dumps({"large": len(self._large_out[0])}) if not wire.event and 0 in self._large_out else None)

    # ------------------------------------------------------------------ reads
    def read(self, handle: int, timeout: float, max_events: int,
             ranges: bool = False) -> tuple[list[WireEvent], bool, bytes | None]:
        """Up to ``max_events`` events of a reader, group reader or slice: the first waits up
        to ``timeout``, the rest are what is there already; whether it has read everything to
        its end; and the JSON section of a group reader's answer (invariants 5, 6 and 9)."""
        obj = self._get(handle)
        if not isinstance(obj, READABLE):
            raise InvalidConfigurationError(f"handle {handle} is not a reader")
        pending = self._held.pop(handle, None) or self._take(handle, obj, timeout, max_events,
                                                              ranges and self.local)
        if pending and range_of(pending[0]) is not None:
            return [], False, self._range(handle, obj, pending.popleft())
        limit = max(1, min(max_events, READ_MAX_EVENTS))
        out: list[EventRead] = []
        size = 0
        while pending:
            ev = pending[0]
            if isinstance(ev, BaseException):
                if out:
                    break
                pending.popleft()
                raise ev
            large = ev[0] is not None and len(ev[0]) > MAX_EVENT_SIZE
            if large and out:
                break  # a large event comes alone (invariant 7)
            out.append(pending.popleft())
            size += 0 if ev[0] is None else len(ev[0])
            if large or len(out) >= limit or size >= READ_MAX_BYTES:
                break
        if pending:
            self._held[handle] = pending
        end = not out and not pending and _at_end(obj, handle in self._iters and self._iters[handle] is None)
        if isinstance(obj, GroupReader):  # invariant 8
            offsets: dict[str, set[int]] = {}
            for ev in out:
                described = chunk_context(ev)
                if described is not None:
                    offsets.setdefault(described[1], set()).add(ev[3])
            self._batches[handle] = offsets
        wire = [self._wire_event(handle, ev) for ev in out if ev[0] is not None]
        large = handle in self._large_out and len(wire) == 1 and not wire[0].event
        extra = {"large": len(self._large_out[handle])} if large else {}
        if isinstance(obj, GroupReader):
            return wire, end, _group_meta(out, extra)
        return wire, end, dumps(extra) if extra else None

    def _wire_event(self, handle: int, ev: EventRead) -> WireEvent:
        """An event for an EVENTS answer; a large one's payload is kept for ``large_part``."""
        payload = ev[0]
        if len(payload) > MAX_EVENT_SIZE:
            self._large_out[handle] = payload
            payload = b""
        else:
            self._large_out.pop(handle, None)  # one not taken whole before is let go
        return WireEvent(ev[2], ev[3], ev[4], ev[1], payload)

    def large_part(self, handle: int, start: object) -> bytes:
        """Bytes of the large event the last read (or fetch_event, handle 0) answered, from
        ``start``; the event is let go once its last part is taken."""
        payload = self._large_out.get(handle)
        if payload is None:
            raise InvalidConfigurationError(f"handle {handle} has no large event being read")
        if isinstance(start, bool) or not isinstance(start, int) or not 0 <= start < len(payload):
            raise InvalidConfigurationError(f"a part of a {len(payload)}-byte event starts in it, not at {start!r}")
        part = payload[start:start + BYTES_PART]
        if start + len(part) >= len(payload):
            del self._large_out[handle]
        return part

    def _unreturned(self, handle: int, given: object) -> dict[str, int]:
        """Invariant 8: of a client's ``{segment: first offset not handed out}``, only offsets
        of events of the last batch sent to it count (nothing else can move its position)."""
        batch = self._batches.get(handle, {})
        if not isinstance(given, dict):
            return {}
        return {k: v for k, v in given.items()
                if isinstance(k, str) and type(v) is int and v in batch.get(k, ())}

    def _write_large(self, handle: int, w: EventStreamWriter, args: list[object]) -> object:
        """``write_large(routing_key, sequence)``: the large event sent in BYTES frames before
        it, written with that sequence (a resend at or below the last sequence is dropped)."""
        key, sequence = (list(args) + [None, None])[:2]
        if handle not in self._large_in:
            raise InvalidConfigurationError("write_large comes after the event's BYTES frames")
        data = self._large_in.pop(handle)
        _LARGE_IN.release(0 if data is None else len(data))
        if data is None:  # its bytes were refused (invariant 7): nothing of it is written
            raise EventTooLargeError(f"the large event for writer {w.writer_id!r} was refused "
                                     "as it arrived; nothing of it was written")
        if key is not None and not isinstance(key, str):
            raise InvalidConfigurationError("write_large takes (routing key or None, sequence)")
        return w.write_event(bytes(data), key, sequence=sequence)  # type: ignore[arg-type]

    def _range(self, handle: int, obj: object, ev: EventRead) -> bytes:
        """Invariant 9: the JSON section answering a group read with a journal range."""
        rng = range_of(ev)
        described = chunk_context(ev)
        assert rng is not None and described is not None and isinstance(obj, GroupReader)
        names, key, base = described
        self._batches[handle] = {key: _Span(obj, key, rng.start, rng.stop)}
        self._ranges[handle] = (ev, key)
        return dumps({"ctx": [[names[0], names[1], key, dict(base)]], "runs": [], "marker": None,
                      "seg": ev[2], "range": rng.to_json()})

    def reread(self, handle: int, start: object) -> tuple[list[WireEvent], bool, bytes | None]:
        """The events of the last journal range sent on ``handle`` from ``start`` (one of them,
        or its beginning) as an ordinary answer: for a client that could not read the files
        (reclaimed meanwhile: the owner reads tier 2)."""
        obj = self._get(handle)
        got = self._ranges.get(handle)
        if got is None or not isinstance(obj, GroupReader):
            raise InvalidConfigurationError(f"handle {handle} has no journal range to read again")
        ev, key = got
        rng = range_of(ev)
        assert rng is not None
        if type(start) is not int or not rng.start <= start < rng.stop:
            raise InvalidConfigurationError(f"{start!r} is not in the range [{rng.start}, {rng.stop})")
        if start not in self._batches.get(handle, {}).get(key, ()):
            raise InvalidConfigurationError(f"{start} is not an event boundary of the range")
        evs = obj.reread(key, ev[5], start, rng.stop, READ_MAX_BYTES)
        wire = [self._wire_event(handle, e) for e in evs]
        large = handle in self._large_out and len(wire) == 1 and not wire[0].event
        extra = {"large": len(self._large_out[handle])} if large else {}
        return wire, False, _group_meta(evs, extra)

    def _take(self, handle: int, obj: object, timeout: float, max_events: int, ranges: bool = False
              ) -> deque[EventRead | PravegaEmbeddedError]:
        limit = max(1, min(max_events, READ_MAX_EVENTS))
        if isinstance(obj, GroupReader):
            return deque(obj.read_batch(timeout, limit, RANGE_MAX_BYTES if ranges else READ_MAX_BYTES,
                                        ranges=ranges))
        taken: deque[EventRead | PravegaEmbeddedError] = deque()
        if isinstance(obj, Slice):
            it = self._iters[handle] if handle in self._iters else iter(obj)
            self._iters[handle] = it
            for ev in it or ():
                taken.append(ev)
                if len(taken) >= limit:
                    break
            else:
                self._iters[handle] = None  # done: the end
            return taken
        assert isinstance(obj, EventStreamReader)
        ev = obj.read_next_event(timeout)
        size = 0
        while ev is not None:
            taken.append(ev)
            size += len(ev.event)
            if len(taken) >= limit or size >= READ_MAX_BYTES:
                break
            try:
                ev = obj.read_next_event(0)
            except PravegaEmbeddedError as exc:  # the events taken already go first
                taken.append(exc)
                break
        return taken

    def arrow(self, handle: int, write_time: object = False, first: object = False,
              stream: object = 0) -> tuple[bytes, bool]:
        """The next part of a slice's table as an Arrow IPC stream (its batches made as they
        are sent: the owner never holds the whole table), and whether it is the last part.
        ``write_time``: the table has the write_time column (fixed by a table's first part);
        ``first``: start the table again (a client that stopped reading one part-way);
        ``stream``: which of the client's tables of this slice (two read at once stay apart;
        at most ARROW_STREAMS per slice, the oldest dropped)."""
        import pyarrow as pa

        from ..arrow import SCHEMA, TIMED_SCHEMA

        obj = self._get(handle)
        if not isinstance(obj, Slice):
            raise InvalidConfigurationError(f"handle {handle} is not a slice")
        if not isinstance(write_time, bool) or not isinstance(first, bool) \
                or isinstance(stream, bool) or not isinstance(stream, int):
            raise InvalidConfigurationError("arrow takes (write_time: bool, first: bool, stream: int)")
        key = (handle, stream)
        parts = None if first else self._arrows.get(key)
        if parts is None:  # a new table
            mine = [k for k in self._arrows if k[0] == handle and k != key]
            for k in mine[:max(0, len(mine) + 1 - ARROW_STREAMS)]:
                del self._arrows[k]  # a client's forgotten tables: the oldest go
            self._arrows.pop(key, None)
            parts = self._arrows[key] = _ArrowParts(obj.arrow_batches(write_time=write_time), write_time)
        sink = pa.BufferOutputStream()
        size = 0
        with pa.ipc.new_stream(sink, TIMED_SCHEMA if parts.timed else SCHEMA) as out:
            while parts.peek() is not None and (size == 0 or size + parts.peek().nbytes <= ARROW_PART):
                batch = parts.take()
                out.write_batch(batch)
                size += batch.nbytes
        last = parts.peek() is None
        if last:
            del self._arrows[key]  # the next to_arrow() starts again
        return sink.getvalue().to_pybytes(), last

    def read_bytes(self, handle: int, size: object) -> bytes:
        """A byte stream's read of up to ``size`` bytes (at most BYTES_PART)."""
        obj = self._get(handle)
        if not isinstance(obj, ByteStream):
            raise InvalidConfigurationError(f"handle {handle} is not a byte stream")
        if isinstance(size, bool) or not isinstance(size, int) or size < 0:
            raise InvalidConfigurationError(f"a read size is an int >= 0, got {size!r}")
        buf = bytearray(min(size, BYTES_PART))
        n = obj.readinto(buf)
        return bytes(buf[:n])

    # ------------------------------------------------------------------ writes
    def write(self, batch: WriteBatch, atomic: bool = False) -> None:
        """A WRITE (invariant 3); ``atomic`` (WRITE_ATOMIC): one key, one journal record, as
        ``write_events`` (a resend of it is dropped whole). To a transaction: its events."""
        w = self._get(batch.handle)
        if isinstance(w, Transaction):
            for key, ev in batch.events():
                w.write_event(ev, key)
            return
        if not isinstance(w, EventStreamWriter):
            raise InvalidConfigurationError(f"handle {batch.handle} is not a writer")
        if not atomic:
            w.write_frames(batch.first, batch.frames, batch.count)
            return
        events = batch.events()
        keys = {key for key, _ in events}
        if len(keys) != 1 or batch.first != w.last_sequence + 1:
            if len(keys) == 1 and batch.first <= w.last_sequence:
                return  # a resend of a batch written before
            raise InvalidConfigurationError("an atomic WRITE has one routing key and follows the last sequence")
        w.write_events([ev for _, ev in events], keys.pop())

    def write_bytes(self, handle: int, data: memoryview) -> None:
        """A BYTES write: appended to a byte stream (durable at its ``flush``), or to a
        writer's large event being sent (``write_large``), up to the store's event limit."""
        obj = self._get(handle)
        if isinstance(obj, EventStreamWriter):
            self._take_large(handle, data)
            return
        if not isinstance(obj, ByteStream):
            raise InvalidConfigurationError(f"handle {handle} is not a byte stream")
        obj.write(data)

    def _take_large(self, handle: int, data: memoryview) -> None:
        """Bytes of a large event a client writes (invariant 7): one at a time per connection,
        up to the store's ``large_event_limit``, and within the owner-wide ``_LARGE_IN``
        budget; past either, the event is refused whole (its later bytes are dropped and its
        ``write_large`` raises)."""
        if handle in self._large_in and self._large_in[handle] is None:
            return  # refused already
        others = [h for h in self._large_in if h != handle]
        buf = self._large_in.setdefault(handle, bytearray())
        assert buf is not None
        limit = self.store.large_event_limit
        why = None
        if others:
            why = "a connection sends one large event at a time"
        elif len(buf) + len(data) > limit:
            why = f"an event over the store's large_event_limit of {limit} bytes"
        elif not _LARGE_IN.take(len(data), 2 * limit):
            why = "the owner is taking in too many large events at once: try again"
        if why is not None:
            _LARGE_IN.release(len(buf))
            self._large_in[handle] = None
            raise EventTooLargeError(why)
        buf += data

    # ------------------------------------------------------------------ handles
    def _wrap(self, value: object) -> object:
        """Invariant 1: a handle for an object of a kind in HANDLE_KINDS."""
        kind = HANDLE_KINDS.get(type(value))
        if kind is None:
            return value
        if isinstance(value, Slice):  # snapshots a client forgot to close: the oldest go
            slices = [h for h, o in self._handles.items() if isinstance(o, Slice)]
            for h in slices[:max(0, len(slices) + 1 - SLICES_MAX)]:
                self._close_handle(h)
        return self._add(kind.name, value, _info(value))

    def _add(self, kind: str, obj: object, info: dict[str, object]) -> Handle:
        with self._lock:
            if self.closed or len(self._handles) >= HANDLES_MAX:
                _close(obj)
                raise InvalidConfigurationError(
                    f"a connection holds at most {HANDLES_MAX} handles: close some")
            hid = self._next
            self._next += 1
            self._handles[hid] = obj
        return Handle(hid, kind, info)

    def _get(self, handle: object) -> object:
        obj = self._handles.get(handle) if isinstance(handle, int) else None
        if obj is None:
            raise InvalidConfigurationError(f"this connection has no open handle {handle!r}")
        return obj

    def _close_handle(self, handle: int, unreturned: object = None) -> None:
        with self._lock:
            obj = self._handles.pop(handle, None)
            self._held.pop(handle, None)
            self._iters.pop(handle, None)
            for k in [k for k in self._arrows if k[0] == handle]:
                del self._arrows[k]
            self._large_out.pop(handle, None)
            self._batches.pop(handle, None)
            self._ranges.pop(handle, None)
            data = self._large_in.pop(handle, None)
            _LARGE_IN.release(0 if data is None else len(data))
        if isinstance(obj, GroupReader):
            if not isinstance(unreturned, dict):
                unreturned = {}
            obj.close_before(unreturned)  # type: ignore[arg-type]
        elif obj is not None:
            _close(obj)

    def close(self) -> None:
        """Invariant 2. Idempotent; errors are logged (the client is gone)."""
        with self._lock:
            self.closed = True
            handles = list(self._handles.values())
            self._handles.clear()
            self._held.clear()
            self._iters.clear()
            self._arrows.clear()
            self._large_out.clear()
            self._batches.clear()
            self._ranges.clear()
            for data in self._large_in.values():
                _LARGE_IN.release(0 if data is None else len(data))
            self._large_in.clear()
        for obj in handles:
            if isinstance(obj, GroupReader):
                _quietly(obj.abandon, f"abandoning reader {obj.reader_id!r}")
                _REAPER.after(self._reader_timeout, obj.offline_if_abandoned,
                              f"putting reader {obj.reader_id!r} of {self.peer} offline")
            elif not isinstance(obj, Transaction):  # invariant 2: it aborts at its lease's end
                _quietly(lambda obj=obj: _close(obj), f"closing a handle of {self.peer}")


def _invoke(fn: Callable[..., object], args: list[object], kwargs: dict[str, object], method: str) -> object:
    """``fn(*args, **kwargs)``; arguments that do not fit its signature are the client's
    mistake (InvalidConfigurationError), not a failure of the owner."""
    try:
        inspect.signature(fn).bind(*args, **kwargs)
    except TypeError as exc:
        raise InvalidConfigurationError(f"{method}: {exc}") from None
    return fn(*args, **kwargs)


def _info(obj: object) -> dict[str, object]:
    """What a client learns of a new handle at once."""
    if isinstance(obj, EventStreamWriter):
        return {"writer_id": obj.writer_id, "last_sequence": obj.last_sequence}
    if isinstance(obj, TransactionalEventStreamWriter):
        return {"writer_id": obj.writer_id}
    if isinstance(obj, Transaction):
        return {"txn_id": str(obj.txn_id)}
    if isinstance(obj, ReaderGroup):
        return {"name": obj.name}
    if isinstance(obj, GroupReader):
        return {"reader_id": obj.reader_id, "group_name": obj.group_name}
    if isinstance(obj, CheckpointFuture):
        return {"name": obj.name}
    if isinstance(obj, (ByteStream, SegmentWatcher)):
        return {"scope": obj.scope, "stream": obj.stream}
    if isinstance(obj, Slice):
        return {"ranges": obj.ranges, "nbytes": obj.nbytes}
    return {}


def _at_end(obj: object, slice_done: bool) -> bool:
    if isinstance(obj, EventStreamReader):
        return obj.at_end
    if isinstance(obj, Slice):
        return slice_done
    return False  # a group reader says so with its read-completed marker


def _group_meta(events: list[EventRead], extra: dict[str, object]) -> bytes:
    """Invariant 6: the chunk contexts of a group reader's events (``ctx``: names, segment
    key, base positions; ``runs``: [count, context index] in order) and its marker."""
    contexts: list[object] = []
    runs: list[list[int]] = []
    seen: dict[int, int] = {}
    marker = None
    for ev in events:
        m = marker_of(ev)
        if m is not None:
            marker = {"name": m[0], "position": m[1].as_dict()}
            continue
        ctx = ev[5]
        i = seen.get(id(ctx))
        if i is None:
            described = chunk_context(ev)
            assert described is not None
            names, key, base = described
            i = seen[id(ctx)] = len(contexts)
            contexts.append([names[0], names[1], key, dict(base)])
        if runs and runs[-1][1] == i:
            runs[-1][0] += 1
        else:
            runs.append([1, i])
    return dumps({"ctx": contexts, "runs": runs, "marker": marker, **extra})


class _Span:
    """The offsets a client may name in a journal range it was sent (invariant 8): its event
    boundaries in [start, stop), checked in the owner's segment when named."""

    __slots__ = ("reader", "key", "start", "stop")

    def __init__(self, reader: GroupReader, key: str, start: int, stop: int) -> None:
        self.reader, self.key, self.start, self.stop = reader, key, start, stop

    def __contains__(self, offset: object) -> bool:
        return (type(offset) is int and self.start <= offset < self.stop
                and self.reader.is_boundary(self.key, offset))


def _close(obj: object) -> None:
    close = getattr(obj, "close", None)
    if callable(close):
        close()


def _refused(kind: str, method: str) -> InvalidConfigurationError:
    return InvalidConfigurationError(f"{method!r} is not a call a client can make on a {kind}")


def _quietly(fn: Callable[[], object], what: str) -> None:
    try:
        fn()
    except PravegaEmbeddedError as exc:
        LOG.info("%s: %s", what, exc)
    except Exception:  # noqa: BLE001 - logged in full: a bug, the owner goes on serving
        LOG.exception("%s failed", what)


class _ArrowParts:
    """A slice's record batches, made one at a time, with one looked at ahead."""

    def __init__(self, batches: Iterator[object], timed: bool) -> None:
        self._it = batches
        self.timed = timed
        self._next: object = next(self._it, None)

    def peek(self) -> "pyarrow.RecordBatch | None":
        return self._next  # type: ignore[return-value]

    def take(self) -> "pyarrow.RecordBatch":
        batch, self._next = self._next, next(self._it, None)
        return batch  # type: ignore[return-value]


class _Budget:
    """Bytes of large events being taken in, owner-wide (invariant 7)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.used = 0

    def take(self, n: int, cap: int) -> bool:
        with self._lock:
            if self.used + n > cap:
                return False
            self.used += n
            return True

    def release(self, n: int) -> None:
        with self._lock:
            self.used = max(0, self.used - n)


class _Reaper:
    """One thread for every abandoned group reader's timeout (invariant 2), however many."""

    def __init__(self) -> None:
        self._cond = threading.Condition(threading.Lock())
        self._heap: list[tuple[float, int, Callable[[], object], str]] = []
        self._seq = 0
        self._thread: threading.Thread | None = None

    def after(self, delay: float, fn: Callable[[], object], what: str) -> None:
        with self._cond:
            self._seq += 1
            heapq.heappush(self._heap, (time.monotonic() + delay, self._seq, fn, what))
            if self._thread is None:
                self._thread = threading.Thread(target=self._run, name="pe-owner-reaper", daemon=True)
                self._thread.start()
            self._cond.notify()

    def _run(self) -> None:
        while True:
            with self._cond:
                while not self._heap or self._heap[0][0] > time.monotonic():
                    self._cond.wait(None if not self._heap else self._heap[0][0] - time.monotonic())
                _, _, fn, what = heapq.heappop(self._heap)
            _quietly(fn, what)


_LARGE_IN = _Budget()
_REAPER = _Reaper()
