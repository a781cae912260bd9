"""Reading streams: standalone readers, and slices between two StreamCuts.

Owns: the standalone reader (a position per segment, successors reached only after their
predecessors, waiting at the tail) and Slice (a snapshot between two cuts: iterate it, or turn
it into Arrow or pandas). One segment's bytes and events come from ``segsource``.

Invariants:
  1. Only acknowledged data is visible (segsource invariant 1).
  2. Within a segment, events come back in offset order, so per-key order is write order; a
     segment is read only after all its predecessors are read to their end.
  3. A waiting reader sleeps on the stream's condition (woken by appends, seal, delete) or in
     the journal's acknowledgement wait; it never polls.

Thread-safety: a reader is used by one thread at a time; ``close()`` from any thread. The
reading thread takes buffered events with a lock-free ``next()``; installing a chunk, taking the
unreturned rest (close, position) and close itself hold the reader's ``_chunk_lock``, and close
empties the chunk's own iterator, so an event is either returned or before position(). Slices are
read-only snapshots and may be iterated from several threads (each iteration is independent).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any, Iterator

from .errors import (
    InvalidStreamCutError,
    ReaderClosedError,
    StoreClosedError,
    StreamNotFoundError,
    TruncatedDataError,
)
from .events import EventRead
from .frames import FrameParser
from .largeevents import LargeFrame
from .segsource import SegmentSource, deadline_of
from .serializers import resolve

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from .engine import Engine
    from .stream import StreamState
    from .streamcut import StreamCut
    from .watermarks import TimeWindow

__all__ = ["EventStreamReader", "Slice"]


def _max(a: int | None, b: int | None) -> int | None:
    return b if a is None else a if b is None else max(a, b)


class EventStreamReader:
    """A standalone reader of one stream: ``read_next_event(timeout)`` -> EventRead or None.

    Reads every segment from the start cut (default: the head) to the end cut (default: none,
    follow the tail). A segment is read only once all its predecessors are read completely, so
    per routing key, events come in write order across any number of scalings.
    """

    def __init__(self, engine: "Engine", st: "StreamState", start: dict[int, int] | None,
                 end: dict[int, int] | None, serializer: Any) -> None:
        self._engine = engine
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
        self._chunk_lock = threading.Lock()  # installing / taking the buffered chunk, close
        self._window: TimeWindow | None = None
        self._ended = False  # a read found everything up to the end read

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
            self._src[sid] = SegmentSource(self._engine, seg)
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
        st, engine = self._st, self._engine
        journal = engine.journal
        deadline = deadline_of(timeout)
        while True:
            if self._closed:
                raise ReaderClosedError(f"reader of {st.key} is closed")
            if engine.closed:
                raise StoreClosedError(f"store {engine.path} is closed")
            if st.deleted:
                raise StreamNotFoundError(f"stream {st.key} was deleted")
            version = st.version
            if st.topology != self._topology:
                self._adopt()
            self._skip_truncated()
            synced = journal.acked()
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
                    evs, stop = src.read_events(pos, min(limit, visible), st.names, self._ser,
                                                self._frames, f"read of {seg.name}")
                except TruncatedDataError:
                    self._skip_truncated()  # raises once, having moved to the head
                    raise
                with self._chunk_lock:
                    if self._closed:
                        raise ReaderClosedError(f"reader of {st.key} is closed")
                    self._pos[sid] = stop
                    self._rr = (self._rr + k + 1) % n
                    self._it = it = iter(evs)
                ev = next(it, None)
                if ev is None:  # a close() took the chunk before this thread's first next()
                    raise ReaderClosedError(f"reader of {st.key} is closed")
                return ev
            if progressed:
                continue
            if done:
                self._ended = True
                return None
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                return None
            if unsynced:
                try:
                    journal.wait_acked(journal.written(), remaining, what=f"read of {st.key}")
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
        with self._chunk_lock:
            pending = list(self._it)  # atomic under the GIL: the events not yet returned
            self._it = iter(pending)
            return self._before(pending)

    def _before(self, pending: list[EventRead]) -> dict[int, int]:
        pos = dict(self._pos)
        for ev in pending:  # events fetched but not yet returned
            pos[ev.segment_id] = min(pos[ev.segment_id], ev.offset)
        return pos

    @property
    def at_end(self) -> bool:
        """True once a read returned None because everything up to the end was read (the end
        cut, or the end of a sealed stream): no later read returns an event."""
        return self._ended

    def position(self) -> "StreamCut":
        """The StreamCut just after the last event returned."""
        from .streamcut import StreamCut
        from .topology import frontier
        segs = {sid: src.seg for sid, src in self._src.items()}
        return StreamCut.of(self.scope, self.stream, frontier(segs, self._returned()))

    def position_before(self, unreturned: Mapping[int, int]) -> "StreamCut":
        """The StreamCut just before events this reader returned that its caller has not taken
        yet (``{segment_id: offset of the first such event}``): where a proxy that reads ahead
        (a client of a shared store) stands."""
        from .streamcut import StreamCut
        from .topology import frontier
        pos = self._returned()
        for sid, off in unreturned.items():
            if sid in pos and isinstance(off, int):
                pos[sid] = min(pos[sid], off)
        segs = {sid: src.seg for sid, src in self._src.items()}
        return StreamCut.of(self.scope, self.stream, frontier(segs, pos))

    def get_current_time_window(self) -> "TimeWindow":
        """The event-time window at this reader's position: ``TimeWindow(lower, upper)`` from
        the writers' noted times (docs/event-time.md); bounds are None until known."""
        window = self._engine.watermarks.window(self._st, self._returned())
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
        with self._chunk_lock:
            if self._closed:
                return
            self._closed = True
            # events fetched but not returned are not handed out after close: list() empties
            # the very iterator the reading thread takes from, so its next next() finds nothing
            # and raises ReaderClosedError; position() stays just after the last event returned
            self._pos = self._before(list(self._it))
            self._it = iter(())
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

    def __init__(self, engine: "Engine", st: "StreamState", start: dict[int, int] | None,
                 end: dict[int, int] | None, serializer: Any, *, only: int | None = None) -> None:
        """``only``: the slice of that one segment (``Store.read_segment_range``)."""
        self._st = st
        self._ser = resolve(serializer)
        journal, index = engine.journal, engine.index
        with engine.append_lock:
            # the segments and the acknowledged position together: a scaling and a commit
            # cannot land in between (a part routed to a segment not in segs would be missing)
            segs = dict(st.segments)
            acked = journal.acked()
        visible = index.visible_lengths(segs, acked)  # one snapshot across the segments
        if end is not None and any(end.get(sid, 0) > visible[sid] for sid in segs):
            # the end names data not yet durable: wait for it (raises if the journal failed)
            journal.wait_acked(journal.written(), None, what=f"slice of {st.key}")
            visible = index.visible_lengths(segs, journal.acked())
        self._ranges = []
        for sid in sorted(segs):  # ascending id: predecessors before successors
            if only is not None and sid != only:
                continue
            seg = segs[sid]
            src = SegmentSource(engine, seg)
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

    def __iter__(self) -> Iterator[EventRead]:
        frames = FrameParser()
        st = self._st
        for src, lo, hi in self._ranges:
            pos = lo
            while pos < hi:
                if st.deleted:
                    raise StreamNotFoundError(f"stream {st.key} was deleted")
                evs, pos = src.read_events(pos, hi, st.names, self._ser, frames,
                                           f"slice of {src.seg.name}")
                yield from evs
                evs = None  # the caller's event is all that stays alive while the next is read

    def to_arrow(self, *, write_time: bool = False) -> "pyarrow.Table":
        """A pyarrow Table: event (large_binary), routing_key (large_string, null if none),
        segment_id (int64), offset (int64); with ``write_time``, a fifth column write_time
        (timestamp µs UTC: when the event's record was appended, as in tier 2)."""
        from .arrow import slice_to_arrow
        return slice_to_arrow(self._arrow_parts(write_time), write_time)

    def arrow_batches(self, *, write_time: bool = False) -> Iterator["pyarrow.RecordBatch"]:
        """``to_arrow()``'s record batches one at a time, each made as it is taken (memory:
        one chunk of the slice, not the whole table)."""
        from .arrow import slice_batches
        return slice_batches(self._arrow_parts(write_time), write_time)

    def _arrow_parts(self, timed: bool) -> Iterator[Any]:
        """What ``to_arrow`` is built from: chunks of frames (one section each, so one write
        time), and tables of tiered ranges read straight from their Parquet columns where the
        journal no longer holds them."""
        for src, lo, hi in self._ranges:
            pos = lo
            while pos < hi:
                if self._st.deleted:
                    raise StreamNotFoundError(f"stream {self._st.key} was deleted")
                cold = src.cold_table(pos, hi, timed)
                if cold is not None:
                    table, pos = cold
                    yield table
                    continue
                write_us = src.section(pos)[0].write_ns // 1000 if timed else 0
                data, stop = src.read(pos, hi, copy=False)
                yield (src.seg, data.frame() if type(data) is LargeFrame else data, pos, write_us)
                data = None
                pos = stop

    def to_pandas(self) -> "pandas.DataFrame":
        """A pandas DataFrame with the columns of ``to_arrow()`` and, after ``segment_id``, a
        ``segment`` column naming it ``number#epoch`` (needs pandas)."""
        try:
            import pandas  # noqa: F401
        except ImportError as exc:
            raise ImportError("Slice.to_pandas() needs pandas: pip install 'pravega-embedded[pandas]'") from exc
        from .notebook import segment_frame
        return segment_frame(self.to_arrow())
