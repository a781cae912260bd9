"""Reading: segment chunks, standalone readers, and slices between two StreamCuts.

Owns: finding a segment's bytes at an offset (tail cache in memory, else the journal through
the in-memory or LMDB section index), turning frames into EventRead tuples (the frames are
parsed in C once per chunk), the standalone reader, and Slice (iterate, Arrow, pandas).

Invariants:
  1. Only durable data is visible: a section is read only once the journal is synced past it.
  2. Reads start and stop at frame boundaries; a cut offset that is not one is rejected
     (InvalidStreamCutError), never parsed as garbage.
  3. Within a segment, events come back in offset order, so per-key order is write order.
  4. A waiting reader sleeps on the stream's condition (woken by appends, seal, delete) or in
     the journal's sync wait; it never polls.

Thread-safety: a reader is used by one thread at a time; ``close()`` from any thread. Slices are
read-only snapshots and may be iterated from several threads (each iteration is independent).
"""

from __future__ import annotations

import struct
import time
from typing import Any, Iterator

from ._native import ffi
from .errors import (
    CorruptDataError,
    InvalidConfigurationError,
    InvalidEventPointerError,
    InvalidStreamCutError,
    ReaderClosedError,
    StorageError,
    StoreClosedError,
    StreamNotFoundError,
    TruncatedDataError,
)
from .events import EventRead
from .frames import FrameParser
from .largeevents import LargeFrame, read_large
from .serializers import resolve

__all__ = ["EventStreamReader", "Slice", "SegmentSource", "deadline_of", "visible_lengths"]

_new = tuple.__new__
_FRAME_HEAD = struct.Struct("<IH")  # payload length, key length (frames.c)


def events_from(data: bytes, base: int, sid: int, names: tuple[str, str], ser: Any,
                frames: FrameParser, what: str) -> list[EventRead]:
    """All events in ``data`` (complete frames; the first at segment offset ``base``)."""
    out: list[EventRead] = []
    ER = EventRead
    if type(data) is LargeFrame:
        ev = data.event if ser is None else ser.deserialize(data.event)
        return [_new(ER, (ev, data.key, sid, base, data.length, names))]
    cbuf = ffi.from_buffer(data)
    pos, total = 0, len(data)
    while pos < total:
        n, consumed = frames.parse(cbuf + pos, total - pos, what)
        if n == 0:
            raise CorruptDataError(f"{what}: a damaged frame at offset {base + pos}")
        b = base + pos
        kls = frames.kl[:n]
        ap = out.append
        if min(kls) >= 0:  # every event has a key: the common case, no branch per event
            for fo, pl, kl in zip(frames.fo[:n], frames.pl[:n], kls):
                s = pos + fo + 6
                e = s + kl
                ap(_new(ER, (data[e : e + pl], data[s:e], sid, b + fo, 6 + kl + pl, names)))
        else:
            for fo, pl, kl in zip(frames.fo[:n], frames.pl[:n], kls):
                s = pos + fo + 6
                if kl < 0:
                    ap(_new(ER, (data[s : s + pl], None, sid, b + fo, 6 + pl, names)))
                else:
                    e = s + kl
                    ap(_new(ER, (data[e : e + pl], data[s:e], sid, b + fo, 6 + kl + pl, names)))
        pos += consumed
    if ser is not None:
        de = ser.deserialize
        out = [_new(ER, (de(e[0]),) + e[1:]) for e in out]
    return out


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


def deadline_of(timeout: Any) -> float | None:
    """The monotonic deadline of a read ``timeout`` (None: no deadline); a timeout that is not a
    number raises InvalidConfigurationError."""
    if timeout is None:
        return None
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)):
        raise InvalidConfigurationError(f"timeout must be a number of seconds or None, got {timeout!r}")
    return time.monotonic() + max(0.0, timeout)


def _visible(seg: Any, synced: int) -> int:
    """``seg``'s length counting only sections visible at ``synced`` (index lock held)."""
    length = seg.length
    entries = seg.entries
    i = len(entries) - 1
    while i >= 0:
        e = entries[i]
        if e[5] <= synced:
            break
        length = e[0]
        i -= 1
    return length


def visible_lengths(store: Any, segs: dict[int, Any], synced: int) -> dict[int, int]:
    """Every segment's visible length at ``synced``, under one hold of the index lock: a
    snapshot across segments (a MERGE applies all its parts under one hold too)."""
    with store._index_lock:
        return {sid: _visible(seg, synced) for sid, seg in segs.items()}


class SegmentSource:
    """Reads one segment's bytes for readers and slices."""

    __slots__ = ("store", "seg")

    def __init__(self, store: Any, seg: Any) -> None:
        self.store, self.seg = store, seg

    def section(self, offset: int) -> tuple[int, int, int, Any, int]:
        """(start, end, journal position, cached data or None, events starting in it) of the
        section containing offset."""
        seg = self.seg
        with self.store._index_lock:
            e = seg.find(offset)
            if e is not None:
                return e[0], e[1], e[2], e[3], e[6]
        hit = self.store._meta.index_floor(seg.uid, offset)
        if hit is None or offset >= hit[0] + hit[2]:
            with self.store._index_lock:  # it may have been appended meanwhile
                e = seg.find(offset)
                if e is not None:
                    return e[0], e[1], e[2], e[3], e[6]
            raise CorruptDataError(f"segment {seg.name}: no data indexed at offset {offset}")
        start, pos, nbytes, nev = hit
        return start, start + nbytes, pos, None, nev

    def visible_length(self, synced: int) -> int:
        """The segment's length counting only durable sections (invariant 1)."""
        with self.store._index_lock:
            return _visible(self.seg, synced)

    def read(self, offset: int, limit: int, *, copy: bool = True) -> tuple[Any, int]:
        """Complete frames from ``offset`` to the end of its section or ``limit``: (bytes, end).
        With copy=False a cached section comes back as a read-only memoryview (no copy). A
        large event (a frame longer than its section, ``largeevents``) comes back whole as a
        LargeFrame."""
        data, stop = self.read_raw(offset, limit, copy=copy)
        if len(data) >= 6:
            pl, kl = _FRAME_HEAD.unpack_from(data, 0)
            if 6 + (0 if kl == 0xFFFF else kl) + pl > len(data):
                try:
                    return read_large(self, offset, limit, data)
                except OSError as exc:  # CorruptDataError and StorageError are OSErrors too
                    self._truncated(offset)
                    if isinstance(exc, (CorruptDataError, StorageError)):
                        raise
                    raise StorageError(f"read of segment {self.seg.name} at {offset}: {exc}") from exc
        return data, stop

    def _truncated(self, offset: int) -> None:
        """Raise TruncatedDataError if ``offset`` is before the head now (a failed read raced
        with a truncation whose reclaim deleted the journal file)."""
        seg = self.seg
        head = seg.stream.head.get(seg.segment_id, 0)
        if offset < head:
            raise TruncatedDataError(f"offset {offset} of segment {seg.name} was truncated (head {head})") from None

    def read_raw(self, offset: int, limit: int, *, copy: bool = True) -> tuple[Any, int]:
        """The bytes from ``offset`` to the end of its section or ``limit``: (bytes, end)."""
        try:
            start, end, pos, data, _ = self.section(offset)
            stop = min(end, limit)
            if data is not None:
                view = data[offset - start : stop - start]
                return (bytes(view) if copy else view.toreadonly()), stop
            return self.store._journal.pread(pos + (offset - start), stop - offset), stop
        except (CorruptDataError, StorageError):
            self._truncated(offset)  # truncated (and its journal file deleted) meanwhile
            raise

    def check_boundary(self, offset: int, what: str) -> None:
        """Raise InvalidStreamCutError unless ``offset`` starts a frame (or is the end)."""
        seg = self.seg
        if offset == 0 or offset == seg.length:
            return
        start, _, _, _, nev = self.section(offset)
        if nev == 0:  # inside a large event (its continuation chunks start no event)
            raise InvalidStreamCutError(
                f"{what}: offset {offset} is inside a large event in segment {seg.name}"
            )
        if offset == start:
            return
        data, _ = self.read_raw(start, offset)
        frames = FrameParser(1024)
        cbuf = ffi.from_buffer(data)
        p = 0
        while p < len(data):
            n, consumed = frames.parse(cbuf + p, len(data) - p, what)
            if n == 0:
                break
            p += consumed
        if p != len(data):
            raise InvalidStreamCutError(
                f"{what}: offset {offset} is not an event boundary in segment {seg.name}"
            )

    def fetch(self, offset: int, length: int, serializer: Any) -> EventRead:
        seg = self.seg
        head = seg.stream.head.get(seg.segment_id, 0)
        if offset < head:
            raise TruncatedDataError(f"offset {offset} of segment {seg.name} was truncated (head {head})")
        if offset + length > seg.length or length < 6:
            raise InvalidEventPointerError(f"no event at {offset}+{length} in segment {seg.name}")
        try:
            self.check_boundary(offset, f"fetch from {seg.name}")
        except InvalidStreamCutError:
            raise InvalidEventPointerError(
                f"no event starts at offset {offset} of segment {seg.name}"
            ) from None
        try:
            data, stop = self.read(offset, offset + length)
        except CorruptDataError:  # a large event's frame is longer than the pointer says
            raise InvalidEventPointerError(f"no event at {offset}+{length} in segment {seg.name}") from None
        if stop != offset + length:
            raise InvalidEventPointerError(f"no event at {offset}+{length} in segment {seg.name}")
        try:
            evs = events_from(data, offset, seg.segment_id, seg.stream.names, resolve(serializer),
                              FrameParser(4), f"fetch from {seg.name}")
        except CorruptDataError:
            raise InvalidEventPointerError(f"no event at {offset}+{length} in segment {seg.name}") from None
        if len(evs) != 1 or evs[0].length != length:
            raise InvalidEventPointerError(f"no event at {offset}+{length} in segment {seg.name}")
        return evs[0]


class EventStreamReader:
    """A standalone reader of one stream: ``read_next_event(timeout)`` -> EventRead or None.

    Reads every segment from the start cut (default: the head) to the end cut (default: none,
    follow the tail). A segment is read only once all its predecessors are read completely, so
    per routing key, events come in write order across any number of scalings.
    """

    def __init__(self, store: Any, st: Any, start: dict[int, int] | None, end: dict[int, int] | None,
                 serializer: Any) -> None:
        self._store = store
        self._st = st
        self.scope, self.stream = st.scope, st.name
        self._ser = resolve(serializer)
        self._bounded = end is not None
        self._src: dict[int, SegmentSource] = {}
        self._pos: dict[int, int] = {}
        self._end: dict[int, int | None] = {}
        self._active: list[int] = []  # reached (every predecessor read) and not completed
        self._completed: set[int] = set()
        self._topology = -1
        self._start = start
        self._endmap = end
        self._adopt()
        if end is not None and any(
            e is not None and self._pos[sid] > e for sid, e in self._end.items()
        ):
            raise InvalidStreamCutError(f"the end cut of {st.key} is before the start cut")
        self._frames = FrameParser()
        self._it: Iterator[EventRead] = iter(())
        self._rr = 0
        self._closed = False
        self._window: Any = None

    def _adopt(self) -> None:
        """Take in segments created since the last look (all of them at creation)."""
        st = self._st
        self._topology = st.topology
        segs = dict(st.segments)
        fresh = sorted(sid for sid in segs if sid not in self._src)
        if not fresh:
            return
        for sid in fresh:
            seg = segs[sid]
            head = st.head.get(sid, 0)
            p = head if self._start is None else self._start.get(sid, 0)
            if p < head and self._start is not None and sid in self._start:
                raise TruncatedDataError(
                    f"start offset {p} of segment {seg.name} is before the stream's head ({head})"
                )
            self._src[sid] = SegmentSource(self._store, seg)
            self._pos[sid] = p
            self._end[sid] = None if self._endmap is None else self._endmap.get(sid, 0)
        for sid in fresh:  # ascending id is a topological order (topology invariant 1)
            self._reach(sid)

    def _reach(self, sid: int) -> None:
        """Activate ``sid`` if every predecessor is completed; complete it at once if it is
        already read to its end and scaled away."""
        if sid in self._completed or sid in self._active:
            return
        seg = self._src[sid].seg
        if not all(p in self._completed for p in seg.preds):
            return
        self._active.append(sid)
        self._active.sort()
        if seg.sealed and seg.succs and self._pos[sid] >= seg.length:
            self._complete(sid)

    def _complete(self, sid: int) -> None:
        self._active.remove(sid)
        self._completed.add(sid)
        for t in self._src[sid].seg.succs:
            if t in self._src:
                self._reach(t)

    def read_next_event(self, timeout: float | None = None) -> EventRead | None:
        """The next event, or None when ``timeout`` seconds pass without one or the end is
        reached (end cut, or sealed stream fully read). timeout=None waits without limit."""
        try:
            return next(self._it)
        except StopIteration:
            return self._next_slow(timeout)

    def _skip_truncated(self) -> None:
        """Move every active segment whose position was truncated away to the head; raise
        TruncatedDataError once if any moved (the next call goes on from the head)."""
        st = self._st
        moved = []
        changed = True
        while changed:
            changed = False
            for sid in list(self._active):
                head = st.head.get(sid, 0)
                if self._pos[sid] < head:
                    moved.append(f"{self._src[sid].seg.name} at {self._pos[sid]} (head {head})")
                    self._pos[sid] = head
                    seg = self._src[sid].seg
                    if seg.sealed and seg.succs and head >= seg.length:
                        self._complete(sid)
                        changed = True
        if moved:
            raise TruncatedDataError(
                f"reader of {st.key}: truncated data skipped in {', '.join(moved)}; the reader "
                f"continues from the stream's head"
            )

    def _next_slow(self, timeout: float | None) -> EventRead | None:
        st, store = self._st, self._store
        deadline = deadline_of(timeout)
        while True:
            if self._closed:
                raise ReaderClosedError(f"reader of {st.key} is closed")
            if store._closed:
                raise StoreClosedError(f"store {store.path} is closed")
            if st.deleted:
                raise StreamNotFoundError(f"stream {st.key} was deleted")
            version = st.version
            if st.topology != self._topology:
                self._adopt()
            self._skip_truncated()
            synced = store._journal.synced()
            unsynced = False
            done = True
            progressed = False
            active = self._active
            n = len(active)
            for k in range(n):
                sid = active[(self._rr + k) % n]
                src, pos, end = self._src[sid], self._pos[sid], self._end[sid]
                seg = src.seg
                length = seg.length
                if seg.sealed and pos >= length and seg.succs and (end is None or end >= length):
                    self._complete(sid)  # scaled away and read: its successors take over
                    progressed = True
                    break
                if not ((end is not None and pos >= end) or (st.sealed and seg.sealed and pos >= length)):
                    done = False
                limit = length if end is None else min(end, length)
                if pos >= limit:
                    continue
                visible = src.visible_length(synced)
                if pos >= visible:
                    unsynced = True
                    continue
                try:
                    data, stop = src.read(pos, min(limit, visible))
                except TruncatedDataError:
                    self._skip_truncated()  # raises once, having moved to the head
                    raise
                evs = events_from(data, pos, seg.segment_id, st.names, self._ser, self._frames,
                                  f"read of {seg.name}")
                self._pos[sid] = stop
                self._rr = (self._rr + k + 1) % n
                self._it = iter(evs)
                return next(self._it)
            if progressed:
                continue
            if done:
                return None
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            if unsynced:
                written = store._journal.state()[0]
                try:
                    store._journal.sync(written, remaining, what=f"read of {st.key}")
                except TimeoutError:
                    return None
                continue
            with st.cond:
                st.waiters += 1
                try:
                    if st.version == version and not self._closed:
                        st.cond.wait(remaining)
                finally:
                    st.waiters -= 1

    def __iter__(self) -> Iterator[EventRead]:
        """Iterate until the end (bounded reader or sealed stream); blocks at the tail."""
        while True:
            ev = self.read_next_event(None)
            if ev is None:
                return
            yield ev

    def _returned(self) -> dict[int, int]:
        """Per segment, the offset just after the last event returned (a full map)."""
        pending = list(self._it)
        self._it = iter(pending)
        pos = dict(self._pos)
        for ev in pending:  # events fetched but not yet returned
            pos[ev.segment_id] = min(pos[ev.segment_id], ev.offset)
        return pos

    def position(self) -> Any:
        """The StreamCut just after the last event returned."""
        from .streamcut import StreamCut
        from .topology import frontier
        segs = {sid: src.seg for sid, src in self._src.items()}
        return StreamCut.of(self.scope, self.stream, frontier(segs, self._returned()))

    def get_current_time_window(self) -> Any:
        """The event-time window at this reader's position: ``TimeWindow(lower, upper)`` from
        the writers' noted times (docs/event-time.md); bounds are None until known."""
        window = self._store._watermarks.window(self._st, self._returned())
        last = self._window
        if last is not None:  # never backwards (watermarks invariant 1; guards a truncation)
            upper = window.upper  # None is "unknown" (past every watermark), not a low bound
            if upper is not None and last.upper is not None:
                upper = max(upper, last.upper)
            window = type(window)(_max(window.lower, last.lower), upper)
        self._window = window
        return window

    def close(self) -> None:
        """Idempotent; wakes a read blocked in another thread (it raises ReaderClosedError)."""
        if not self._closed:
            self._closed = True
            self._it = iter(())  # events fetched but not returned are not handed out after close
            self._st.notify()

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self) -> "EventStreamReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


class Slice:
    """The events of one stream between two cuts, as a snapshot taken at creation."""

    def __init__(self, store: Any, st: Any, start: dict[int, int] | None, end: dict[int, int] | None,
                 serializer: Any) -> None:
        self._store, self._st = store, st
        self._ser = resolve(serializer)
        synced = store._journal.synced()
        segs = dict(st.segments)
        visible = visible_lengths(store, segs, synced)  # one snapshot across the segments
        if end is not None and any(end.get(sid, 0) > visible[sid] for sid in segs):
            # the end names data not yet durable: wait for it (raises if the journal failed)
            store._journal.sync(store._journal.state()[0], None, what=f"slice of {st.key}")
            visible = visible_lengths(store, segs, store._journal.synced())
        self._ranges = []
        for sid in sorted(segs):  # ascending id: predecessors before successors
            seg = segs[sid]
            src = SegmentSource(store, seg)
            head = st.head.get(sid, 0)
            lo = head if start is None else start.get(sid, 0)
            if lo < head:
                raise TruncatedDataError(
                    f"start offset {lo} of segment {seg.name} is before the stream's head ({head})"
                )
            hi = visible[sid] if end is None else end.get(sid, 0)
            if hi < lo:
                raise InvalidStreamCutError(f"slice of {st.key}: end is before start in {seg.name}")
            self._ranges.append((src, lo, hi))

    @property
    def ranges(self) -> list[tuple[int, int, int]]:
        """(segment id, start offset, end offset) per segment: the batch API's unit of work."""
        return [(src.seg.segment_id, lo, hi) for src, lo, hi in self._ranges]

    @property
    def nbytes(self) -> int:
        """Framed bytes in the slice."""
        return sum(hi - lo for _, lo, hi in self._ranges)

    def _chunks(self, copy: bool = True) -> Iterator[tuple[Any, Any, int]]:
        for src, lo, hi in self._ranges:
            pos = lo
            while pos < hi:
                if self._st.deleted:
                    raise StreamNotFoundError(f"stream {self._st.key} was deleted")
                data, stop = src.read(pos, hi, copy=copy)
                yield src.seg, data, pos
                data = None  # not held while the next chunk (maybe a large event) is read
                pos = stop

    def __iter__(self) -> Iterator[EventRead]:
        frames = FrameParser()
        st = self._st
        for seg, data, pos in self._chunks():
            evs = events_from(data, pos, seg.segment_id, st.names, self._ser, frames,
                              f"slice of {seg.name}")
            data = None
            yield from evs
            evs = None  # the caller's event is all that stays alive while the next is read

    def to_arrow(self) -> Any:
        """A pyarrow Table: event (large_binary), routing_key (large_string, null if none),
        segment_id (int64), offset (int64)."""
        from .arrow import slice_to_arrow
        return slice_to_arrow(
            (seg, data.frame() if type(data) is LargeFrame else data, pos)
            for seg, data, pos in self._chunks(copy=False)
        )

    def to_pandas(self) -> Any:
        """A pandas DataFrame with the columns of ``to_arrow()`` (needs pandas)."""
        try:
            import pandas  # noqa: F401
        except ImportError as exc:
            raise ImportError("Slice.to_pandas() needs pandas: pip install 'pravega-embedded[pandas]'") from exc
        return self.to_arrow().to_pandas()
