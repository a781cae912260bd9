"""Reads of tiered segment data whose journal files were reclaimed: from the Parquet files.

Owns: serving ``SegmentSource`` the bytes of a segment range that is only in tier 2, in the
journal's own form (event frames back to back, or a byte stream's raw bytes), from row groups
read whole and kept in a bounded cache.

Invariants:
  1. What a read returns is byte for byte what the journal held at those offsets: frames are
     rebuilt as ``u32 payload length, u16 key length (NO_KEY: none), key, payload``, and the
     rows of a file are contiguous, so the rebuilt bytes of a row group cover the segment range
     ``[its first offset, its last offset + its last frame)`` exactly. A chunk whose rebuilt
     length disagrees with its offsets is CorruptDataError.
  2. A read starts at the asked offset (a frame's start) and ends at ``limit``, about
     ``READ_BYTES`` later or the end of its row group, whichever comes first, but never inside
     a frame: it ends at the last frame boundary by then, and a first frame longer than that
     (a large event, whole in one row) is returned whole. A byte stream's read ends at
     ``limit`` or the row group's end.
  3. The cache holds at most ``cache_bytes`` of rebuilt chunks (their bytes and frame starts) (least recently used go first;
     the chunk just read always stays until the next read), so memory is bounded whatever is
     read.
  4. An offset in no tiered file is CorruptDataError naming the segment; tier-2 failures are
     StorageError (``parquetfile``).
  5. Read-ahead: a read of a chunk loads the next row group of the segment (up to its tiered
     end) in one background thread, if the cache has room for it beside the chunk read; a
     read of that offset waits for it instead of loading it twice. A failed read-ahead is
     logged (DEBUG) and dropped: the reader's own load of the offset raises the error.
  6. ``table`` (slices to Arrow) serves a tiered range straight from the Parquet columns,
     bypassing the cache: the rows of ``[start, end)`` exactly, checked as in invariant 1
     (each row starts where the one before it ends, the first at ``start``, the last ending
     at ``end``), else CorruptDataError.

Thread-safety: any thread; the cache and the read-aheads under way are under ``_lock``; chunks
are loaded outside it (two threads may load the same chunk; the second one is dropped). Lock
order: ``_lock`` is never held while loading or waiting.
"""

from __future__ import annotations

import logging
import threading
from bisect import bisect_right
from collections import OrderedDict
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from typing import TYPE_CHECKING

import pyarrow as pa
import pyarrow.compute as pc

from .._native import check, ffi, lib
from ..arrow import SCHEMA as SLICE_SCHEMA
from ..errors import CorruptDataError
from ..frames import FRAME_HEADER_SIZE
from .manifest import TieredFile
from .parquetfile import read_segment_file
from .target import Tier2Target

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment

__all__ = ["ColdReads", "CACHE_BYTES"]

LOG = logging.getLogger("pravega_embedded.tiering")

CACHE_BYTES = 256 << 20
READ_BYTES = 1 << 20  # at most this much of a chunk per read (whole frames; a longer one whole)


@dataclass(frozen=True, slots=True)
class _Chunk:
    """The rebuilt bytes of one row group: segment range ``[start, end)``, and where each
    of its frames starts (None for a byte stream's raw sections)."""

    start: int
    end: int
    data: memoryview
    starts: "memoryview | None"

    @property
    def nbytes(self) -> int:
        """What it holds in memory (its bytes and its frames' starts), for the cache's bound."""
        return len(self.data) + (0 if self.starts is None else self.starts.nbytes)


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


def _one_chunk(col: pa.ChunkedArray) -> pa.Array:
    return col.chunk(0) if col.num_chunks == 1 else col.combine_chunks()


def bytes_of(table: pa.Table) -> pa.Buffer:
    """A byte stream's rows (raw sections) back to back."""
    return _values(table.column("event").combine_chunks().cast(pa.large_binary()))


def _row_lengths(table: pa.Table, raw: bool) -> pa.ChunkedArray:
    """Each row's length in the segment (int64): its frame's, or a byte stream's section's."""
    # chunk by chunk: combining the event column's chunks would copy every payload
    plen = pc.binary_length(table.column("event")).cast(pa.int64())
    if raw:
        return plen
    klen = pc.fill_null(pc.binary_length(table.column("routing_key")), 0)
    return pc.add(pc.add(plen, klen.cast(pa.int64())), FRAME_HEADER_SIZE)


def _check_covers(table: pa.Table, start: int, end: int, what: str, raw: bool = False) -> None:
    """Invariant 1: the rows of ``table`` cover ``[start, end)`` back to back."""
    try:
        offs = table.column("offset")
        lens = _row_lengths(table, raw)
        ends = pc.add(pc.cumulative_sum(lens), start)
        ok = (len(offs) > 0 and pc.all(pc.equal(pc.subtract(ends, lens), offs)).as_py()
              and ends[-1].as_py() == end)
    except pa.ArrowException as exc:
        raise CorruptDataError(f"{what} holds rows that are not events of this store ({exc})") from exc
    if not ok:
        raise CorruptDataError(f"{what} holds rows that do not cover offsets [{start}, {end})")


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
        self._bytes = 0
        self._ahead: dict[tuple[int, int], Future[None]] = {}  # (uid, offset) -> read-ahead
        self._pool: ThreadPoolExecutor | None = None  # created at the first read-ahead
        self._closed = False
        self.loads = 0  # row groups read from tier 2 (for tests and the bench)

    def read(self, seg: "Segment", offset: int, limit: int) -> tuple[memoryview, int]:
        """The bytes from ``offset`` to ``limit``, ``READ_BYTES`` past ``offset`` or its row
        group's end, whichever comes first, never ending inside a frame (invariant 2)."""
        chunk = self._chunk(seg, offset)
        want = min(limit, chunk.end)
        starts = chunk.starts
        if starts is None:  # a byte stream: raw bytes, a read may end anywhere
            stop = want
        else:
            want = min(want, offset + READ_BYTES)
            j = bisect_right(starts, want) - 1
            if want == chunk.end or (j >= 0 and starts[j] == want):
                stop = want
            elif j >= 0 and starts[j] > offset:
                stop = starts[j]  # the last frame that ends by ``want``
            else:  # the frame at ``offset`` is longer than that: whole
                i = bisect_right(starts, offset)
                stop = starts[i] if i < len(starts) else chunk.end
        return chunk.data[offset - chunk.start:stop - chunk.start], stop

    def table(self, seg: "Segment", start: int, end: int) -> pa.Table:
        """The events of ``[start, end)`` of ``seg`` (tiered; ``start`` an event boundary) as
        a table in ``arrow.SCHEMA`` (invariant 6), read in bulk from its files."""
        st = seg.stream
        parts = []
        pos = start
        while pos < end:
            f = self._file(seg, pos)
            stop = min(end, f.end)
            table = read_segment_file(self.target, st.scope, st.name, f, pos, stop)
            self.loads += 1
            _check_covers(table, pos, stop, f"segment {seg.name}: tier-2 file {f.name} of "
                                            f"{self.target.url}")
            n = table.num_rows
            parts.append(pa.Table.from_arrays([
                table.column("event").cast(pa.large_binary()),
                table.column("routing_key").cast(pa.large_string()),
                pa.repeat(pa.scalar(seg.segment_id, pa.int64()), n),
                table.column("offset")], schema=SLICE_SCHEMA))
            pos = stop
        return pa.concat_tables(parts) if parts else SLICE_SCHEMA.empty_table()

    def forget(self, uid: int) -> None:
        """Drop what is known of segment ``uid`` (its files changed: retention, deletion)."""
        with self._lock:
            self._files.pop(uid, None)
            for start in self._starts.pop(uid, []):
                chunk = self._chunks.pop((uid, start), None)
                if chunk is not None:
                    self._bytes -= chunk.nbytes

    def close(self) -> None:
        """Stop reading ahead (a load in progress finishes first). Idempotent."""
        with self._lock:
            pool, self._pool = self._pool, None
            self._closed = True
        if pool is not None:
            pool.shutdown(wait=True, cancel_futures=True)

    # ------------------------------------------------------------------ the cache
    def _chunk(self, seg: "Segment", offset: int) -> _Chunk:
        uid = seg.uid
        chunk = self._cached(uid, offset)
        if chunk is None:
            with self._lock:
                ahead = self._ahead.get((uid, offset))
            if ahead is not None:
                wait([ahead])  # read ahead already: its result is in the cache (or failed)
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
        """Invariant 5: load the row group after ``chunk`` in the background, once."""
        uid, nxt = seg.uid, chunk.end
        if nxt >= self._engine.tiered.get(uid, 0):
            return  # the rest is in the journal (or not tiered yet)
        with self._lock:
            if self._closed or (uid, nxt) in self._ahead or self._bytes + chunk.nbytes > self.cache_bytes:
                return  # closed, under way, or no room for it beside what is read now
            starts = self._starts.get(uid, [])
            i = bisect_right(starts, nxt) - 1
            if i >= 0 and nxt < self._chunks[(uid, starts[i])].end:
                return  # cached
            if self._pool is None:
                self._pool = ThreadPoolExecutor(1, thread_name_prefix="pe-cold-read-ahead")
            self._ahead[(uid, nxt)] = self._pool.submit(self._load_ahead, seg, nxt)

    def _load_ahead(self, seg: "Segment", offset: int) -> None:
        try:
            self._insert(seg.uid, self._load(seg, self._file(seg, offset), offset))
        except Exception as exc:  # noqa: BLE001 - the reader's own load raises it (invariant 5)
            LOG.debug("read-ahead of segment %s at %d failed: %s", seg.name, offset, exc)
        finally:
            with self._lock:
                self._ahead.pop((seg.uid, offset), None)

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

    def _load(self, seg: "Segment", f: TieredFile, offset: int) -> _Chunk:
        st = seg.stream
        table = read_segment_file(self.target, st.scope, st.name, f, offset, offset + 1,
                                  whole_groups=True)
        self.loads += 1
        if table.num_rows == 0:
            raise CorruptDataError(f"segment {seg.name}: tier-2 file {f.name} of {self.target.url} "
                                   f"has no row at offset {offset} though its range holds it")
        raw = st.kind == "bytes"
        what = f"segment {seg.name}: tier-2 file {f.name} of {self.target.url}"
        start = table.column("offset")[0].as_py()
        if raw:
            buf = bytes_of(table)
            _check_covers(table, start, start + buf.size, what, raw)
        else:
            buf = frames_of(table, what)  # checks the rows cover their offsets
        end = start + buf.size
        if end > f.end:
            raise CorruptDataError(f"{what} holds rows that do not cover their offsets")
        if not start <= offset < end:
            raise CorruptDataError(f"segment {seg.name}: no row of tier-2 file {f.name} starts at "
                                   f"or before offset {offset}")
        starts = None
        if not raw:
            offs = table.column("offset").combine_chunks()
            starts = memoryview(offs.buffers()[1]).cast("q")[offs.offset:offs.offset + len(offs)]
        return _Chunk(start, end, memoryview(buf).cast("B"), starts)
