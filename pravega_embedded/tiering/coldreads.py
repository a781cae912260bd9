"""Reads of tiered segment data whose journal files were reclaimed: from the Parquet files.

Owns: serving ``SegmentSource`` a segment range that is only in tier 2, as events made straight
from the row groups' columns (readers) or in the journal's own form (event frames back to back,
or a byte stream's raw bytes), from row groups read whole and kept in a bounded cache, and the
tier-2 files kept open for those reads.

Invariants:
  1. What a read returns is what the journal held at those offsets. A row group's rows are
     checked when it is loaded: each starts where the frame before it ends (``u32 payload
     length, u16 key length (NO_KEY: none), key, payload``), so the row group covers the
     segment range ``[its first offset, its last offset + its last frame)`` exactly, else
     CorruptDataError (``rows_length``, one C call). ``rows`` hands out the rows' payloads,
     keys and offsets; ``read`` the frames, rebuilt from the rows at the first read that asks
     for bytes (``frames_of``), byte for byte the journal's.
  2. A read starts at the asked offset (a frame's start; for ``rows`` a row's, else
     CorruptDataError) and ends at ``limit``, about ``READ_BYTES`` later or the end of its row
     group, whichever comes first, but never inside a frame: it ends at the last frame
     boundary by then, and a first frame longer than that (a large event, whole in one row)
     is returned whole. A byte stream's read ends at ``limit`` or the row group's end.
  3. The cache holds at most ``cache_bytes`` of chunks (their rows, frames once rebuilt, and
     frame starts; least recently used go first; the chunk just read always stays until the
     next read), so memory is bounded whatever is read; at most ``OPENED`` files are kept
     open (their footers checked once, ``parquetfile.OpenedFile``).
  4. An offset in no tiered file is CorruptDataError naming the segment; tier-2 failures are
     StorageError (``parquetfile``).
  5. Read-ahead: a read of a chunk loads the ``AHEAD`` row groups after it (up to the
     segment's tiered end) in one background thread, those the cache has room for beside
     that chunk and the read-aheads under way (older chunks make room; a row group is taken to
     be as large as its footer says, and at least as the chunk read); a read of such an offset
     waits for it instead of loading it twice. What follows a chunk is planned from the
     layouts of files already opened: a read of a cached chunk does no tier-2 I/O. A failed
     read-ahead is logged (DEBUG) and dropped: the reader's own load of the offset raises the
     error.
  7. A forgotten segment's open files are closed (``forget``: its files changed; and
     ``forget_stream`` before a deleted stream's tier-2 folder is deleted), and a file opened
     across a ``forget`` or after ``close`` is not kept open.
  6. ``table`` (slices to Arrow) serves a tiered range straight from the Parquet columns,
     bypassing the cache, its row groups decoded side by side: the rows of ``[start, end)``
     exactly, checked as in invariant 1 (the first at ``start``, the last ending at ``end``),
     else CorruptDataError.

Thread-safety: any thread; the cache, the open files and the read-aheads under way are under
``_lock``; chunks are loaded outside it (two threads may load the same chunk; the second one
is dropped), each open file's reads one at a time under its own lock. Lock order: ``_lock`` is
never held while loading, waiting or closing a file.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_left, bisect_right
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from .._native import check, ffi, lib
from ..arrow import SCHEMA as SLICE_SCHEMA
from ..arrow import TIMED_SCHEMA
from ..errors import CorruptDataError
from ..frames import FRAME_HEADER_SIZE
from .layout import ROW_GROUP_BYTES
from .manifest import TieredFile
from .parquetfile import OpenedFile, as_slice_table, read_segment_file
from .target import Tier2Target

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment

__all__ = ["ColdReads", "CACHE_BYTES"]

LOG = logging.getLogger("pravega_embedded.tiering")

CACHE_BYTES = 256 << 20
AHEAD = 2  # row groups read ahead of the one read
OPENED = 16  # files kept open (their footers checked), of those last read
LAYOUTS = 4096  # row-group layouts kept (for read-ahead), of the files last opened
READ_BYTES = 1 << 20  # at most this much of a chunk per read (whole frames; a longer one whole)


@dataclass(slots=True)
class _Chunk:
    """One row group of a segment, segment range ``[start, end)``. An event stream's chunk
    holds its rows (``table``: event, routing_key as binary, offset, one Arrow chunk each) and
    where each starts (``starts``, int64); their frames (``data``) are rebuilt only when a read
    asks for bytes. A byte stream's chunk holds its raw sections in ``data`` (``starts`` and
    ``table`` None)."""

    start: int
    end: int
    data: "memoryview | None"
    starts: "memoryview | None" = None
    table: "pa.Table | None" = None

    @property
    def nbytes(self) -> int:
        """What it holds in memory (rows, frames, starts), for the cache's bound."""
        return ((0 if self.data is None else len(self.data))
                + (0 if self.starts is None else self.starts.nbytes)
                + (0 if self.table is None else self.table.nbytes))


def frames_of(table: pa.Table, what: str) -> pa.Buffer:
    """The event frames of ``table``'s rows back to back (invariant 1), rebuilt in C in one
    call (one release of the GIL: a read-ahead is not held up by a reader's Python loop),
    which also checks that each row starts where the frame before it ends."""
    ev, keys, offs = (_one_chunk(table.column(c)) for c in ("event", "routing_key", "offset"))
    n = len(ev)
    (_, ev_offs, ev_data), (key_valid, key_offs, key_data) = ev.buffers(), keys.buffers()
    cap = FRAME_HEADER_SIZE * n + (ev_data.size if ev_data else 0) + (key_data.size if key_data else 0)
    out = pa.allocate_buffer(cap)
    out_len = ffi.new("uint64_t *")
    fb = ffi.from_buffer
    status = lib.pe_columns_to_frames(
        n, fb("int32_t[]", ev_offs) + ev.offset, fb(ev_data) if ev_data else ffi.NULL,
        fb("int32_t[]", key_offs) + keys.offset, fb(key_data) if key_data else ffi.NULL,
        fb("uint8_t[]", key_valid) if key_valid else ffi.NULL, keys.offset,
        fb("int64_t[]", offs.buffers()[1]) + offs.offset, fb(out), cap, out_len)
    if status == lib.PE_ERR_CORRUPT:
        raise CorruptDataError(f"{what} holds rows that are not events of this store (a key or "
                               "payload too long for a frame) or do not cover their offsets")
    check(status, f"rebuild the frames of {what}")
    return out.slice(0, out_len[0])


def rows_length(table: pa.Table, what: str) -> int:
    """The bytes the frames of ``table``'s rows cover from the first row's offset, checked in
    C in one call as ``frames_of`` checks them (invariant 1), without building the frames."""
    ev, keys, offs = (_one_chunk(table.column(c)) for c in ("event", "routing_key", "offset"))
    if len(ev) == 0:
        raise CorruptDataError(f"{what} has a row group without rows")
    (_, ev_offs, _), (key_valid, key_offs, _) = ev.buffers(), keys.buffers()
    out_len = ffi.new("uint64_t *")
    fb = ffi.from_buffer
    status = lib.pe_rows_check(
        len(ev), fb("int32_t[]", ev_offs) + ev.offset, fb("int32_t[]", key_offs) + keys.offset,
        fb("uint8_t[]", key_valid) if key_valid else ffi.NULL, keys.offset,
        fb("int64_t[]", offs.buffers()[1]) + offs.offset, out_len)
    if status == lib.PE_ERR_CORRUPT:
        raise CorruptDataError(f"{what} holds rows that are not events of this store (a key or "
                               "payload too long for a frame) or do not cover their offsets")
    check(status, f"check the rows of {what}")
    return int(out_len[0])


def _one_chunk(col: pa.ChunkedArray) -> pa.Array:
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def bytes_of(table: pa.Table) -> pa.Buffer:
    """A byte stream's rows (raw sections) back to back."""
    return _values(table.column("event").combine_chunks().cast(pa.large_binary()))


def _check_covers(table: pa.Table, start: int, end: int, what: str) -> int:
    """Invariant 1: the rows of ``table`` (events) cover ``[start, end)`` back to back, and
    each key fits a frame (``NO_KEY``); returns ``end``. Checked batch by batch in C
    (``rows_length``: no column is combined or copied)."""
    pos = start
    for batch in table.to_batches():
        if batch.num_rows == 0:
            continue
        part = pa.Table.from_batches([batch])
        if part.column("offset")[0].as_py() != pos:
            pos = -1
            break
        pos += rows_length(part, what)
    if pos != end or table.num_rows == 0:
        raise CorruptDataError(f"{what} holds rows that do not cover offsets [{start}, {end}) "
                               "or are not events of this store")
    return end


def _check_sections(table: pa.Table, start: int, end: int, what: str) -> int:
    """Invariant 1 for a byte stream: its rows' sections cover ``[start, end)`` back to back;
    returns ``end``."""
    try:
        offs = table.column("offset")
        lens = pc.binary_length(table.column("event")).cast(pa.int64())  # chunk by chunk: no copy
        ends = pc.add(pc.cumulative_sum(lens), start)
        ok = (len(offs) > 0 and pc.all(pc.equal(pc.subtract(ends, lens), offs)).as_py()
              and ends[-1].as_py() == end)
    except pa.ArrowException as exc:
        raise CorruptDataError(f"{what} holds rows that are not sections of a byte stream ({exc})") from exc
    if not ok:
        raise CorruptDataError(f"{what} holds rows that do not cover offsets [{start}, {end})")
    return end


def _values(arr: pa.Array) -> pa.Buffer:
    """The data of a large-binary array without nulls, as one buffer (no copy)."""
    offsets = arr.buffers()[1]
    first, last = (int(x) for x in pa.Array.from_buffers(
        pa.int64(), len(arr) + 1, [None, offsets], offset=arr.offset).to_pylist()[::len(arr)])
    return arr.buffers()[2].slice(first, last - first)


class ColdReads:
    """Reads of one store's tiered data from its tier-2 target (module docstring)."""

    def __init__(self, engine: "Engine", target: Tier2Target, cache_bytes: int = CACHE_BYTES) -> None:
        self._engine = engine
        self.target = target
        self.cache_bytes = cache_bytes
        self._lock = threading.Lock()
        self._files: dict[int, list[TieredFile]] = {}  # uid -> tiered files in offset order
        self._chunks: OrderedDict[tuple[int, int], _Chunk] = OrderedDict()  # LRU
        self._starts: dict[int, list[int]] = {}  # uid -> sorted starts of its cached chunks
        self._opened: OrderedDict[tuple[int, int, int], OpenedFile] = OrderedDict()  # LRU
        # (uid, first, end) -> each row group's first offset and size, of files opened (LRU)
        self._layouts: OrderedDict[tuple[int, int, int], tuple[tuple[int, ...] | None, tuple[int, ...]]] = OrderedDict()
        self._forgets: dict[int, int] = {}  # uid -> times forgotten (a file opened across it is not kept)
        self._bytes = 0
        # (uid, offset) -> a read-ahead under way and the bytes it will take
        self._ahead: dict[tuple[int, int], tuple[Future[None], int]] = {}
        self._ahead_bytes = 0
        self._pool: ThreadPoolExecutor | None = None  # created at the first read-ahead
        self._closed = False
        self.loads = 0  # row groups read from tier 2 (for tests and the bench)

    def read(self, seg: "Segment", offset: int, limit: int) -> tuple[memoryview, int]:
        """The bytes from ``offset`` to ``limit``, ``READ_BYTES`` past ``offset`` or its row
        group's end, whichever comes first, never ending inside a frame (invariant 2)."""
        chunk = self._chunk(seg, offset)
        stop = _stop(chunk, offset, limit)
        data = chunk.data if chunk.data is not None else self._frames(seg, chunk)
        return data[offset - chunk.start:stop - chunk.start], stop

    def rows(self, seg: "Segment", offset: int, limit: int) -> tuple[list[bytes], list[bytes | None], list[int], int]:
        """The events of an event stream's segment from ``offset`` (an event's start) to where
        ``read`` would stop, as Python objects made straight from the row group's columns (no
        frames rebuilt): (payloads, keys as UTF-8 bytes or None, offsets, stop)."""
        chunk = self._chunk(seg, offset)
        starts, table = chunk.starts, chunk.table
        if starts is None or table is None:
            raise CorruptDataError(f"segment {seg.name} is a byte stream's: it has no events")
        stop = _stop(chunk, offset, limit)
        i = bisect_left(starts, offset)
        if i == len(starts) or starts[i] != offset:
            raise CorruptDataError(f"segment {seg.name}: no event of its tiered data starts at "
                                   f"offset {offset}")
        part = table.slice(i, bisect_left(starts, stop, i) - i)
        return (part.column(0).to_pylist(), part.column(1).to_pylist(), starts[i:i + part.num_rows].tolist(),
                stop)

    def table(self, seg: "Segment", start: int, end: int, timed: bool = False) -> pa.Table:
        """The events of ``[start, end)`` of ``seg`` (tiered; ``start`` an event boundary) as
        a table in ``arrow.SCHEMA`` (invariant 6; with ``timed``, ``arrow.TIMED_SCHEMA``), read
        in bulk from its files."""
        st = seg.stream
        schema = TIMED_SCHEMA if timed else SLICE_SCHEMA
        parts = []
        pos = start
        while pos < end:
            f = self._file(seg, pos)
            stop = min(end, f.end)
            table = read_segment_file(self.target, st.scope, st.name, f, pos, stop)
            self.loads += 1
            _check_covers(table, pos, stop, f"segment {seg.name}: tier-2 file {f.name} of "
                                            f"{self.target.url}")
            parts.append(as_slice_table(table, seg.segment_id, timed))
            pos = stop
        return pa.concat_tables(parts) if parts else schema.empty_table()

    def forget(self, uid: int) -> None:
        """Drop what is known of segment ``uid`` (its files changed: retention, deletion) and
        close its open files."""
        with self._lock:
            self._files.pop(uid, None)
            self._forgets[uid] = self._forgets.get(uid, 0) + 1  # a file opened meanwhile: not kept
            gone = [self._opened.pop(k) for k in [k for k in self._opened if k[0] == uid]]
            for k in [k for k in self._layouts if k[0] == uid]:
                del self._layouts[k]
            for start in self._starts.pop(uid, []):
                chunk = self._chunks.pop((uid, start), None)
                if chunk is not None:
                    self._bytes -= chunk.nbytes
        for opened in gone:
            opened.close()

    def forget_stream(self, scope: str, stream: str) -> None:
        """Close the open files of a deleted stream (before its tier-2 folder is deleted: a file
        held open would keep its disk space, or its folder on NFS); its segments are never read
        again, so their chunks just age out of the cache."""
        with self._lock:
            uids = {k[0] for k, o in self._opened.items() if o.names == (scope, stream)}
        for uid in uids:
            self.forget(uid)

    def close(self) -> None:
        """Stop reading ahead (a load in progress finishes first) and close the open files.
        Idempotent."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)
        with self._lock:
            gone = list(self._opened.values())
            self._opened.clear()
        for opened in gone:
            opened.close()

    # ------------------------------------------------------------------ the cache
    def _chunk(self, seg: "Segment", offset: int) -> _Chunk:
        uid = seg.uid
        chunk = self._cached(uid, offset)
        if chunk is None:
            with self._lock:
                ahead = self._ahead.get((uid, offset))
            if ahead is not None:
                wait([ahead[0]])  # read ahead already: its result is in the cache (or failed)
                chunk = self._cached(uid, offset)
        if chunk is None:
            chunk = self._insert(uid, self._load(seg, self._file(seg, offset), offset))
        self._read_ahead(seg, chunk)
        return chunk

    def _cached(self, uid: int, offset: int) -> _Chunk | None:
        with self._lock:
            starts = self._starts.get(uid, [])
            i = bisect_right(starts, offset) - 1
            if i >= 0:
                chunk = self._chunks[(uid, starts[i])]
                if offset < chunk.end:
                    self._chunks.move_to_end((uid, starts[i]))
                    return chunk
        return None

    def _insert(self, uid: int, chunk: _Chunk) -> _Chunk:
        with self._lock:
            key = (uid, chunk.start)
            if key in self._chunks:
                return self._chunks[key]
            self._chunks[key] = chunk
            starts = self._starts.setdefault(uid, [])
            starts.insert(bisect_right(starts, chunk.start), chunk.start)
            self._bytes += chunk.nbytes
            self._evict(key)
            return chunk

    def _read_ahead(self, seg: "Segment", chunk: _Chunk) -> None:
        """Invariant 5: load the ``AHEAD`` row groups after ``chunk`` in the background, once
        each, while the cache has room for them beside ``chunk`` (older chunks make room)."""
        uid = seg.uid
        tiered = self._engine.tiered.get(uid, 0)
        at = chunk.start
        for _ in range(AHEAD):
            try:
                nxt, size = self._next_group(seg, at)
            except Exception as exc:  # noqa: BLE001 - the reader's own load raises it (invariant 5)
                LOG.debug("read-ahead of segment %s after %d: %s", seg.name, at, exc)
                return
            if nxt is None or nxt >= tiered:
                return  # not known yet, or the rest is in the journal (or not tiered yet)
            size = max(size, chunk.nbytes)  # a footer's sizes are encoded sizes: too small
            with self._lock:
                if self._closed:
                    return
                if (uid, nxt) not in self._ahead and not self._holds(uid, nxt):
                    if chunk.nbytes + self._ahead_bytes + size > self.cache_bytes:
                        return  # no room for it beside what is read now
                    if self._pool is None:
                        self._pool = ThreadPoolExecutor(1, thread_name_prefix="pe-cold-read-ahead")
                    self._ahead[(uid, nxt)] = (self._pool.submit(self._load_ahead, seg, nxt), size)
                    self._ahead_bytes += size
            at = nxt

    def _next_group(self, seg: "Segment", offset: int) -> tuple[int | None, int]:
        """Where the row group after the one holding ``offset`` starts, and about how many
        bytes it takes (its footer's size; ``ROW_GROUP_BYTES`` across files), from the layouts
        of the files already opened: None if that file's is not known (no tier-2 I/O here)."""
        f = self._file(seg, offset)
        with self._lock:
            layout = self._layouts.get((seg.uid, f.first, f.end))
        if layout is None:
            return None, 0
        firsts, sizes = layout
        if firsts is not None:
            j = bisect_right(firsts, offset)
            if j < len(firsts):
                return firsts[j], sizes[j]
        return f.end, ROW_GROUP_BYTES

    def _holds(self, uid: int, offset: int) -> bool:
        """Whether a cached chunk holds ``offset`` (lock held)."""
        starts = self._starts.get(uid, [])
        i = bisect_right(starts, offset) - 1
        return i >= 0 and offset < self._chunks[(uid, starts[i])].end

    def _load_ahead(self, seg: "Segment", offset: int) -> None:
        try:
            self._insert(seg.uid, self._load(seg, self._file(seg, offset), offset))
        except Exception as exc:  # noqa: BLE001 - the reader's own load raises it (invariant 5)
            LOG.debug("read-ahead of segment %s at %d failed: %s", seg.name, offset, exc)
        finally:
            with self._lock:
                _, size = self._ahead.pop((seg.uid, offset), (None, 0))
                self._ahead_bytes -= size

    def _frames(self, seg: "Segment", chunk: _Chunk) -> memoryview:
        """``chunk``'s frames, rebuilt from its rows at the first read that asks for bytes
        (counted in the cache's bytes from then on, if it is still cached)."""
        assert chunk.table is not None  # an event stream's chunk (a byte stream's has data)
        st = seg.stream
        buf = memoryview(frames_of(chunk.table, f"segment {seg.name}: tier-2 data of "
                                                f"{st.key} in {self.target.url}")).cast("B")
        if len(buf) != chunk.end - chunk.start:
            raise CorruptDataError(f"segment {seg.name}: the tier-2 rows at [{chunk.start}, "
                                   f"{chunk.end}) rebuild to {len(buf)} bytes")
        with self._lock:
            if chunk.data is None:
                chunk.data = buf
                key = (seg.uid, chunk.start)
                if self._chunks.get(key) is chunk:
                    self._bytes += len(buf)
                    self._evict(key)
            return chunk.data

    def _evict(self, keep: tuple[int, int]) -> None:
        """Invariant 3 (lock held)."""
        while self._bytes > self.cache_bytes and len(self._chunks) > 1:
            key, chunk = next(iter(self._chunks.items()))
            if key == keep:
                self._chunks.move_to_end(key)
                continue
            del self._chunks[key]
            self._starts[key[0]].remove(key[1])
            self._bytes -= chunk.nbytes

    def _file(self, seg: "Segment", offset: int) -> TieredFile:
        """The tiered file of ``seg`` holding ``offset`` (invariant 4)."""
        for refresh in (False, True):
            with self._lock:
                files = None if refresh else self._files.get(seg.uid)
            if files is None:
                rows = self._engine.meta.tiered_files(seg.uid)
                files = [TieredFile(seg.segment_id, *row) for row in rows]
                with self._lock:
                    self._files[seg.uid] = files
            i = bisect_right([f.first for f in files], offset) - 1
            if i >= 0 and offset < files[i].end:
                return files[i]
        raise CorruptDataError(f"segment {seg.name}: offset {offset} is neither in the journal nor "
                               f"in a tier-2 file of {self.target.url}")

    def _open(self, seg: "Segment", f: TieredFile) -> OpenedFile:
        """``f`` open for reads of its row groups (its footer checked), kept among the
        ``OPENED`` last used (two threads may open it at once: the second copy is dropped).
        A file opened while the segment was forgotten, or after ``close``, is not kept."""
        key = (seg.uid, f.first, f.end)
        with self._lock:
            opened = self._opened.get(key)
            if opened is not None:
                self._opened.move_to_end(key)
                return opened
            forgets = self._forgets.get(seg.uid, 0)
        st = seg.stream
        opened = OpenedFile(self.target, st.scope, st.name, f)
        gone = []
        with self._lock:
            if key in self._opened:  # another thread opened it meanwhile: use that one
                gone.append(opened)
                opened = self._opened[key]
            elif not self._closed and self._forgets.get(seg.uid, 0) == forgets:
                self._opened[key] = opened
                self._layouts[key] = (opened.firsts, opened.sizes)
                while len(self._opened) > OPENED:
                    gone.append(self._opened.popitem(last=False)[1])
                while len(self._layouts) > LAYOUTS:
                    self._layouts.popitem(last=False)
        for g in gone:
            g.close(wait=False)  # a read in progress on it closes nothing: its handle is freed later
        return opened

    def _load(self, seg: "Segment", f: TieredFile, offset: int) -> _Chunk:
        st = seg.stream
        table = self._open(seg, f).group_at(offset)
        self.loads += 1
        if table.num_rows == 0:
            raise CorruptDataError(f"segment {seg.name}: tier-2 file {f.name} of {self.target.url} "
                                   f"has no row at offset {offset} though its range holds it")
        raw = st.kind == "bytes"
        what = f"segment {seg.name}: tier-2 file {f.name} of {self.target.url}"
        start = table.column("offset")[0].as_py()
        if raw:
            buf = bytes_of(table)
            end = _check_sections(table, start, start + buf.size, what)
            chunk = _Chunk(start, end, memoryview(buf).cast("B"))
        else:
            table = pa.Table.from_arrays(
                [_one_chunk(table.column("event")),
                 _one_chunk(table.column("routing_key")).view(pa.binary()),
                 _one_chunk(table.column("offset"))], names=["event", "routing_key", "offset"])
            end = start + rows_length(table, what)
            offs = table.column("offset").chunk(0)
            starts = memoryview(offs.buffers()[1]).cast("q")[offs.offset:offs.offset + len(offs)]
            chunk = _Chunk(start, end, None, starts, table)
        if end > f.end:
            raise CorruptDataError(f"{what} holds rows that do not cover their offsets")
        if not start <= offset < end:
            raise CorruptDataError(f"segment {seg.name}: no row of tier-2 file {f.name} starts at "
                                   f"or before offset {offset}")
        return chunk


def _stop(chunk: _Chunk, offset: int, limit: int) -> int:
    """Where a read of ``chunk`` from ``offset`` to ``limit`` stops (invariant 2)."""
    want = min(limit, chunk.end)
    starts = chunk.starts
    if starts is None:  # a byte stream: raw bytes, a read may end anywhere
        return want
    want = min(want, offset + READ_BYTES)
    j = bisect_right(starts, want) - 1
    if want == chunk.end or (j >= 0 and starts[j] == want):
        return want
    if j >= 0 and starts[j] > offset:
        return starts[j]  # the last frame that ends by ``want``
    i = bisect_right(starts, offset)  # the frame at ``offset`` is longer than that: whole
    return starts[i] if i < len(starts) else chunk.end
