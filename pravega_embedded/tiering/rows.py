"""A committed range of a segment as tier-2 rows: offsets, keys, events and write times.

Owns: reading ``[start, end)`` of one segment through the store's own read path
(``segsource``: tail cache, journal, CRC checks; a row group's index entries in one LMDB
transaction, each whole section not in the tail cache read straight into the group's buffer
with the GIL released, so a background copy takes little of the GIL from writers and readers;
a whole section in the tail cache copied in; either counted from its index entry)
and turning it into ``SegmentRows`` for a Parquet file: one row per event of an event stream (a
large event whole, in one row), one row per section of a byte stream. Event streams are turned into Arrow columns in C
(``arrow.FrameColumns``, the slices' converter): no Python object per event.

Invariants:
  1. The caller passes a range of durable, committed data that starts and ends at event
     boundaries (a tiered end, a head or a segment's visible length); the rows cover it with no
     gap and nothing more, so ``rows.end == end``.
  2. A row's write time is its section's (``IndexEntry.write_ns``: the record that put it in the
     segment); a section of unknown time (written before metadata format 5) takes the time of
     the nearest row before it in the same range, else ``fallback_ns`` (the copier gives the
     segment's creation time). A section read whole counts the events its index entry says
     start in it; a row group's total must agree with its frames, else CorruptDataError.
  3. Routing keys are valid UTF-8 (checked on the whole column), else CorruptDataError.

Thread-safety: reads only; any thread (as ``SegmentSource``).
"""

from __future__ import annotations

from array import array
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

import pyarrow as pa

from .._native import ffi
from ..arrow import FrameColumns
from ..errors import CorruptDataError
from ..frames import FRAME_HEAD, FRAME_HEADER_SIZE, FrameParser, frame_length
from ..largeevents import LargeFrame
from ..segindex import IndexEntry
from ..segsource import SegmentSource
from .layout import ROW_GROUP_BYTES, ROW_GROUP_ROWS, SCHEMA
from .parquetfile import SegmentRows, rows_table

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment

__all__ = ["segment_rows"]

_TIME = SCHEMA.field("write_time").type
_RUN_SECTIONS = 4096  # index entries taken at once (tiny sections: memory stays bounded)


def segment_rows(engine: "Engine", seg: "Segment", start: int, end: int,
                 fallback_ns: int) -> SegmentRows:
    """The rows of ``[start, end)`` of ``seg`` (invariants 1 to 3), read as the file's row
    groups are written."""
    if not 0 <= start < end <= seg.length:
        raise CorruptDataError(f"segment {seg.name}: no committed data in [{start}, {end})")
    return SegmentRows(start, end, _groups(engine, seg, start, end, fallback_ns))


def _groups(engine: "Engine", seg: "Segment", start: int, end: int,
            fallback_ns: int) -> Iterator[pa.Table]:
    what = f"tiering of segment {seg.name}"
    src = SegmentSource(engine, seg)
    if seg.stream.kind == "bytes":
        yield from _raw_groups(src, start, end, fallback_ns, what)
        return
    out = _EventRows(seg, what)
    last_ns = fallback_ns
    at = start
    while at < end:
        # about a row group's sections at a time, from one LMDB read transaction
        for entry, cached in src.entries(at, min(end, at + ROW_GROUP_BYTES), _RUN_SECTIONS):
            if entry.end <= at:
                continue  # read already, with the large event before it
            if entry.start > at:
                break  # not contiguous: looked up again from ``at``
            ns = last_ns = entry.write_ns or last_ns
            if out.full(min(entry.end, end) - at):
                yield from out.take()
            if entry.start == at and entry.end <= end and entry.n_events > 0 \
                    and out.read_section(src, entry, cached, ns // 1000):
                at = entry.end
                continue
            # partly wanted or a large event (it comes back whole, a LargeFrame: one row)
            data, stop = src.read(at, end, copy=False)
            yield from _put(out, data, at, stop, ns // 1000, what)
            at = stop
    if at != end:
        raise CorruptDataError(f"{what}: the range ends at {at}, not at {end} (not an event boundary)")
    yield from out.take()


def _raw_groups(src: SegmentSource, start: int, end: int, fallback_ns: int,
                what: str) -> Iterator[pa.Table]:
    """A byte stream's rows: one per section."""
    out = _RawRows()
    last_ns = fallback_ns
    at = start
    while at < end:
        entry, _ = src.section(at)
        ns = last_ns = entry.write_ns or last_ns
        data, stop = src.read_raw(at, end)
        yield from _put(out, data, at, stop, ns // 1000, what)
        at = stop
    if at != end:
        raise CorruptDataError(f"{what}: the range ends at {at}, not at {end}")
    yield from out.take()


def _put(out: "_RawRows | _EventRows", data: Any, at: int, stop: int, us: int,
         what: str) -> Iterator[pa.Table]:
    """Add ``data`` (segment range ``[at, stop)``) to ``out``, taking its full row group out
    first."""
    if stop <= at:
        raise CorruptDataError(f"{what}: no progress at offset {at}")
    if out.full(len(data)):
        yield from out.take()
    out.add(data, at, us)


class _RawRows:
    """A byte stream: one row per section, with no key."""

    def __init__(self) -> None:
        self.offsets: list[int] = []
        self.events: list[bytes] = []
        self.times: list[int] = []
        self.nbytes = 0

    def _clear(self) -> None:
        self.offsets, self.events, self.times, self.nbytes = [], [], [], 0

    def full(self, more: int) -> bool:
        return bool(self.offsets) and (self.nbytes + more > ROW_GROUP_BYTES
                                       or len(self.offsets) >= ROW_GROUP_ROWS)

    def add(self, data: Any, at: int, us: int) -> None:
        self.offsets.append(at)
        self.events.append(bytes(data))
        self.times.append(us)
        self.nbytes += len(data)

    def take(self) -> Iterator[pa.Table]:
        if self.offsets:
            yield rows_table(self.offsets, [None] * len(self.offsets), self.events, self.times)
        self._clear()


class _EventRows:
    """An event stream: frames gathered into a buffer of about a row group's bytes (whole
    sections read straight into it from their journal files, the GIL released), turned into
    Arrow columns in C; the write times as runs of one value per section."""

    def __init__(self, seg: "Segment", what: str) -> None:
        self.seg, self.what = seg, what
        self.columns = FrameColumns()
        self.count = FrameParser(4096)
        self.buf: pa.Buffer | None = None
        self.view = memoryview(b"")  # the writable bytes of buf
        self.used = 0
        self.base = 0
        self.times = array("q")

    def full(self, more: int) -> bool:
        return self.used > 0 and (self.used + more > ROW_GROUP_BYTES
                                  or len(self.times) >= ROW_GROUP_ROWS)

    def _room(self, at: int, n: int) -> memoryview:
        """Where the next ``n`` bytes (from segment offset ``at``) go: the buffer's next bytes;
        into an empty one, a new buffer of at least a row group's bytes and ``n`` if it is
        smaller (``full`` was asked first, so whatever else is gathered fits)."""
        if not self.used:
            if len(self.view) < n:
                self.buf = pa.allocate_buffer(max(ROW_GROUP_BYTES, n))
                self.view = memoryview(self.buf).cast("B")
            self.base = at
        return self.view[self.used:self.used + n]

    def read_section(self, src: SegmentSource, entry: IndexEntry, cached: Any, us: int) -> bool:
        """Section ``entry`` whole into the buffer, its events counted from the entry: copied
        from ``cached`` (its bytes in the tail cache, written and checked by this process) or
        read from its journal file (``cached`` None). False (nothing kept) if it starts a large
        event, a frame longer than the section (``add`` takes it whole), or ``cached`` is not
        the whole section."""
        n = entry.nbytes
        if cached is not None and len(cached) != n:
            return False
        room = self._room(entry.start, n)
        if cached is None:
            src.read_section_into(entry, room)
        else:
            room[:] = cached
        if n < FRAME_HEADER_SIZE or frame_length(*FRAME_HEAD.unpack_from(room)) > n:
            return False
        self.used += n
        self.times.extend(array("q", [us]) * entry.n_events)
        return True

    def add(self, data: Any, at: int, us: int) -> None:
        if type(data) is LargeFrame:
            data = data.frame()
        n = len(data)
        self._room(at, n)[:] = data
        self.used += n
        self.times.extend(array("q", [us]) * self._events_in(data, at))

    def _events_in(self, data: Any, at: int) -> int:
        """The events whose frames make up ``data`` (headers only, in C)."""
        cbuf = ffi.from_buffer(data)
        total, pos, n = len(data), 0, 0
        while pos < total:
            got, used = self.count.parse(cbuf + pos, total - pos, self.what)
            if got == 0:
                raise CorruptDataError(f"{self.what}: a damaged frame at offset {at + pos}")
            n += got
            pos += used
        return n

    def take(self) -> Iterator[pa.Table]:
        """The gathered events as row groups of at most ROW_GROUP_ROWS rows."""
        if not self.used:
            return
        seg, n = self.seg, len(self.times)
        data = self.view[:self.used]
        times = pa.Array.from_buffers(_TIME, n, [None, pa.py_buffer(self.times)])
        batches, row = [], 0
        for b in self.columns.batches(seg.name, seg.segment_id, data, self.base):
            k = b.num_rows
            batches.append(pa.RecordBatch.from_arrays([
                b.column(3), _utf8(b.column(1), self.what).cast(pa.string()),
                b.column(0).cast(pa.binary()), times.slice(row, k)], schema=SCHEMA))
            row += k
        if row != n:
            raise CorruptDataError(f"{self.what}: {row} events parsed, {n} counted")
        del data
        self.buf, self.view, self.used, self.times = None, memoryview(b""), 0, array("q")
        table = pa.Table.from_batches(batches, schema=SCHEMA)
        for i in range(0, n, ROW_GROUP_ROWS):
            yield table.slice(i, ROW_GROUP_ROWS)


def _utf8(keys: pa.Array, what: str) -> pa.Array:
    """``keys`` if every key is valid UTF-8 (invariant 3)."""
    try:
        keys.validate(full=True)
    except pa.ArrowInvalid as exc:
        raise CorruptDataError(f"{what}: a routing key is not UTF-8 ({exc})") from None
    return keys
