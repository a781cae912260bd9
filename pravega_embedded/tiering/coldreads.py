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
  2. A read starts at the asked offset and ends at ``limit`` or the end of its row group, but
     never inside a frame: a frame that crosses ``limit`` (a large event, whole in one row) is
     returned whole.
  3. The cache holds at most ``cache_bytes`` of rebuilt chunks (least recently used go first;
     the chunk just read always stays until the next read), so memory is bounded whatever is
     read.
  4. An offset in no tiered file is CorruptDataError naming the segment; tier-2 failures are
     StorageError (``parquetfile``).
  5. Read-ahead: a read of a chunk loads the next row group of the segment (up to its tiered
     end) in one background thread, if the cache has room for it beside the chunk read; a
     read of that offset waits for it instead of loading it twice. A failed read-ahead is
     logged (DEBUG) and dropped: the reader's own load of the offset raises the error.

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

from ..errors import CorruptDataError
from ..frames import FRAME_HEADER_SIZE, NO_KEY
from .manifest import TieredFile
from .parquetfile import read_segment_file
from .target import Tier2Target

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment

__all__ = ["ColdReads", "CACHE_BYTES"]

LOG = logging.getLogger("pravega_embedded.tiering")

CACHE_BYTES = 256 << 20


@dataclass(frozen=True, slots=True)
class _Chunk:
    """The rebuilt bytes of one row group: segment range ``[start, end)``."""

    start: int
    end: int
    data: memoryview


def frames_of(table: pa.Table) -> pa.Buffer:
    """The event frames of ``table``'s rows back to back (invariant 1), built column-wise."""
    events = table.column("event").combine_chunks().cast(pa.large_binary())
    keys = table.column("routing_key").combine_chunks()
    plen = pc.binary_length(events).cast(pa.uint32())
    klen = pc.fill_null(pc.binary_length(keys).cast(pa.uint16()), NO_KEY)
    n = len(table)
    heads = [pa.FixedSizeBinaryArray.from_buffers(pa.binary(w), n, [None, col.buffers()[1]],
                                                  offset=col.offset)
             for w, col in ((4, plen), (2, klen))]
    parts = [h.cast(pa.large_binary()) for h in heads]
    parts += [pc.fill_null(keys.cast(pa.large_binary()), b""), events]
    return _values(pc.binary_join_element_wise(*parts, pa.scalar(b"", pa.large_binary())))


def bytes_of(table: pa.Table) -> pa.Buffer:
    """A byte stream's rows (raw sections) back to back."""
    return _values(table.column("event").combine_chunks().cast(pa.large_binary()))


def _row_lengths(table: pa.Table, raw: bool) -> pa.Array:
    """Each row's length in the segment (int64): its frame's, or a byte stream's section's."""
    plen = pc.binary_length(table.column("event").combine_chunks()).cast(pa.int64())
    if raw:
        return plen
    klen = pc.fill_null(pc.binary_length(table.column("routing_key").combine_chunks()), 0)
    return pc.add(pc.add(plen, klen.cast(pa.int64())), FRAME_HEADER_SIZE)


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
        """The bytes from ``offset`` to ``limit`` or its row group's end (invariant 2)."""
        chunk = self._chunk(seg, offset)
        stop = min(limit, chunk.end)
        at = offset - chunk.start
        data = chunk.data
        if seg.stream.kind != "bytes" and stop < chunk.end and len(data) - at >= FRAME_HEADER_SIZE:
            plen = int.from_bytes(data[at:at + 4], "little")
            klen = int.from_bytes(data[at + 4:at + 6], "little")
            flen = FRAME_HEADER_SIZE + (0 if klen == NO_KEY else klen) + plen
            stop = max(stop, min(chunk.end, offset + flen))
        return data[at:stop - chunk.start], stop

    def forget(self, uid: int) -> None:
        """Drop what is known of segment ``uid`` (its files changed: retention, deletion)."""
        with self._lock:
            self._files.pop(uid, None)
            for start in self._starts.pop(uid, []):
                chunk = self._chunks.pop((uid, start), None)
                if chunk is not None:
                    self._bytes -= len(chunk.data)

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
            self._bytes += len(chunk.data)
            self._evict(key)
            return chunk

    def _read_ahead(self, seg: "Segment", chunk: _Chunk) -> None:
        """Invariant 5: load the row group after ``chunk`` in the background, once."""
        uid, nxt = seg.uid, chunk.end
        if nxt >= self._engine.tiered.get(uid, 0):
            return  # the rest is in the journal (or not tiered yet)
        with self._lock:
            if self._closed or (uid, nxt) in self._ahead or self._bytes + len(chunk.data) > self.cache_bytes:
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
            self._bytes -= len(chunk.data)

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
        try:
            buf = bytes_of(table) if raw else frames_of(table)
            offs = table.column("offset").combine_chunks()
            start = offs[0].as_py()
            end = start + buf.size
            # invariant 1: each row starts where the rows before it end
            lens = _row_lengths(table, raw)
            covered = pc.all(pc.equal(pc.subtract(offs, start),
                                      pc.subtract(pc.cumulative_sum(lens), lens))).as_py()
        except pa.ArrowException as exc:  # e.g. a key too long for a frame: not our file
            raise CorruptDataError(f"segment {seg.name}: tier-2 file {f.name} of {self.target.url} "
                                   f"holds rows that are not events of this store ({exc})") from exc
        if end > f.end or not covered:
            raise CorruptDataError(f"segment {seg.name}: tier-2 file {f.name} of {self.target.url} "
                                   f"holds rows that do not cover their offsets")
        if not start <= offset < end:
            raise CorruptDataError(f"segment {seg.name}: no row of tier-2 file {f.name} starts at "
                                   f"or before offset {offset}")
        return _Chunk(start, end, memoryview(buf).cast("B"))
