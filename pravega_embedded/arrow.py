"""Slices to Arrow: frames gathered into Arrow buffers in C, with no per-event Python work.

Owns: the conversion of a slice's chunks (segment, framed bytes, first offset) into a pyarrow
Table with columns event (large_binary), routing_key (large_string, null when the event had no
key), segment_id (int64) and offset (int64).

Invariants:
  1. Row order is chunk order, and within a chunk offset order (so per-key write order).
  2. The event and key bytes are copied once, by pe_gather_payloads, into Arrow buffers.

Thread-safety: pure function of its input.
"""

from __future__ import annotations

from array import array
from typing import Any, Iterable

import pyarrow as pa
import pyarrow.compute as pc

from ._native import check, ffi, lib
from .errors import CorruptDataError

__all__ = ["slice_to_arrow", "SCHEMA"]

SCHEMA = pa.schema([
    ("event", pa.large_binary()),
    ("routing_key", pa.large_string()),
    ("segment_id", pa.int64()),
    ("offset", pa.int64()),
])
_CAP = 1 << 20


def _batch(data: bytes, seg_id: int, base: int, fo: array, pl: array, kl: array, n: int) -> pa.RecordBatch:
    cbuf = ffi.from_buffer(data)
    c_fo = ffi.from_buffer("uint32_t[]", fo)
    total = sum(pl[:n]) if n < len(pl) else sum(pl)
    payload = bytearray(total)
    poffs = array("q", bytes(8 * (n + 1)))
    check(lib.pe_gather_payloads(cbuf, len(data), n, c_fo, ffi.from_buffer("uint32_t[]", pl),
                                 ffi.from_buffer("int32_t[]", kl), ffi.from_buffer(payload), total, 0,
                                 ffi.from_buffer("int64_t[]", poffs)), "slice to Arrow")
    events = pa.Array.from_buffers(pa.large_binary(), n, [None, pa.py_buffer(poffs), pa.py_buffer(payload)])
    kl_arr = pa.Array.from_buffers(pa.int32(), n, [None, pa.py_buffer(kl)])
    if pc.min(kl_arr).as_py() < 0:
        valid = pc.greater_equal(kl_arr, 0)
        klen = pc.max_element_wise(kl_arr, 0)
        nulls = n - pc.sum(valid.cast(pa.int64())).as_py()
        validity = valid.buffers()[1]
    else:
        klen, nulls, validity = kl_arr, 0, None
    klen_buf = array("I")
    klen_buf.frombytes(klen.buffers()[1].to_pybytes()[: 4 * n])
    ktotal = pc.sum(klen.cast(pa.int64())).as_py() or 0
    keys = bytearray(ktotal)
    koffs = array("q", bytes(8 * (n + 1)))
    minus = array("i", [-1]) * n
    check(lib.pe_gather_payloads(cbuf, len(data), n, c_fo, ffi.from_buffer("uint32_t[]", klen_buf),
                                 ffi.from_buffer("int32_t[]", minus), ffi.from_buffer(keys), ktotal, 0,
                                 ffi.from_buffer("int64_t[]", koffs)), "slice to Arrow")
    keys_arr = pa.Array.from_buffers(pa.large_string(), n, [validity, pa.py_buffer(koffs), pa.py_buffer(keys)],
                                     null_count=nulls)
    offsets = pc.add(pa.Array.from_buffers(pa.uint32(), n, [None, pa.py_buffer(fo)]).cast(pa.int64()), base)
    seg_ids = pa.nulls(n, pa.int64()).fill_null(seg_id)
    return pa.RecordBatch.from_arrays([events, keys_arr, seg_ids, offsets], schema=SCHEMA)


def slice_to_arrow(chunks: Iterable[tuple[Any, bytes, int]]) -> pa.Table:
    """Build the Table from (segment, framed bytes, first offset) chunks."""
    batches = []
    fo = array("I", bytes(4 * _CAP))
    pl = array("I", bytes(4 * _CAP))
    kl = array("i", bytes(4 * _CAP))
    c_fo, c_pl, c_kl = (ffi.from_buffer(t, a) for t, a in
                        (("uint32_t[]", fo), ("uint32_t[]", pl), ("int32_t[]", kl)))
    n_out = ffi.new("uint32_t *")
    consumed = ffi.new("uint64_t *")
    for seg, data, base in chunks:
        pos = 0
        while pos < len(data):
            part = data if pos == 0 else data[pos:]
            check(lib.pe_parse_frames(ffi.from_buffer(part), len(part), _CAP, c_fo, c_pl, c_kl, n_out, consumed),
                  f"slice of {seg.name}")
            n = n_out[0]
            if n == 0:
                raise CorruptDataError(f"slice of {seg.name}: a damaged frame at offset {base + pos}")
            batches.append(_batch(part, seg.segment_id, base + pos, fo[:n], pl[:n], kl[:n], n))
            pos += consumed[0]
    return pa.Table.from_batches(batches, schema=SCHEMA)
