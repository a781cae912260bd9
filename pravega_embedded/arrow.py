"""Slices to Arrow: frames turned into Arrow buffers in C, with no per-event Python work.

Owns: the conversion of a slice's chunks (segment, framed bytes, first offset, write time) into
a pyarrow Table with columns event (large_binary), routing_key (large_string, null when the
event had no key), segment_id (int64) and offset (int64), and with ``timed`` a fifth,
write_time (timestamp µs UTC: when the event's record was appended; null when unknown).

Invariants:
  1. Row order is chunk order, and within a chunk offset order (so per-key write order).
  2. Event and key bytes of journal frames are copied once, by ``pe_frames_to_columns``, into
     buffers that Arrow owns (allocated uninitialised by pyarrow); nothing else is copied.
     Tiered data comes as tables already in ``SCHEMA`` (from its Parquet columns) and is
     taken as it is.

Thread-safety: pure function of its input.
"""

from __future__ import annotations

from typing import Any, Iterable, Iterator

import pyarrow as pa

from ._native import check, ffi, lib
from .errors import CorruptDataError
from .frames import FrameParser

__all__ = ["slice_to_arrow", "slice_batches", "FrameColumns", "SCHEMA", "TIMED_SCHEMA", "WRITE_TIME"]

SCHEMA = pa.schema([
    ("event", pa.large_binary()),
    ("routing_key", pa.large_string()),
    ("segment_id", pa.int64()),
    ("offset", pa.int64()),
])
WRITE_TIME = pa.timestamp("us", tz="UTC")
TIMED_SCHEMA = SCHEMA.append(pa.field("write_time", WRITE_TIME))
_CAP = 1 << 18


class FrameColumns:
    """Turns chunks into record batches (one parser, reused across chunks)."""

    def __init__(self) -> None:
        self.frames = FrameParser(_CAP)
        self.sizes = ffi.new("uint64_t[2]")
        self.nulls = ffi.new("uint32_t *")

    def batches(self, name: str, seg_id: int, data: Any, base: int) -> Iterable[pa.RecordBatch]:
        cbuf = ffi.from_buffer(data)
        total = len(data)
        pos = 0
        while pos < total:
            n, consumed = self.frames.parse(cbuf + pos, total - pos, f"slice of {name}")
            if n == 0:
                raise CorruptDataError(f"slice of {name}: a damaged frame at offset {base + pos}")
            yield self._batch(cbuf + pos, total - pos, n, seg_id, base + pos, name)
            pos += consumed

    def _batch(self, cbuf: Any, length: int, n: int, seg_id: int, base: int, name: str) -> pa.RecordBatch:
        f = self.frames
        check(lib.pe_frames_sizes(n, f.c_pl, f.c_kl, self.sizes, self.sizes + 1, self.nulls),
              f"slice of {name}")
        pbytes, kbytes, nulls = self.sizes[0], self.sizes[1], self.nulls[0]
        alloc = pa.allocate_buffer
        payload, poffs = alloc(pbytes), alloc(8 * (n + 1))
        keys, koffs = alloc(kbytes), alloc(8 * (n + 1))
        validity = alloc((n + 7) // 8) if nulls else None
        seg_ids, offsets = alloc(8 * n), alloc(8 * n)
        fb = ffi.from_buffer
        check(lib.pe_frames_to_columns(
            cbuf, length, n, f.c_fo, f.c_pl, f.c_kl, seg_id, base,
            fb(payload), pbytes, fb("int64_t[]", poffs), fb(keys), kbytes, fb("int64_t[]", koffs),
            fb("uint8_t[]", validity) if validity is not None else ffi.NULL,
            fb("int64_t[]", seg_ids), fb("int64_t[]", offsets)), f"slice of {name}")
        from_buffers = pa.Array.from_buffers
        return pa.RecordBatch.from_arrays([
            from_buffers(pa.large_binary(), n, [None, poffs, payload]),
            from_buffers(pa.large_string(), n, [validity, koffs, keys], null_count=nulls),
            from_buffers(pa.int64(), n, [None, seg_ids]),
            from_buffers(pa.int64(), n, [None, offsets]),
        ], schema=SCHEMA)


def slice_to_arrow(chunks: Iterable[tuple[Any, Any, int, int] | pa.Table], timed: bool = False) -> pa.Table:
    """Build the Table from (segment, framed bytes or memoryview, first offset, write time in
    µs or 0 if unknown) chunks, and tables already in the schema (tiered data read from its
    Parquet columns)."""
    return pa.Table.from_batches(list(slice_batches(chunks, timed)),
                                 schema=TIMED_SCHEMA if timed else SCHEMA)


def slice_batches(chunks: Iterable[tuple[Any, Any, int, int] | pa.Table],
                  timed: bool = False) -> Iterator[pa.RecordBatch]:
    """The record batches of ``slice_to_arrow``, one chunk at a time (memory: one chunk)."""
    cols: FrameColumns | None = None  # its parser's arrays are 3 MiB: only for frames
    for chunk in chunks:
        if isinstance(chunk, pa.Table):
            yield from chunk.to_batches()
            continue
        seg, data, base, write_us = chunk
        if cols is None:
            cols = FrameColumns()
        for batch in cols.batches(seg.name, seg.segment_id, data, base):
            if timed:
                n = batch.num_rows
                times = pa.repeat(pa.scalar(write_us, WRITE_TIME), n) if write_us else pa.nulls(n, WRITE_TIME)
                batch = batch.append_column("write_time", times)
            yield batch
