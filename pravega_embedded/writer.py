"""Event writers: buffered, batched, exactly-once appends to one stream.

Owns: a writer's pending events (grouped by routing key), its sequence numbers, and the
handshake that lets another thread (the store's linger thread, ``flush()`` or ``close()``) take
the pending batch without a lock on the per-event path.

Invariants:
  1. Sequence numbers of a writer only grow. Auto sequences are ``last + 1``; an explicit
     ``sequence=`` at or below the writer's last sequence is a duplicate and is dropped.
  2. Batches reach the journal in sequence order, each as one record carrying the writer's last
     sequence, so after a crash the durable events of a writer are a gap-free prefix and
     ``last_sequence`` of a re-created writer says where to resume.
  3. ``write_events(events, routing_key)`` is atomic: all its events go into one record.
  4. Per routing key, events keep their write order (one list per key per batch; a key maps to
     one segment).
  5. A batch routed to a segment that a scaling sealed meanwhile is re-routed by the store to
     the successors under its append lock (each key to the one successor owning it), so a
     key's events never reach two open segments; after a scaling the route cache is rebuilt
     from the new segments.
  6. The pending batch is swapped out only when the writer thread is outside the per-event
     critical region: the writer raises ``_busy`` then checks ``_drain_pending``; a drainer
     raises ``_drain_pending`` then waits for ``_busy`` to fall (Dekker's handshake; CPython
     attribute loads and stores are sequentially consistent under the GIL).
  7. The store holds a writer only weakly (``WriterControl``); a writer dropped without
     ``close()`` hands itself to the engine (``__del__``), whose reaper thread closes it, so
     events written before the drop are appended all the same (storecore invariant 2).

Thread-safety: ``write_event``/``write_events`` from one thread at a time (use one writer per
thread); ``flush``, ``close``, ``durable_sequence`` from any thread.
"""

from __future__ import annotations

import threading
import time
import weakref
from collections import deque
from typing import TYPE_CHECKING, Any, Callable, Iterable, NamedTuple

from .errors import (
    EventTooLargeError,
    InvalidConfigurationError,
    InvalidRoutingKeyError,
    InvalidSequenceError,
    SerializationError,
    StreamSealedError,
    WriterClosedError,
)
from .failstop import STREAMS_LOG
from ._native import ffi
from .frames import FRAME_HEADER_SIZE, FrameParser, keyed_events
from .largeevents import write_large
from .routing import MAX_KEY_BYTES, encode_key, key_point, owner_index
from .serializers import resolve

if TYPE_CHECKING:
    from .append import Batch
    from .engine import Engine
    from .stream import StreamState

__all__ = ["EventStreamWriter", "WriterControl", "MAX_EVENT_SIZE", "MAX_BATCH_BYTES"]

MAX_EVENT_SIZE = 8 * 1024 * 1024
MAX_BATCH_BYTES = 64 * 1024 * 1024
MAX_PENDING_EVENTS = 8192  # with <= 4 KiB keys, a batch's frames stay under the record limit
_ROUTE_CACHE = 100_000
_CLOSING = threading.Lock()  # held only to test and set a writer's _closed
_NOKEY: list[object] = []


def _nokey(i: int) -> object:
    while len(_NOKEY) <= i:
        _NOKEY.append(object())
    return _NOKEY[i]


def _coerce(event: Any) -> bytes:
    if isinstance(event, (bytearray, memoryview)):
        return bytes(event)
    raise SerializationError(
        f"event must be bytes-like (or create the writer with serializer='text' or 'json'), "
        f"not {type(event).__name__}"
    )


def _bad_key(key: Any) -> InvalidRoutingKeyError:
    return InvalidRoutingKeyError(f"routing key must be a str or None, not {type(key).__name__}")


class _Refuse(dict):
    """The pending map of a writer that accepts no more events: every lookup raises."""

    def __init__(self, make_exc: Callable[[], Exception]) -> None:
        super().__init__()
        self.make_exc = make_exc

    def get(self, key: Any, default: Any = None) -> Any:  # noqa: ARG002
        raise self.make_exc()


class _Spreader:
    """Pending list for events without a routing key: spreads them over the open segments."""

    __slots__ = ("targets", "i")

    def __init__(self, targets: list[list[bytes]], start: int) -> None:
        self.targets, self.i = targets, start

    def append(self, event: bytes) -> None:
        self.targets[self.i].append(event)
        self.i = (self.i + 1) % len(self.targets)

    def extend(self, events: Iterable[bytes]) -> None:
        for e in events:
            self.append(e)


class _Hooks(NamedTuple):
    """A writer's settings read per batch or rarer: the append path, its close, the large-event
    limit, automatic time notes."""

    append: Callable[["StreamState", bytes, int, int, "Batch"], int]
    on_close: Callable[[], None]
    large_event_limit: int
    auto_time: bool  # note the wall-clock time after every batch (docs/event-time.md)


class EventStreamWriter:
    """Writes events to one stream. Create with ``store.create_writer(scope, stream, ...)``.

    ``write_event`` returns the event's sequence number at once; the event is durable (under
    the store's durability mode) once ``durable_sequence`` reaches it, which happens by itself
    within ``linger`` seconds or at ``flush()``.
    """

    def __init__(self, engine: "Engine", stream: "StreamState", writer_id: str, serializer: Any,
                 last_seq: int, *, linger: float, batch_bytes: int, auto_time: bool = False,
                 large_event_limit: int, append: Callable[["StreamState", bytes, int, int, "Batch"], int],
                 on_close: Callable[[], None]) -> None:
        self._engine = engine
        # one attribute for what is read per batch or rarer (CPython 3.11 keeps up to 29 instance
        # attributes in its fast shared-key layout: one more slows write_event down by ~7%)
        self._hooks = _Hooks(append, on_close, large_event_limit, auto_time)
        self._stream = stream
        self.scope, self.stream = stream.scope, stream.name
        self.writer_id = writer_id
        self._wid_b = writer_id.encode()
        ser = resolve(serializer)
        self._ser_fn = ser.serialize if ser is not None else None
        self.linger = linger
        self.batch_bytes = batch_bytes
        self._lists: dict[Any, Any] = {}
        self._frame_parser: FrameParser | None = None  # write_frames' (a client's batches)
        self._routes: dict[Any, tuple[Any, bytes | None]] = {}
        self._seq = last_seq
        self._submitted = last_seq
        self._durable = last_seq
        self._inflight: deque[tuple[int, int]] = deque()
        self._ack_lock = threading.Lock()
        self._io_lock = threading.Lock()
        self._nbytes = 0
        self._pending_n = 0
        self._busy = False
        self._drain_pending = False
        self._batch_t0 = 0.0
        self._refusal: Callable[[], Exception] | None = None  # makes the error writes raise
        self._failed: tuple[dict[Any, Any], int, int] | None = None
        self._closed: bool | threading.Event = False  # closing: an Event set once closed
        self._rr = 0
        self._topology = stream.topology
        self.duplicates_dropped = 0

    # ------------------------------------------------------------------ writing
    def write_event(self, event: object, routing_key: str | None = None, *, sequence: int | None = None) -> int:
        """Buffer one event; return its sequence number. Same key, same order, always.

        The event is buffered before the batch is handed to the journal: if this call raises
        StorageFullError while handing over a full batch, the event is kept (its sequence number
        is taken) and goes in with the batch on the next flush or write — do not send it again."""
        if self._ser_fn is not None:
            event = self._ser_fn(event)
        elif type(event) is not bytes:
            event = _coerce(event)
        n = len(event)
        if n > MAX_EVENT_SIZE:
            return self._write_large(event, routing_key, sequence)
        if sequence is not None:
            return self._write_explicit(event, routing_key, sequence)
        self._busy = True
        try:
            if self._drain_pending:
                self._yield_to_drain()
            lst = self._lists.get(routing_key)
            if lst is None:
                lst = self._new_key(routing_key)
            lst.append(event)
            self._nbytes += n
            self._pending_n += 1
            self._seq += 1
            seq = self._seq
        except TypeError:
            raise _bad_key(routing_key) from None
        finally:
            self._busy = False
        if self._nbytes >= self.batch_bytes or self._pending_n >= MAX_PENDING_EVENTS:
            self._drain()
        return seq

    def write_events(self, events: Iterable[object], routing_key: str | None = None) -> int:
        """Buffer a batch atomically (one journal record); return the last sequence number."""
        ser = self._ser_fn
        evs = [ser(e) for e in events] if ser is not None else list(events)
        if ser is None and not all(type(e) is bytes for e in evs):
            evs = [e if type(e) is bytes else _coerce(e) for e in evs]
        if not evs:
            return self._seq
        biggest = max(map(len, evs))
        if biggest > MAX_EVENT_SIZE:
            raise EventTooLargeError(
                f"an event of {biggest} bytes for {self.scope}/{self.stream} is over the "
                f"{MAX_EVENT_SIZE}-byte limit of a batch; nothing of this batch was written "
                "(write large events one at a time with write_event)"
            )
        nbytes = sum(map(len, evs))
        key_bytes = len(routing_key.encode("utf-8", "surrogateescape")) if isinstance(routing_key, str) else 0
        framed = nbytes + len(evs) * (FRAME_HEADER_SIZE + key_bytes)
        if framed > MAX_BATCH_BYTES:
            raise EventTooLargeError(
                f"a batch of {framed} framed bytes for {self.scope}/{self.stream} is over the "
                f"{MAX_BATCH_BYTES}-byte limit of one atomic record; write it in parts"
            )
        if self._pending_n and (self._nbytes + framed > MAX_BATCH_BYTES
                                or self._pending_n + len(evs) > MAX_PENDING_EVENTS):
            self._drain()
        self._busy = True
        try:
            if self._drain_pending:
                self._yield_to_drain()
            try:
                lst = self._lists.get(routing_key)
            except TypeError:
                raise _bad_key(routing_key) from None
            if lst is None:
                lst = self._new_key(routing_key)
            lst.extend(evs)
            self._nbytes += framed
            self._pending_n += len(evs)
            self._seq += len(evs)
            seq = self._seq
        finally:
            self._busy = False
        if self._nbytes >= self.batch_bytes or self._pending_n >= MAX_PENDING_EVENTS:
            self._drain()
        return seq

    def write_sequenced(self, first: int, events: list[tuple[str | None, bytes]]) -> int:
        """Buffer ``events`` ((routing key, bytes) in write order, each at most MAX_EVENT_SIZE)
        numbered ``first``, ``first + 1``, ...: what ``write_event(ev, key, sequence=n)`` does
        for each, in one call (a client process's batch, ``remote.session``). Those at or below
        ``last_sequence`` are dropped as duplicates; per key, order is kept. Returns
        ``last_sequence``."""
        if type(first) is not int or not 0 <= first <= (1 << 63) - len(events):
            raise InvalidSequenceError(f"writer {self.writer_id!r} on {self.scope}/{self.stream}: "
                                       f"sequences from {first!r} are out of range")
        skip = self._seq + 1 - first
        if skip > 0:  # a resend: what is at or below the last sequence is dropped
            self.duplicates_dropped += min(skip, len(events))
            events, first = events[skip:], first + skip
        if not events:
            return self._seq
        groups: dict[str | None, list[bytes]] = {}
        nbytes = 0
        for key, ev in events:
            g = groups.get(key)
            if g is None:
                encode_key(key)  # every key is checked before anything is buffered
                g = groups[key] = []
            g.append(ev)
            nbytes += len(ev)
        return self._buffer_groups(first, len(events), nbytes, groups, lambda: events)

    def write_frames(self, first: int, frames: bytes, count: int) -> int:
        """``write_sequenced`` of ``count`` events given as journal frames in write order (a
        client's WRITE, checked whole by ``remote.wire.parse_write``): grouped per key
        straight from the frames, each key decoded once."""
        if type(first) is not int or not 0 <= first <= (1 << 63) - count:
            raise InvalidSequenceError(f"writer {self.writer_id!r} on {self.scope}/{self.stream}: "
                                       f"sequences from {first!r} are out of range")
        fp = self._frame_parser
        if fp is None or fp.cap < count:
            fp = self._frame_parser = FrameParser(max(count, 1024))
        n, consumed = fp.parse(ffi.from_buffer(frames), len(frames), f"a batch for writer {self.writer_id!r}")
        if n != count or consumed != len(frames):
            raise InvalidConfigurationError(f"a batch of {count} frames for writer {self.writer_id!r} is damaged")
        skip = max(0, min(self._seq + 1 - first, n))
        if skip:  # a resend: what is at or below the last sequence is dropped
            self.duplicates_dropped += skip
            first += skip
        if skip == n:
            return self._seq
        raw: dict[bytes | None, list[bytes]] = {}
        for fo, pl, kl in zip(fp.fo[skip:n], fp.pl[skip:n], fp.kl[skip:n]):
            s = fo + FRAME_HEADER_SIZE
            if kl < 0:
                key, e = None, s
            else:
                e = s + kl
                key = frames[s:e]
            g = raw.get(key)
            if g is None:
                g = raw[key] = []
            g.append(frames[e:e + pl])
        groups: dict[str | None, list[bytes]] = {}
        for kb, evs in raw.items():
            key = None if kb is None else kb.decode("utf-8", "surrogateescape")
            encode_key(key)  # every key is checked before anything is buffered
            groups[key] = evs
        return self._buffer_groups(first, n - skip, sum(fp.pl[skip:n]), groups,
                                   lambda: keyed_events(frames, fp, skip, n))  # only if too big for one record

    def _buffer_groups(self, first: int, n: int, nbytes: int, groups: dict[str | None, list[bytes]],
                       ordered: Callable[[], list[tuple[str | None, bytes]]]) -> int:
        """Buffer ``n`` events grouped per key (``nbytes`` of payload) numbered from
        ``first``; ``ordered()`` gives them in write order if they must go event by event."""
        if n > MAX_PENDING_EVENTS or nbytes + n * (FRAME_HEADER_SIZE + MAX_KEY_BYTES) > MAX_BATCH_BYTES:
            for i, (key, ev) in enumerate(ordered()):  # too big for one record: event by event
                self._write_explicit(ev, key, first + i)
            return self._seq
        if self._pending_n and (self._nbytes + nbytes + n * (FRAME_HEADER_SIZE + MAX_KEY_BYTES) > MAX_BATCH_BYTES
                                or self._pending_n + n > MAX_PENDING_EVENTS):
            self._drain()
        self._busy = True
        try:
            if self._drain_pending:
                self._yield_to_drain()
            for key, evs in groups.items():
                lst = self._lists.get(key)  # raises if the writer is closed
                if lst is None:
                    lst = self._new_key(key)
                lst.extend(evs)
            self._nbytes += nbytes
            self._pending_n += n
            self._seq = first + n - 1
        finally:
            self._busy = False
        if self._nbytes >= self.batch_bytes or self._pending_n >= MAX_PENDING_EVENTS:
            self._drain()
        return self._seq

    def _write_explicit(self, event: bytes, routing_key: str | None, sequence: int) -> int:
        if type(sequence) is not int or not 0 <= sequence < (1 << 63):
            raise InvalidSequenceError(
                f"writer {self.writer_id!r} on {self.scope}/{self.stream}: sequence must be an "
                f"int in [0, 2**63), got {sequence!r}"
            )
        self._busy = True
        try:
            if self._drain_pending:
                self._yield_to_drain()
            try:
                lst = self._lists.get(routing_key)  # raises if the writer is closed
            except TypeError:
                raise _bad_key(routing_key) from None
            if sequence <= self._seq:
                self.duplicates_dropped += 1
                return sequence
            if lst is None:
                lst = self._new_key(routing_key)
            lst.append(event)
            self._nbytes += len(event)
            self._pending_n += 1
            self._seq = sequence
        finally:
            self._busy = False
        if self._nbytes >= self.batch_bytes or self._pending_n >= MAX_PENDING_EVENTS:
            self._drain()
        return sequence

    def _write_large(self, event: bytes, routing_key: str | None, sequence: int | None) -> int:
        """A large event (largeevents): pending events first, then the event's chunks and its
        MERGE; returns once it is written (durable at the next flush, like any event)."""
        n = len(event)
        limit = self._hooks.large_event_limit
        if n > limit:
            raise EventTooLargeError(
                f"event of {n} bytes for {self.scope}/{self.stream} is over the store's "
                f"{limit}-byte large_event_limit"
            )
        kb = encode_key(routing_key)
        if self._refusal is not None:
            raise self._refusal()
        self._drain()  # the events before it go first (per-key order)
        with self._io_lock:
            if self._failed is not None:
                self._submit(*self._failed)
                self._failed = None
            if sequence is not None:
                if type(sequence) is not int or not 0 <= sequence < (1 << 63):
                    raise InvalidSequenceError(
                        f"writer {self.writer_id!r} on {self.scope}/{self.stream}: sequence must be "
                        f"an int in [0, 2**63), got {sequence!r}")
                if sequence <= self._seq:
                    self.duplicates_dropped += 1
                    return sequence
            seq = self._seq + 1 if sequence is None else sequence
            if self._stream.sealed:
                raise StreamSealedError(f"stream {self.scope}/{self.stream} is sealed")
            self._rr += 1

            def appended(end: int) -> None:  # the MERGE exists: the sequence is taken
                self._seq = self._submitted = seq
                with self._ack_lock:
                    self._inflight.append((end, seq))

            write_large(self._engine, self._stream, self.writer_id, seq, kb, event, self._rr, appended)
            if self._hooks.auto_time:
                self._engine.watermarks.note(self._stream, self.writer_id, time.time_ns() // 1_000_000)
        return seq

    def _new_key(self, key: Any) -> Any:
        """First event of ``key`` in this batch: route it and start its list (writer thread)."""
        lists = self._lists
        if not lists:
            self._batch_t0 = t0 = time.monotonic()
            self._engine.wake_linger(t0 + self.linger)
        if key is None:
            segs = self._stream.routing[1]
            targets = []
            for i, seg in enumerate(segs):
                k = _nokey(i)
                self._routes[k] = (seg, None)
                lists[k] = t = []
                targets.append(t)
            self._rr = (self._rr + 1) % len(segs)
            sp = lists[None] = _Spreader(targets, self._rr)
            return sp
        route = self._routes.get(key)
        if route is None:
            kb = encode_key(key)
            lows, segs = self._stream.routing
            route = self._routes[key] = (segs[owner_index(lows, key_point(key))], kb)
        lst: list[bytes] = []
        lists[key] = lst
        return lst

    # ------------------------------------------------------------------ handing batches over
    def _yield_to_drain(self) -> None:
        """Writer thread, inside the critical region, saw a drainer: step out until it is done."""
        while self._drain_pending:
            self._busy = False
            while self._drain_pending:
                time.sleep(0)
            self._busy = True

    def _take(self) -> tuple[dict[Any, Any], int]:
        """Swap out the pending batch (any thread; caller holds _io_lock). Invariant 6."""
        self._drain_pending = True
        try:
            while self._busy:
                time.sleep(0)
            lists, seq = self._lists, self._seq
            refusal = self._refusal
            if refusal is None and self._engine.latch.failed:
                # the latch tripped but its listener has not refused this writer yet (it may
                # never get the I/O lock we hold): refuse here, so no write is accepted after
                refusal = self._refusal = self._engine.latch.fresh
            self._lists = {} if refusal is None else _Refuse(refusal)
            self._nbytes = 0
            self._pending_n = 0
            self._batch_t0 = 0.0
            topology = self._stream.topology
            if topology != self._topology:
                # the stream scaled: route every key afresh (the store re-routes this batch too
                # if it raced with the scaling; keyless routes are renewed per batch)
                self._topology = topology
                lows, segs = self._stream.routing
                self._routes = {
                    k: (v if v[1] is None else (segs[owner_index(lows, key_point(k))], v[1]))
                    for k, v in self._routes.items() if k in lists
                }
            elif len(self._routes) > _ROUTE_CACHE:
                self._routes = {k: v for k, v in self._routes.items() if k in lists}
        finally:
            self._drain_pending = False
        return lists, seq

    def _drain(self) -> int | None:
        """Append the pending batch to the journal; return its end position (or None)."""
        with self._io_lock:
            try:
                if self._failed is not None:
                    self._submit(*self._failed)
                    self._failed = None
                lists, seq = self._take()
                if seq == self._submitted:
                    return None
                batch = (lists, self._submitted + 1, seq)
                try:
                    self._submit(*batch)
                except BaseException:
                    self._failed = batch  # kept, in order, for the next flush (nothing is lost)
                    raise
            finally:
                if self._engine.latch.failed and type(self._lists) is not _Refuse:
                    # the store failed meanwhile: what is pending can never be acknowledged;
                    # writes raise from now on (any other refusal flushes what is pending)
                    self._take()
            return self._inflight[-1][0] if self._inflight else None

    def _submit(self, lists: dict[Any, Any], first: int, last: int) -> None:
        by_seg: dict[Any, list[tuple[bytes | None, list[bytes]]]] = {}
        routes = self._routes
        for key, lst in lists.items():
            if type(lst) is not list or not lst:
                continue
            seg, kb = routes[key]
            g = by_seg.get(seg)
            if g is None:
                by_seg[seg] = [(kb, lst)]
            else:
                g.append((kb, lst))
        if by_seg:
            end = self._hooks.append(self._stream, self._wid_b, first, last, by_seg)
            with self._ack_lock:
                self._inflight.append((end, last))
            if self._hooks.auto_time:
                self._engine.watermarks.note(self._stream, self.writer_id, time.time_ns() // 1_000_000)
        else:
            with self._ack_lock:
                if not self._inflight:
                    self._durable = max(self._durable, last)
        self._submitted = last

    def _linger_tick(self, now: float) -> float | None:
        """Called by the store's linger thread: drain if the batch is older than ``linger``.
        Returns when this writer next needs a tick (None: nothing pending)."""
        t0 = self._batch_t0
        if not t0:
            return None
        due = t0 + self.linger
        if now < due:
            return due
        try:
            self._drain()
        except Exception:  # noqa: BLE001 - the batch is kept in _failed; the next flush raises
            STREAMS_LOG.warning("writer %r on %s/%s: a lingering batch could not be appended; "
                                "it is kept and the next flush or write retries it", self.writer_id,
                                self.scope, self.stream, exc_info=True)
        return None

    def note_time(self, timestamp: int) -> None:
        """Say that every event this writer writes from now on has event time >= ``timestamp``
        (an int in the application's unit; docs/event-time.md). Pending events are appended
        first, so they count as before the note. Readers turn notes into time windows."""
        if isinstance(timestamp, bool) or not isinstance(timestamp, int) or not 0 <= timestamp < (1 << 63):
            raise InvalidConfigurationError(f"note_time needs an int timestamp >= 0, got {timestamp!r}")
        if self._closed:
            raise WriterClosedError(f"writer {self.writer_id!r} on {self.scope}/{self.stream} is closed")
        self._drain()
        self._engine.watermarks.note(self._stream, self.writer_id, timestamp)

    # ------------------------------------------------------------------ acknowledgement
    @property
    def last_sequence(self) -> int:
        """The last sequence number written (-1: none yet). After a restart: the last durable
        one, so an application resumes from ``last_sequence + 1``."""
        return self._seq

    @property
    def durable_sequence(self) -> int:
        """The highest sequence number known durable under the store's durability mode."""
        with self._ack_lock:
            infl = self._inflight
            if infl:
                synced = self._engine.journal.acked()
                while infl and infl[0][0] <= synced:
                    self._durable = infl.popleft()[1]
            return self._durable

    def _acked_through(self, pos: int) -> int:
        """durable_sequence once the journal acknowledged everything before ``pos``."""
        with self._ack_lock:
            infl = self._inflight
            while infl and infl[0][0] <= pos:
                self._durable = infl.popleft()[1]
            return self._durable

    def flush(self, timeout: float | None = None) -> int:
        """Wait until every event written so far is durable; return ``durable_sequence``."""
        if self._closed:
            raise WriterClosedError(f"writer {self.writer_id!r} on {self.scope}/{self.stream} is closed")
        return self._flush(timeout)

    def _flush(self, timeout: float | None) -> int:
        if self._engine.latch.failed:
            raise self._engine.latch.fresh()  # fail-stop: nothing more is acknowledged
        self._drain()
        with self._ack_lock:
            end = self._inflight[-1][0] if self._inflight else None
        if end is None:
            return self.durable_sequence
        self._engine.journal.wait_acked(end, timeout, what=f"flush of writer {self.writer_id!r}")
        return self._acked_through(end)

    # ------------------------------------------------------------------ lifecycle
    def _refuse(self, make_exc: Callable[[], Exception], *, flush: bool) -> None:
        """Stop accepting events (seal, delete, a failed store): later writes raise
        ``make_exc()``. Without flush the pending events are dropped (never acknowledged); if
        another thread holds the writer's I/O lock (it may be the one whose call failed), the
        refusal takes effect at its next hand-over instead of waiting for it."""
        self._refusal = make_exc
        if flush:
            self._drain()
        elif self._io_lock.acquire(blocking=False):
            try:
                self._take()
            finally:
                self._io_lock.release()

    def close(self) -> None:
        """Flush and close. Idempotent; a close while another thread's close is under way
        returns when that one has finished."""
        done = threading.Event()  # made before the lock: nothing under it allocates (storecore)
        with _CLOSING:
            closing = self._closed
            if not closing:
                self._closed = done
        if closing:
            if isinstance(closing, threading.Event):
                closing.wait()
            return
        try:
            if self._refusal is None:
                message = f"writer {self.writer_id!r} on {self.scope}/{self.stream} is closed"
                self._refusal = lambda: WriterClosedError(message)
            with self._engine.unbudgeted():  # a close never drops its batch for the budget
                self._flush(None)
        finally:
            try:
                self._hooks.on_close()
            finally:
                done.set()

    @property
    def closed(self) -> bool:
        return bool(self._closed)

    def __del__(self) -> None:
        # invariant 7: a writer dropped unclosed is closed by the engine (this keeps it alive)
        if not getattr(self, "_closed", True) and not self._engine.closed:
            self._engine.adopt(self)

    def __enter__(self) -> "EventStreamWriter":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (
            f"<EventStreamWriter {self.writer_id!r} on {self.scope}/{self.stream} "
            f"last_sequence={self._seq}{' closed' if self._closed else ''}>"
        )


class WriterControl:
    """What the store does to an open writer from outside its thread: the linger thread's
    ``tick``, and ``refuse`` when its stream is sealed or deleted. The store makes one per
    writer and keeps it in the engine's set of writers and the stream's."""

    __slots__ = ("_writer", "writer_id", "stream_key")

    def __init__(self, writer: EventStreamWriter) -> None:
        self._writer = weakref.ref(writer)  # invariant 7
        self.writer_id = writer.writer_id
        self.stream_key = f"{writer.scope}/{writer.stream}"

    def tick(self, now: float) -> float | None:
        """Drain the writer's batch if it is older than its linger; when to tick next."""
        w = self._writer()
        return None if w is None else w._linger_tick(now)

    def refuse(self, make_exc: Callable[[], Exception], *, flush: bool) -> None:
        """Stop the writer accepting events (seal, delete, a failed store): later writes raise
        ``make_exc()``."""
        w = self._writer()
        if w is not None:
            w._refuse(make_exc, flush=flush)

    def close(self) -> None:
        w = self._writer()
        if w is not None:
            w.close()
