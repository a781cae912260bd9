"""The batch API: a stream between two cuts as independent segment ranges, and bounded steps.

Owns: ``SegmentRange`` (one segment's events between two offsets: the unit of parallel work
that Pravega's BatchClient hands out and the Spark source partitions by), turning a slice's
bounds into ranges (``segment_ranges``), splitting a range at event boundaries
(``split_range``), and the cut about ``approx_bytes`` past another
(``next_stream_cut``, Pravega's getNextStreamCut).

Invariants:
  1. A range starts and ends on event boundaries (a cut's offsets, a segment's visible end, or
     the end of a section that does not continue a large event): reading ranges never splits
     an event, and the ranges of one slice hold each of its events exactly once.
  2. ``next_stream_cut`` moves forward only (every offset >= the start's) and stays within
     acknowledged data; it reaches a successor only once every predecessor is read to its end
     (the cut it returns is a valid frontier); given a positive budget and data after the
     start it moves at least one event.
  3. Ranges are independent: reading one needs nothing of another (parallel-safe).

Thread-safety: pure functions of the engine's state read under its locks; values immutable.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import TYPE_CHECKING, Mapping

from ._native import ffi
from .errors import (InvalidConfigurationError, InvalidStreamCutError, SegmentNotFoundError,
                     TruncatedDataError)
from .frames import FrameParser
from .names import validate_scope, validate_stream
from .reader import Slice
from .segsource import SegmentSource, resolve_cut
from .streamcut import StreamCut, format_segment_id
from .topology import frontier, upper_bound

if TYPE_CHECKING:
    from .engine import Engine
    from .segment import Segment
    from .serializers import Serializer
    from .stream import StreamState

__all__ = ["SegmentRange", "Truncation", "segment_ranges", "range_slice", "step_cut",
           "next_stream_cut", "split_range", "split_ranges", "snap_up", "skip_truncated"]

_MAX_OFFSET = (1 << 63) - 1
_ALL_BYTES = 1 << 62  # a byte budget that never runs out (counting events only)


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentRange:
    """The events of one segment of ``scope/stream`` with ``start <= offset < end`` (byte
    offsets on event boundaries). ``nbytes`` is the framed size, the measure of the work."""

    scope: str
    stream: str
    segment_id: int
    start: int
    end: int

    def __post_init__(self) -> None:
        for name in ("segment_id", "start", "end"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_OFFSET:
                raise InvalidConfigurationError(f"SegmentRange.{name} must be an int in 0..2**63-1, "
                                                f"got {v!r}")
        if self.end < self.start:
            raise InvalidConfigurationError(f"SegmentRange end {self.end} is before its start {self.start}")
        validate_scope(self.scope)
        validate_stream(self.stream)

    @property
    def nbytes(self) -> int:
        return self.end - self.start

    def to_json(self) -> str:
        """Compact JSON with sorted keys (ship it to a worker; ``from_json`` reads it)."""
        return json.dumps({"scope": self.scope, "stream": self.stream, "segment_id": self.segment_id,
                           "start": self.start, "end": self.end}, sort_keys=True, separators=(",", ":"))

    @classmethod
    def from_json(cls, text: str | bytes) -> "SegmentRange":
        """The range ``to_json`` wrote; InvalidConfigurationError for anything else."""
        try:
            j = json.loads(text)
        except (ValueError, TypeError, RecursionError) as exc:
            raise InvalidConfigurationError(f"not a SegmentRange: {str(exc)[:80]}") from None
        if not isinstance(j, dict) or set(j) != {"scope", "stream", "segment_id", "start", "end"}:
            raise InvalidConfigurationError("a SegmentRange is a JSON object with exactly scope, "
                                            "stream, segment_id, start and end")
        if not isinstance(j["scope"], str) or not isinstance(j["stream"], str):
            raise InvalidConfigurationError("a SegmentRange's scope and stream are strings")
        return cls(scope=j["scope"], stream=j["stream"], segment_id=j["segment_id"],
                   start=j["start"], end=j["end"])

    def __repr__(self) -> str:
        return (f"SegmentRange({self.scope}/{self.stream} segment {format_segment_id(self.segment_id)} "
                f"[{self.start}, {self.end}) {self.nbytes} bytes)")


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncation:
    """What retention (or a truncate) deleted that a cut had not read yet
    (``Store.skip_truncated``): ``cut`` is the later of the cut and the stream's head, segment
    by segment; ``lost`` the ranges between them, predecessors first (empty: nothing lost)."""

    cut: StreamCut
    lost: tuple[SegmentRange, ...] = ()

    @property
    def nbytes(self) -> int:
        """The bytes of events deleted before they were read."""
        return sum(r.nbytes for r in self.lost)

    def describe(self) -> str:
        """The lost ranges for a person: ``segment 0#0 [100, 5000), ...``."""
        return ", ".join(f"segment {format_segment_id(r.segment_id)} [{r.start}, {r.end})"
                         for r in self.lost) or "nothing"


def segment_ranges(scope: str, stream: str, ranges: list[tuple[int, int, int]]) -> list[SegmentRange]:
    """The non-empty (segment id, start, end) triples of a slice as SegmentRanges, in ascending
    segment id (predecessors first)."""
    return [SegmentRange(scope=scope, stream=stream, segment_id=sid, start=lo, end=hi)
            for sid, lo, hi in sorted(ranges) if hi > lo]


def snap_up(src: SegmentSource, offset: int, limit: int) -> int:
    """The first event boundary at or after ``offset`` (at most ``limit``, itself a boundary):
    the start of a section that begins an event, else the end of the section holding
    ``offset`` and of any large-event continuation after it (invariant 1)."""
    if offset >= limit:
        return limit
    e, _ = src.section(offset)
    if offset == e.start and e.n_events > 0:
        return offset
    end = e.end
    while end < limit:
        nxt, _ = src.section(end)
        if nxt.n_events > 0:  # starts an event: ``end`` is a boundary
            break
        end = nxt.end  # a large event's continuation chunk
    return min(end, limit)


def split_range(engine: "Engine", st: "StreamState", rng: SegmentRange, parts: int) -> list[SegmentRange]:
    """``rng`` cut into up to ``parts`` ranges of about equal bytes at event boundaries (fewer
    where its sections are too big to cut finer; a range never splits an event)."""
    if parts <= 1 or rng.nbytes == 0:
        return [rng]
    seg = st.segments.get(rng.segment_id)
    if seg is None:
        return [rng]
    src = SegmentSource(engine, seg)
    out: list[SegmentRange] = []
    lo = rng.start
    while lo < rng.end:
        left = parts - len(out)  # the step is what remains over the pieces still to make
        step = max(1, (rng.end - lo) // left)
        hi = rng.end if left == 1 else snap_up(src, min(lo + step, rng.end), rng.end)
        if hi <= lo:
            hi = rng.end
        out.append(SegmentRange(scope=rng.scope, stream=rng.stream, segment_id=rng.segment_id,
                                start=lo, end=hi))
        lo = hi
    return out


def split_ranges(engine: "Engine", ranges: list[SegmentRange], max_bytes: int | None) -> list[SegmentRange]:
    """Each range split into pieces of about ``max_bytes`` (None: as they are)."""
    if max_bytes is None:
        return ranges
    if isinstance(max_bytes, bool) or not isinstance(max_bytes, int) or max_bytes <= 0:
        raise InvalidConfigurationError(f"max_bytes must be an int > 0 or None, got {max_bytes!r}")
    out: list[SegmentRange] = []
    for r in ranges:
        st = engine.stream(r.scope, r.stream, "events")
        out += split_range(engine, st, r, -(-r.nbytes // max_bytes))
    return out


def next_stream_cut(engine: "Engine", st: "StreamState", segs: Mapping[int, "Segment"],
                    start: Mapping[int, int], limit: Mapping[int, int], approx_bytes: int,
                    max_events: int | None = None, min_events: int | None = None) -> StreamCut:
    """The cut about ``approx_bytes`` of framed events (and with ``max_events``, about that
    many events) after the full map ``start``, never past ``limit`` (per segment: the
    acknowledged length, or an end cut's offset). The budgets are shared by the segments of
    the frontier, each step snapped up to an event boundary (so a step may pass a budget by
    less than one section: soft limits, always progress); a segment read to its sealed end
    opens its successors for the rest (invariant 2). With ``min_events``: ``start`` itself
    (as a cut) while fewer events than that lie between it and ``limit``."""
    for name, v in (("approx_bytes", approx_bytes), ("max_events", max_events),
                    ("min_events", min_events)):
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v <= 0):
            raise InvalidConfigurationError(f"{name} must be an int > 0, got {v!r}")
    full = {sid: start.get(sid, 0) for sid in segs}
    if min_events is not None and _count(engine, segs, full, limit, min_events) < min_events:
        return StreamCut.of(st.scope, st.name, frontier(segs, full))
    return StreamCut.of(st.scope, st.name, frontier(segs, _step(engine, segs, full, limit, approx_bytes,
                                                                max_events)[0]))


def _count(engine: "Engine", segs: Mapping[int, "Segment"], full: dict[int, int],
           limit: Mapping[int, int], upto: int) -> int:
    """The events after ``full`` within ``limit``, counted up to about ``upto`` (by sections:
    exact from a section's start, which is where steps and writes leave a cut)."""
    return _step(engine, segs, dict(full), limit, _ALL_BYTES, upto)[1]


def _step(engine: "Engine", segs: Mapping[int, "Segment"], full: dict[int, int],
          limit: Mapping[int, int], approx_bytes: int, max_events: int | None) -> tuple[dict[int, int], int]:
    """``next_stream_cut``'s walk: the new full map (``full`` updated) and the events taken
    (0 when not counting)."""
    budget, events, taken = approx_bytes, max_events, 0
    while budget > 0 and (events is None or events > 0):
        fr = frontier(segs, full)
        active = [sid for sid in sorted(fr) if full[sid] < limit.get(sid, 0)]
        if not active:
            break
        share = max(1, budget // len(active))
        eshare = None if events is None else max(1, events // len(active))
        for sid in active:
            at = full[sid]
            new, n = _advance(SegmentSource(engine, segs[sid]), at, limit[sid], share, eshare)
            if new <= at:  # cannot happen for at < limit; guard the loop's progress anyway
                raise InvalidStreamCutError(f"no event boundary after {at} in segment {segs[sid].name}")
            full[sid] = new
            budget -= new - at
            taken += n
            if events is not None:
                events -= n
            if budget <= 0 or (events is not None and events <= 0):
                break
    return full, taken


def _advance(src: SegmentSource, at: int, stop: int, nbytes: int, nevents: int | None) -> tuple[int, int]:
    """One segment's step from ``at`` (a boundary) toward ``stop``: about ``nbytes`` (snapped
    up), or section by section until ``nevents`` events or ``nbytes`` are taken. Returns the
    new offset and the events counted (0 when not counting)."""
    if nevents is None:
        return snap_up(src, min(at + nbytes, stop), stop), 0
    pos, n = at, 0
    while pos < stop and pos - at < nbytes and n < nevents:
        e, _ = src.section(pos)
        nxt = snap_up(src, min(e.end, stop), stop)
        if pos == e.start and e.end <= stop:
            n += e.n_events  # events starting in the section: from the index
        else:  # a cut inside the section (a truncation's head, a user's cut): its frames
            n += _events_in(src, pos, min(e.end, stop))
        pos = nxt
    return pos, n


def _events_in(src: SegmentSource, lo: int, hi: int) -> int:
    """The events starting in ``[lo, hi)`` of one section (``lo`` an event boundary), counted
    from its frames; a frame going on past ``hi`` (a large event's first chunk) counts once."""
    frames = FrameParser(4096)
    n, at = 0, lo
    while at < hi:
        data, stop = src.read_raw(at, hi)
        buf, p = ffi.from_buffer(data), 0
        while p < len(data):
            k, used = frames.parse(buf + p, len(data) - p, f"count events of segment {src.seg.name}")
            if k == 0:
                break
            n, p = n + k, p + used
        if p < len(data) or stop <= at:
            return n + (p < len(data))
        at = stop
    return n


def range_slice(engine: "Engine", rng: SegmentRange, serializer: "Serializer | str | None") -> Slice:
    """``Store.read_segment_range``: the Slice of one range, its bounds checked (invariant 1)."""
    if not isinstance(rng, SegmentRange):
        raise InvalidConfigurationError(f"expected a SegmentRange, got {type(rng).__name__}")
    st = engine.stream(rng.scope, rng.stream, "events")
    sid = rng.segment_id
    seg = st.segments.get(sid)
    if seg is None:
        raise SegmentNotFoundError(f"{st.key} has no segment {format_segment_id(sid)}")
    if rng.end > seg.length:
        raise InvalidStreamCutError(f"read_segment_range: end {rng.end} is past the end of segment "
                                    f"{seg.name} ({seg.length})")
    src = SegmentSource(engine, seg)
    for off in (rng.start, rng.end):
        if off >= st.head.get(sid, 0):  # before the head: the Slice raises TruncatedDataError
            src.check_boundary(off, "read_segment_range")
    return Slice(engine, st, {sid: rng.start}, {sid: rng.end}, serializer, only=sid)


def step_cut(engine: "Engine", scope: str, stream: str, start: StreamCut | None,
             approx_bytes: int, max_events: int | None = None, end: StreamCut | None = None,
             min_events: int | None = None) -> StreamCut:
    """``Store.get_next_stream_cut``: resolve ``start`` (None: the head) and ``end`` (None: no
    bound), snapshot the segments and their acknowledged lengths, and step
    (``next_stream_cut``)."""
    st = engine.stream(scope, stream, "events")
    full = resolve_cut(engine, st, start, "get_next_stream_cut start")
    bound = resolve_cut(engine, st, end, "get_next_stream_cut end")
    with engine.append_lock:  # segments, head and acknowledged position together
        segs = dict(st.segments)
        acked = engine.journal.acked()
        head = st.full_head()
    visible = engine.index.visible_lengths(segs, acked)
    if full is None:
        full = head
    elif any(full.get(sid, 0) < off for sid, off in head.items()):
        raise TruncatedDataError(f"get_next_stream_cut: the start is before the head of {st.key}")
    limit = visible if bound is None else {sid: min(v, bound.get(sid, 0)) for sid, v in visible.items()}
    return next_stream_cut(engine, st, segs, full, limit, approx_bytes, max_events, min_events)


def skip_truncated(engine: "Engine", scope: str, stream: str, cut: StreamCut) -> Truncation:
    """``Store.skip_truncated``: ``cut`` moved up to the stream's head where it is before it
    (the element-wise max of two consistent full maps is one: topology invariant 2), and what
    lay between. Offsets after the head are checked as event boundaries; those before it cannot
    be (their data is gone)."""
    st = engine.stream(scope, stream, "events")
    full = resolve_cut(engine, st, cut, "skip_truncated", check_boundaries=False)
    if full is None:
        raise InvalidStreamCutError("skip_truncated needs a cut with positions, not UNBOUNDED")
    with engine.append_lock:
        segs = dict(st.segments)
        head = st.full_head()
    for sid, off in cut.as_dict().items():
        if off > head.get(sid, 0):
            SegmentSource(engine, segs[sid]).check_boundary(off, "skip_truncated")
    new = upper_bound(full, head)
    lost = segment_ranges(scope, stream, [(sid, full.get(sid, 0), off) for sid, off in new.items()])
    return Truncation(cut=StreamCut.of(st.scope, st.name, frontier(segs, new)), lost=tuple(lost))
