"""A reader in a reader group: reads the segments the group assigns it.

Owns: the reader's segments and positions, its part of the checkpoint protocol, balancing
(through ``assignment.plan``), completing segments at their end, and its wake-ups.

Protocol, on every call of ``read_next_event`` that finds the group state changed (one identity
test per event on the hot path):
  1. A reset (new generation), a deletion, or being put offline ends the reader: it raises
     ReinitializationRequiredError / ReaderGroupNotFoundError / ReaderNotInGroupError once and
     is closed from then on.
  2. If the last call returned a checkpoint marker, the reader now records its position for
     that checkpoint (Pravega's semantics: the application saves its own state between the
     marker and the next call).
  3. The oldest checkpoint pending for this reader: a silent one is recorded at once; for a
     user one the marker is returned.
  4. An automatic checkpoint is begun when the interval has passed and none is outstanding.
  5. Balancing: release or acquire segments (state invariant 3: never while a checkpoint is
     pending for this reader).
Then it hands out buffered events, or reads the next chunk (round-robin over its segments),
completing segments that reached their end, or waits on the group's condition (woken by appends
and seals of the group's streams and by every group-state change).

Invariants:
  1. A position is always an event boundary as the application saw it: events fetched but
     not yet returned are not counted (releases and checkpoints use the returned position).
  2. Per segment, events come in offset order; a segment moves between readers only through
     ``unassigned`` at the releasing reader's returned position, so per routing key the group
     delivers in write order and, without ``reader_offline(..., None)``, exactly once.

  3. ``close()`` records the position of the events returned before it and nothing is handed
     out after it: the buffered events are taken away before the position is computed, and the
     reading thread's chunk reads, balancing and state changes happen under the reader's lock,
     which ``close()`` and ``position()`` take too.

Thread-safety: one thread reads; ``close()`` and ``position()`` may be called from any thread.
Lock order: the reader's lock, then the group state's lock (``GroupState.update``); the lock is
never held while the reading thread waits.
"""

from __future__ import annotations

import threading
import time
import uuid
from typing import TYPE_CHECKING, Any, Iterator, Mapping

from ..errors import (
    ReaderClosedError,
    ReaderGroupNotFoundError,
    ReaderNotInGroupError,
    InvalidStreamCutError,
    ReinitializationRequiredError,
    SegmentNotFoundError,
    StoreClosedError,
    StreamNotFoundError,
    TruncatedDataError,
)
from ..events import EventRead
from ..frames import FrameParser
from ..journalrange import JournalRange, plan_range
from ..segsource import SegmentSource, deadline_of
from ..serializers import resolve
from ..watermarks import TimeWindow
from . import assignment
from .config import Position, split_seg_key
from .state import (
    GroupState,
    advance,
    begin_checkpoint,
    end_of,
    record_checkpoint,
    remove_reader,
)

if TYPE_CHECKING:
    from ..engine import Engine

__all__ = ["GroupReader", "chunk_context", "make_context", "marker_of", "make_marker", "range_of"]

_new = tuple.__new__
_NS = 1_000_000_000


class _Context(tuple):
    """``(scope, stream)`` of the events of one chunk, plus the reader's positions when the
    chunk was read: enough for ``EventRead.position`` without any per-event work."""

    def position_of(self, ev: EventRead) -> Position:
        pos = dict(self.base)  # type: ignore[attr-defined]
        pos[self.key] = ev[3] + ev[4]  # type: ignore[attr-defined]
        return Position.of(pos)


class _Marker(EventRead):
    """A checkpoint or read-completed marker: ``(None, None, -1, -1, 0, context, name, done)``."""

    __slots__ = ()

    is_checkpoint = property(lambda self: self[6] is not None)  # type: ignore[assignment]
    checkpoint_name = property(lambda self: self[6])  # type: ignore[assignment]
    is_read_completed = property(lambda self: self[7])  # type: ignore[assignment]

    @property
    def position(self) -> Position:
        return self[5].position

    @property
    def event_pointer(self) -> None:  # type: ignore[override]
        return None

    def __repr__(self) -> str:
        if self[6] is not None:
            return f"EventRead(checkpoint_name={self[6]!r})"
        return "EventRead(is_read_completed=True)"


class _MarkerContext(tuple):
    pass


class _RangeEvent(EventRead):
    """A chunk handed out as a journal range, for a proxy whose client reads the bytes itself:
    ``(None, None, segment id, start, stop - start, context, JournalRange)``."""

    __slots__ = ()


class GroupReader:
    """A reader of a reader group. Create it with ``group.create_reader(reader_id)``.

    ``read_next_event(timeout)`` returns an EventRead, a checkpoint marker
    (``ev.is_checkpoint``), the read-completed marker (``ev.is_read_completed``) once a bounded
    group has read everything, or None when ``timeout`` passes. ``close()`` releases the
    reader's segments at its exact position.
    """

    def __init__(self, engine: "Engine", gs: GroupState, reader_id: str, serializer: Any) -> None:
        self._engine = engine
        self._gs = gs
        self.reader_id = reader_id
        self.group_name = gs.name
        self._ser = resolve(serializer)
        self._session = uuid.uuid4().hex
        self._owned: dict[str, list[Any]] = {}  # seg -> [source, stream state, position, end]
        self._order: list[str] = []
        self._rr = 0
        self._it: Iterator[EventRead] = iter(())
        self._cur: str | None = None  # the segment of the buffered chunk
        self._snap: Any = None  # the group state this reader has fully acted on
        self._marker: int | None = None  # checkpoint id whose marker was returned
        self._closed = False
        self._lock = threading.RLock()  # invariant 3
        self._frames = FrameParser()
        self.live: dict[str, int] = {}  # fetch position per segment, for lag figures
        self._gen = -1
        self._unsynced = False
        self._plan_bytes = 0  # > 0: chunks are handed out as journal ranges (read_batch)

    # ------------------------------------------------------------------ joining
    def _join(self) -> None:
        """Enter the group state; resume the segments a previous reader of this id held."""
        rid = self.reader_id

        def fn(s: dict[str, Any]) -> bool:
            me = s["readers"].setdefault(rid, {"segments": {}})
            me["session"] = self._session
            self._gen = s["generation"]
            return True

        s = self._gs.update(fn)
        assert s is not None
        for k, off in s["readers"][rid]["segments"].items():
            self._own(k, off, s)

    def _own(self, k: str, off: int, s: dict[str, Any]) -> None:
        skey, sid = split_seg_key(k)
        st = self._engine.streams.get(skey)
        if st is None:
            raise StreamNotFoundError(f"stream {skey} of reader group {self.group_name!r} was deleted")
        seg = st.segments.get(sid)
        if seg is None:
            raise SegmentNotFoundError(f"stream {skey} has no segment {sid} (was it re-created?)")
        self._owned[k] = [SegmentSource(self._engine, seg), st, off, end_of(s, k)]
        self._order = sorted(self._owned)
        self.live[k] = off

    def _drop(self, k: str) -> None:
        self._owned.pop(k, None)
        self.live.pop(k, None)
        self._order = sorted(self._owned)
        if self._cur == k:
            self._it = iter(())
            self._cur = None

    # ------------------------------------------------------------------ positions
    def _returned(self, *, take: bool = False) -> dict[str, int]:
        """Each owned segment's position as the application saw it (invariant 1). With
        ``take`` the buffered events are taken away first: none is handed out afterwards (an
        event the reading thread takes meanwhile is returned, so not counted as buffered)."""
        pos = {k: o[2] for k, o in self._owned.items()}
        it = self._it
        if take:
            self._it = iter(())
        if self._cur is not None and self._cur in pos:
            pending = list(it)
            if not take:
                self._it = iter(pending)
            if pending:
                pos[self._cur] = pending[0][3]
        return pos

    def position(self) -> Position:
        """The reader's Position: just after the last event it returned."""
        with self._lock:
            return Position.of(self._returned())

    def position_before(self, unreturned: Mapping[str, int]) -> Position:
        """The Position just before events this reader returned that its caller has not taken
        yet (``{"scope/stream/segment": offset of the first such event}``): where a proxy that
        reads ahead (a client of a shared store) stands."""
        with self._lock:
            return Position.of(_before(self._returned(), unreturned))

    def get_current_time_window(self, scope: str, stream: str) -> TimeWindow:
        """The event-time window of ``scope/stream`` at the segments this reader holds:
        ``TimeWindow(lower, upper)`` (docs/event-time.md); bounds are None until known."""
        skey = f"{scope}/{stream}"
        if skey not in self._gs.state["config"]["streams"]:
            raise StreamNotFoundError(f"reader group {self.group_name!r} does not read {skey}")
        st = self._engine.stream(scope, stream)
        pos = {sid: off for k, off in self._returned().items()
               for sk, sid in [split_seg_key(k)] if sk == skey}
        if not pos:
            return TimeWindow(None, None)  # no segment of that stream held: nothing to bound
        return self._engine.watermarks.window(st, pos, set(pos))

    def _marker_event(self, name: str | None) -> EventRead:
        return make_marker(name, self.position())

    # ------------------------------------------------------------------ reading
    def read_next_event(self, timeout: float | None = None) -> EventRead | None:
        """The next event or marker, or None when ``timeout`` seconds pass without one
        (timeout=None waits without limit)."""
        if self._gs.snap is self._snap:
            try:
                return next(self._it)
            except StopIteration:
                pass
        return self._slow(timeout)

    def read_batch(self, timeout: float | None, max_events: int, max_bytes: int, *,
                   ranges: bool = False) -> list[EventRead]:
        """``read_next_event(timeout)`` and then up to ``max_events`` events in all (about
        ``max_bytes`` of frames) of the chunk it came from, for a proxy that hands them out
        later: the group protocol (checkpoints, balancing) runs at the next call, when the
        proxy's caller has taken them all. A marker comes alone. Empty when nothing came.
        With ``ranges`` a chunk the journal files hold comes alone as a journal range of about
        ``max_bytes`` (``range_of``), for a proxy whose client reads it from the files."""
        self._plan_bytes = max_bytes if ranges else 0
        try:
            first = self.read_next_event(timeout)
        finally:
            self._plan_bytes = 0
        if first is None:
            return []
        out = [first]
        if first[0] is None and isinstance(first, (_Marker, _RangeEvent)):
            return out
        size = first[4]
        with self._lock:  # close() takes the buffered chunk away under this lock
            it = self._it
            while len(out) < max_events and size < max_bytes and not self._closed:
                ev = next(it, None)
                if ev is None:
                    break
                out.append(ev)
                size += ev[4]
        return out

    def _source(self, k: str) -> SegmentSource:
        o = self._owned.get(k)
        if o is not None:
            return o[0]
        skey, sid = split_seg_key(k)
        st = self._engine.streams.get(skey)
        seg = None if st is None else st.segments.get(sid)
        if seg is None:
            raise SegmentNotFoundError(f"reader group {self.group_name!r}: no segment {k}")
        return SegmentSource(self._engine, seg)

    def reread(self, k: str, ctx: object, start: int, stop: int, max_bytes: int) -> list[EventRead]:
        """The events of segment ``k`` from ``start`` towards ``stop`` (about ``max_bytes``),
        with the chunk context ``ctx`` of the journal range that held them: for a proxy whose
        client could not read that range from the files (reclaimed since: tier 2 has it)."""
        src = self._source(k)
        out: list[EventRead] = []
        at = start
        while at < stop and at - start < max_bytes:
            evs, at = src.read_events(at, stop, ctx, self._ser, self._frames, f"read of {src.seg.name}")
            out.extend(evs)
        return out

    def is_boundary(self, k: str, offset: int) -> bool:
        """Whether ``offset`` starts an event (or ends the data) in segment ``k``."""
        try:
            self._source(k).check_boundary(offset, f"reader {self.reader_id!r}")
        except (InvalidStreamCutError, SegmentNotFoundError, TruncatedDataError):
            return False
        return True

    def _fail(self, exc: BaseException) -> None:
        self._closed = True
        self._it = iter(())
        if self._gs.readers.get(self.reader_id) is self:
            del self._gs.readers[self.reader_id]
        raise exc

    def _slow(self, timeout: float | None) -> EventRead | None:
        engine, gs = self._engine, self._gs
        deadline = deadline_of(timeout)
        while True:
            with self._lock:  # invariant 3
                if self._closed:
                    raise ReaderClosedError(f"reader {self.reader_id!r} of group {self.group_name!r} is closed")
                if engine.closed:
                    raise StoreClosedError(f"store {engine.path} is closed")
                marker = self._sync()
                if marker is not None:
                    return marker
                try:
                    return next(self._it)
                except StopIteration:
                    self._cur = None
                ev = self._read_chunk()
                if ev is not None:
                    return ev
                s = gs.state
                if self._snap is not gs.snap:
                    continue  # a segment was completed or the state moved: act on it first
                if not s["unassigned"] and not any(r["segments"] for r in s["readers"].values()):
                    return self._marker_event(None)  # every segment read to its end
            if not self._wait(deadline, s):
                return None

    def _read_chunk(self) -> EventRead | None:
        """Read the next chunk of one owned segment; complete segments at their end."""
        engine = self._engine
        synced = engine.journal.acked()
        n = len(self._order)
        self._unsynced = False
        truncated = []
        for k in self._order:  # truncated away under this reader: say so once, go on at the head
            o = self._owned[k]
            head = o[1].head.get(o[0].seg.segment_id, 0)
            if o[2] < head:
                truncated.append(f"{o[0].seg.name} at {o[2]} (head {head})")
                o[2] = head
        if truncated:
            raise TruncatedDataError(
                f"reader {self.reader_id!r}: truncated data skipped in {', '.join(truncated)}; it "
                f"continues from the stream's head"
            )
        for j in range(n):
            k = self._order[(self._rr + j) % n]
            o = self._owned[k]
            src, st, pos, end = o
            seg = src.seg
            if st.deleted:
                raise StreamNotFoundError(f"stream {st.key} was deleted")
            length = seg.length
            if (end is not None and pos >= end) or (seg.sealed and pos >= length
                                                    and (seg.succs or st.sealed)):
                self._complete(k, pos)
                return None
            limit = length if end is None else min(end, length)
            if pos >= limit:
                continue
            visible = src.visible_length(synced)
            if pos >= visible:
                self._unsynced = True
                continue
            ctx = _Context(st.names)
            ctx.key = k  # type: ignore[attr-defined]
            ctx.base = {key: ob[2] for key, ob in self._owned.items()}  # type: ignore[attr-defined]
            try:
                rng = plan_range(src, pos, min(limit, visible), self._plan_bytes) if self._plan_bytes else None
                if rng is None:
                    evs, stop = src.read_events(pos, min(limit, visible), ctx, self._ser,
                                                self._frames, f"read of {seg.name}")
                else:
                    evs, stop = [_new(_RangeEvent, (None, None, seg.segment_id, pos, rng.stop - pos, ctx, rng))], rng.stop
            except TruncatedDataError:
                o[2] = max(o[2], st.head.get(seg.segment_id, 0))  # go on from the head next time
                raise
            o[2] = stop
            self.live[k] = stop
            self._cur = k
            self._rr = (self._rr + j + 1) % n
            self._it = iter(evs)
            return next(self._it, None)
        return None

    def _wait(self, deadline: float | None, s: dict[str, Any]) -> bool:
        """Sleep until data, a state change or the deadline; False when the deadline passed."""
        engine, gs = self._engine, self._gs
        now = time.monotonic()
        remaining = None if deadline is None else deadline - now
        if remaining is not None and remaining <= 0:
            return False
        iv = s["config"]["automatic_checkpoint_interval"]
        if iv is not None:
            due = (s["last_auto_ns"] + iv * _NS - time.time_ns()) / _NS + 0.001
            remaining = due if remaining is None else min(remaining, due)
            remaining = max(remaining, 0.0)
        if self._unsynced:
            try:
                engine.journal.wait_acked(engine.journal.written(), remaining, what=f"read of group {gs.name!r}")
            except TimeoutError:
                pass
            return True
        # appends matter only on the streams of segments this reader holds; every other change
        # (joins, releases, checkpoints) is a group-state update, which notifies gs.cond
        streams = list({id(o[1]): o[1] for o in self._owned.values()}.values())
        versions = [st.version for st in streams]
        snap = gs.snap
        with gs.cond:
            for st in streams:
                with st.cond:
                    st.waiters += 1
                st.watchers.add(gs.cond)
            try:
                if (gs.snap is snap and not self._closed and not engine.closed
                        and all(st.version == v for st, v in zip(streams, versions))):
                    gs.cond.wait(remaining)
            finally:
                for st in streams:
                    with st.cond:
                        st.waiters -= 1
        return True

    # ------------------------------------------------------------------ group protocol
    def _check_member(self, s: dict[str, Any]) -> dict[str, Any]:
        gs = self._gs
        if gs.deleted:
            self._fail(ReaderGroupNotFoundError(f"reader group {gs.name!r} was deleted"))
        if s["generation"] != self._gen:
            self._fail(ReinitializationRequiredError(
                f"reader group {gs.name!r} was reset; create reader {self.reader_id!r} again"))
        me = s["readers"].get(self.reader_id)
        if me is None or me.get("session") != self._session:
            self._fail(ReaderNotInGroupError(
                f"reader {self.reader_id!r} was put offline in group {gs.name!r}; create it again"))
        return me  # type: ignore[return-value]

    def _sync(self) -> EventRead | None:
        """Act on the group state until nothing is left to do (the module's steps 1-5)."""
        gs = self._gs
        rid = self.reader_id
        while True:
            snap = gs.snap
            s = snap[1]
            if snap is self._snap and not self._auto_due(s):
                return None
            self._check_member(s)
            if self._marker is not None:
                cid, self._marker = self._marker, None
                self._record(cid)
                continue
            cp = next((c for c in s["checkpoints"] if rid in c["pending"]), None)
            if cp is not None:
                if cp["silent"]:
                    self._record(cp["id"])
                    continue
                self._marker = cp["id"]
                self._snap = None  # the next call records the checkpoint first
                return self._marker_event(cp["name"])
            if self._auto_checkpoint(s):
                continue
            if self._rebalance(s):
                continue
            self._snap = snap
            return None

    def _record(self, cid: int) -> None:
        positions = self._returned()
        self._gs.update(lambda s: self._member(s) and record_checkpoint(s, self.reader_id, cid, positions))

    def _member(self, s: dict[str, Any]) -> bool:
        me = s["readers"].get(self.reader_id)
        return me is not None and me.get("session") == self._session and s["generation"] == self._gen

    @staticmethod
    def _auto_due(s: dict[str, Any]) -> bool:
        iv = s["config"]["automatic_checkpoint_interval"]
        return iv is not None and time.time_ns() - s["last_auto_ns"] >= iv * _NS

    def _auto_checkpoint(self, s: dict[str, Any]) -> bool:
        if not self._auto_due(s):
            return False
        iv = s["config"]["automatic_checkpoint_interval"]

        def fn(s2: dict[str, Any]) -> bool:
            if time.time_ns() - s2["last_auto_ns"] < iv * _NS:
                return False
            s2["last_auto_ns"] = time.time_ns()
            if not any(c["name"].startswith("_auto-") for c in s2["checkpoints"]):
                begin_checkpoint(s2, f"_auto-{s2['next_cp']}", True)
            return True

        return self._gs.update(fn) is not None

    def _rebalance(self, s: dict[str, Any]) -> bool:
        rid = self.reader_id
        if any(rid in c["pending"] for c in s["checkpoints"]):
            return False
        release, acquire = assignment.plan(s, rid)
        if not release and not acquire:
            return False
        positions = self._returned()
        decided: list[Any] = []

        def fn(s2: dict[str, Any]) -> bool:
            decided.clear()
            if not self._member(s2) or any(rid in c["pending"] for c in s2["checkpoints"]):
                return False
            rel, acq = assignment.plan(s2, rid)
            me = s2["readers"][rid]["segments"]
            for k in rel:
                del me[k]
                s2["unassigned"][k] = positions[k]
            got = {k: s2["unassigned"].pop(k) for k in acq}
            me.update(got)
            decided.extend((rel, got))
            return bool(rel or acq)

        s2 = self._gs.update(fn)
        if s2 is None:
            return False
        rel, got = decided
        for k in rel:
            self._drop(k)
        for k, off in got.items():
            self._own(k, off, s2)
        return True

    def _complete(self, k: str, pos: int) -> None:
        """Segment ``k`` is read to its end: it leaves the reader for ``completed``."""
        rid = self.reader_id

        def fn(s: dict[str, Any]) -> bool:
            if not self._member(s) or any(rid in c["pending"] for c in s["checkpoints"]):
                return False  # the checkpoint is answered first (state invariant 3)
            me = s["readers"][rid]["segments"]
            if k not in me:
                return False
            del me[k]
            s["completed"][k] = pos
            advance(s, self._engine.segments_of)
            return True

        if self._gs.update(fn) is not None:
            self._drop(k)

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Leave the group, releasing this reader's segments at its exact position (events
        returned are not re-delivered to other readers). Idempotent; wakes a blocked read."""
        self.close_before({})

    def close_before(self, unreturned: Mapping[str, int]) -> None:
        """``close()`` for a proxy that read ahead: the segments are released before the
        events its caller did not take (``position_before``)."""
        if self._closed:
            return
        gs = self._gs
        with self._lock:  # invariant 3
            if self._closed:
                return
            self._closed = True
            final = _before(self._returned(take=True), unreturned)
            try:
                if not gs.deleted and not self._engine.closed:
                    gs.update(lambda s: self._member(s) and (remove_reader(s, self.reader_id, final) or True))
            finally:
                self._release()

    def abandon(self) -> None:
        """Leave this process as if it died: the reader stays in the group with its segments
        (a reader of the same id resumes them at its last checkpoint) until
        ``offline_if_abandoned`` or the group's ``reader_offline``. Idempotent."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            self._it = iter(())
            self._release()

    def offline_if_abandoned(self) -> bool:
        """After ``abandon``: ``reader_offline(reader_id, None)`` (its segments go back at its
        last checkpoint) unless a reader of the same id joined since. True if it was done."""
        if self._gs.deleted or self._engine.closed:
            return False

        def fn(s: dict[str, Any]) -> bool:
            if not self._member(s):
                return False
            remove_reader(s, self.reader_id, None)
            return True

        return self._gs.update(fn) is not None

    def _release(self) -> None:
        """Forget this reader in the process and wake its blocked read."""
        gs = self._gs
        if gs.readers.get(self.reader_id) is self:
            del gs.readers[self.reader_id]
        with gs.cond:
            gs.cond.notify_all()

    @property
    def closed(self) -> bool:
        return self._closed

    def __iter__(self) -> Iterator[EventRead]:
        """Events and checkpoint markers until the group's read is complete; blocks."""
        while True:
            ev = self.read_next_event(None)
            if ev is None:
                continue
            if ev.is_read_completed:
                return
            yield ev

    def __enter__(self) -> "GroupReader":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return (f"<GroupReader {self.reader_id!r} of {self.group_name!r} "
                f"segments={len(self._owned)}{' closed' if self._closed else ''}>")


def _before(pos: dict[str, int], unreturned: Mapping[str, int]) -> dict[str, int]:
    for k, off in unreturned.items():
        if k in pos and isinstance(off, int) and not isinstance(off, bool):
            pos[k] = min(pos[k], off)
    return pos


# ---------------------------------------------------------------------------- proxies
# A client of a shared store rebuilds what a group reader returned in the owner: the events'
# chunk contexts (so ``.position`` is the same) and the markers.
def chunk_context(ev: EventRead) -> tuple[tuple[str, str], str, dict[str, int]] | None:
    """Of an event a group reader returned: its stream's names, its segment's key and the
    reader's positions when its chunk was read; None for a marker."""
    ctx = ev[5]
    if not isinstance(ctx, _Context):
        return None
    return (ctx[0], ctx[1]), ctx.key, ctx.base  # type: ignore[attr-defined]


def make_context(names: tuple[str, str], key: str, base: dict[str, int]) -> tuple[str, str]:
    """The context ``chunk_context`` described, for ``EventRead.make``."""
    ctx = _Context(names)
    ctx.key = key  # type: ignore[attr-defined]
    ctx.base = base  # type: ignore[attr-defined]
    return ctx


def marker_of(ev: EventRead) -> tuple[str | None, Position] | None:
    """Of a marker: its checkpoint name (None for read-completed) and position; else None."""
    if not isinstance(ev, _Marker):
        return None
    return ev[6], ev[5].position


def range_of(ev: EventRead) -> JournalRange | None:
    """Of what ``read_batch(..., ranges=True)`` returned: its journal range, else None."""
    return ev[6] if isinstance(ev, _RangeEvent) else None


def make_marker(name: str | None, position: Position) -> EventRead:
    """The marker ``marker_of`` described."""
    ctx = _MarkerContext(("", ""))
    ctx.position = position  # type: ignore[attr-defined]
    return _new(_Marker, (None, None, -1, -1, 0, ctx, name, name is None))
