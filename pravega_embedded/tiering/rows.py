"""A committed range of a segment as tier-2 rows: offsets, keys, events and write times.

Owns: reading ``[start, end)`` of one segment through the store's own read path
(``segsource``: tail cache, journal, CRC checks) and turning it into ``SegmentRows`` for a
Parquet file: one row per event of an event stream (a large event whole, in one row), one row
per section of a byte stream.

Invariants:
  1. The caller passes a range of durable, committed data that starts and ends at event
     boundaries (a tiered end, a head or a segment's visible length); the rows cover it with no
     gap and nothing more, so ``rows.end == end``.
  2. A row's write time is its section's (``IndexEntry.write_ns``: the record that put it in the
     segment); a section of unknown time (written before metadata format 5) takes the time of
     the nearest row before it in the same range, else ``fallback_ns`` (the copier gives the
     segment's creation time).

Thread-safety: reads only; any thread (as ``SegmentSource``).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from ..errors import CorruptDataError
from ..frames import FrameParser
from ..segsource import SegmentSource, events_from
from .parquetfile import SegmentRows

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment

__all__ = ["segment_rows"]


def segment_rows(engine: "Engine", seg: "Segment", start: int, end: int,
                 fallback_ns: int) -> SegmentRows:
    """The rows of ``[start, end)`` of ``seg`` (invariants 1 and 2)."""
    if not 0 <= start < end <= seg.length:
        raise CorruptDataError(f"segment {seg.name}: no committed data in [{start}, {end})")
    src = SegmentSource(engine, seg)
    offsets: list[int] = []
    keys: list[str | None] = []
    events: list[bytes] = []
    times: list[int] = []
    last_ns = fallback_ns
    raw = seg.stream.kind == "bytes"
    frames = FrameParser(4096)
    what = f"tiering of segment {seg.name}"
    at = start
    while at < end:
        entry, _ = src.section(at)
        ns = entry.write_ns or last_ns
        last_ns = ns
        if raw:
            data, stop = src.read_raw(at, end)
            offsets.append(at)
            keys.append(None)
            events.append(data)
            times.append(ns // 1000)
            at = stop
            continue
        data, stop = src.read(at, end, copy=False)
        # a large event comes back whole (a LargeFrame) and becomes one row
        evs = events_from(data, at, seg.segment_id, seg.stream.names, None, frames, what)
        for ev in evs:
            offsets.append(ev.offset)
            k = ev[1]
            try:
                keys.append(None if k is None else bytes(k).decode("utf-8"))
            except UnicodeDecodeError:
                raise CorruptDataError(f"{what}: the routing key at offset {ev.offset} is not "
                                       "UTF-8") from None
            events.append(bytes(ev.event))
            times.append(ns // 1000)
        if stop <= at:
            raise CorruptDataError(f"{what}: no progress at offset {at}")
        at = stop
    if at != end:
        raise CorruptDataError(f"{what}: the range ends at {at}, not at {end} (not an event boundary)")
    return SegmentRows(offsets, keys, events, times, end)
