"""Time lookups: the StreamCut at a point in time (Kafka's ``offsets_for_times``).

Owns: turning a user's timestamp (a datetime, seconds since the epoch, or ISO-8601 text) into
nanoseconds (``timestamp_ns``), and ``cut_at``: per segment, the first event boundary whose
section was written at or after that time, gathered into a valid StreamCut.

Every section of a segment carries the write time of the record that put it there
(``IndexEntry.write_ns``; records of format 1 and 2 have none and count as written when their
segment was created). Events of one section share its write time.

Invariants:
  1. A segment's position in ``cut_at(t)`` is the start of its first section (that begins an
     event) written at or after ``t``, never before the head and never past acknowledged data;
     a segment with nothing written at or after ``t`` is at its visible end. The search is a
     binary search over the section index (O(log n) lookups): write times are the store's
     clock at each append, taken to not go backwards along a segment. Should the clock have
     stepped back, the position is one where the write times cross ``t``.
  2. The result is a frontier (``topology.frontier``) of those positions: a successor appears
     only once its predecessors are wholly before ``t``, so the cut is valid in every later
     epoch and reading from it reads every event written at or after ``t`` exactly once
     (events written before ``t`` in a segment after one written at or after it excepted, per
     invariant 1).

``write_times`` answers when given events were written: the write time of each one's section.

Thread-safety: pure functions over a snapshot taken under the engine's append lock.
"""

from __future__ import annotations

import math
from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Sequence

from .batch import snap_up
from .errors import InvalidConfigurationError, InvalidEventPointerError, SegmentNotFoundError
from .events import EventPointer
from .segsource import SegmentSource, visible_snapshot
from .streamcut import StreamCut
from .topology import frontier

if TYPE_CHECKING:
    from .engine import Engine
    from .segment import Segment

__all__ = ["Timestamp", "timestamp_ns", "cut_at", "iso_utc", "write_times"]

Timestamp = datetime | float | int | str  # what a user may give as a point in time
_MAX_SECONDS = 1e11  # year ~5138: a larger number is milliseconds or nanoseconds, not seconds
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_MICRO = timedelta(microseconds=1)


def timestamp_ns(ts: Timestamp, what: str = "timestamp") -> int:
    """Nanoseconds since the epoch of ``ts``, a whole number of microseconds (as write times
    are shown), 0 for a time before the epoch: a ``datetime`` (naive: local time, as
    ``datetime.timestamp()`` takes it), seconds since the epoch (int or float, as
    ``time.time()`` gives), or ISO-8601 text with a time zone (``2026-11-25T10:00:00Z``)."""
    if isinstance(ts, str):
        text = ts.strip()
        try:
            dt = datetime.fromisoformat(text[:-1] + "+00:00" if text.endswith(("Z", "z")) else text)
        except ValueError:
            raise InvalidConfigurationError(f"{what} {ts!r} is not an ISO-8601 time such as "
                                            "2026-11-25T10:00:00Z") from None
        if dt.tzinfo is None:
            raise InvalidConfigurationError(f"{what} {ts!r} has no time zone: add one "
                                            "(2026-11-25T10:00:00Z, or +01:00)")
        ts = dt
    if isinstance(ts, datetime):
        try:
            aware = ts if ts.tzinfo is not None else ts.astimezone()  # naive: local time
            return max(0, (aware - _EPOCH) // _MICRO * 1000)
        except (ValueError, OverflowError) as exc:
            raise InvalidConfigurationError(f"{what} {ts!r} is out of range: {exc}") from None
    if isinstance(ts, bool) or not isinstance(ts, (int, float)) or not math.isfinite(ts):
        raise InvalidConfigurationError(f"{what} must be a datetime, seconds since the epoch or "
                                        f"ISO-8601 text, got {ts!r}")
    if abs(ts) > _MAX_SECONDS:
        raise InvalidConfigurationError(f"{what} {ts!r} is not seconds since the epoch (too large: "
                                        "milliseconds? divide by 1000)")
    # whole microseconds, as write times are shown (a float's last digits are noise: the µs of
    # an event's write_time, given back as seconds, must find that event)
    return max(0, int(ts) * 1_000_000_000 if isinstance(ts, int) else round(ts * 1e6) * 1000)


def iso_utc(ns: int) -> str:
    """``ns`` as ISO-8601 UTC text, rounded up to the microsecond (what a client sends its
    owner: a lookup of the text finds no event written before ``ns``)."""
    return (_EPOCH + _MICRO * -(-ns // 1000)).isoformat()


def cut_at(engine: "Engine", scope: str, stream: str, t_ns: int) -> StreamCut:
    """``Store.get_stream_cut_at`` (invariants 1 and 2)."""
    st, segs, head, visible = visible_snapshot(engine, scope, stream)
    full = {sid: _position(engine, seg, head.get(sid, 0), visible.get(sid, 0), t_ns)
            for sid, seg in segs.items()}
    return StreamCut.of(st.scope, st.name, frontier(segs, full))


def _position(engine: "Engine", seg: "Segment", lo: int, hi: int, t_ns: int) -> int:
    """The start of ``seg``'s first section in ``[lo, hi)`` written at or after ``t_ns``
    (snapped up past a large event's continuation chunks), else ``hi`` (invariant 1)."""
    if lo >= hi:
        return lo
    src = SegmentSource(engine, seg)
    start, stop = lo, hi
    while start < stop:
        e, _ = src.section((start + stop) // 2)
        if (e.write_ns or seg.created_ns) >= t_ns:
            stop = max(e.start, lo)
        else:
            start = min(e.end, hi)
    return snap_up(src, start, hi) if start > lo else lo


def write_times(engine: "Engine", pointers: "Sequence[EventPointer]") -> list[int | None]:
    """``Store.write_times``: per pointer, the write time in ns of the section holding its
    event (None where records of format 1 and 2 carry none)."""
    out: list[int | None] = []
    last: tuple[object, int, int, int | None] | None = None  # segment, section start, end, time
    for p in pointers:
        if not isinstance(p, EventPointer):
            raise InvalidEventPointerError(f"expected an EventPointer, got {type(p).__name__}")
        seg = engine.stream(p.scope, p.stream, "events").segments.get(p.segment_id)
        if seg is None:
            raise SegmentNotFoundError(f"{p.scope}/{p.stream} has no segment {p.segment_id}")
        if last is None or last[0] is not seg or not last[1] <= p.offset < last[2]:
            e, _ = SegmentSource(engine, seg).section(p.offset)
            last = (seg, e.start, e.end, e.write_ns or None)
        out.append(last[3])
    return out
