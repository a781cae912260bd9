"""Tier-2 reads check the CRC-32 of every Parquet page themselves (rowgroups.py, the C page walk
of csrc/parquetpages.c): damage anywhere in a page is a CorruptDataError naming the file and
the page, on a local folder (read with pread in C) and on another file system (read in
Python); a page without a checksum, a file cut short, a footer placing chunks outside the
file and a failing read are each refused clearly; the page walk survives any bytes."""

from __future__ import annotations

import os
import uuid
import zlib

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pravega_embedded._native import ffi, lib
from pravega_embedded.errors import CorruptDataError, StorageError
from pravega_embedded.tiering.footer import MAGIC, _Reader, decode, encode, join_footers
from pravega_embedded.tiering.parquetfile import (OpenedFile, SegmentRows, file_rel,
                                                  read_segment_file, write_segment_file)
from pravega_embedded.tiering.rowgroups import group_spans, read_group
from pravega_embedded.tiering.target import Tier2Target

T0 = 1_764_000_000_000_000  # µs
N, SIZE = 3000, 500


@pytest.fixture(params=["local", "memory"])
def target(request, tmp_path):
    if request.param == "local":
        return Tier2Target(str(tmp_path / "tier2"))
    return Tier2Target(f"memory://pages-{uuid.uuid4().hex}")


def random_rows(n: int = N) -> SegmentRows:
    """Incompressible payloads: zstd stores them as they are, so a flipped byte decodes to a
    wrong payload without any complaint from the decompressor; only the page CRC sees it."""
    step = SIZE + 6
    offs = list(range(0, n * step, step))
    return SegmentRows.from_lists(offs, [None] * n, [os.urandom(SIZE) for _ in range(n)],
                                  [T0 + i for i in range(n)], n * step)


def spans_of(data: bytes) -> tuple:
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    n = int.from_bytes(data[-8:-4], "little")
    return group_spans(data[-8 - n:-8], md.num_row_groups, md.num_columns, len(data), "x")


def file_bytes(target: Tier2Target, rel: str) -> bytes:
    with target.open_read(rel) as fh:
        return bytes(fh.read())


def replace_bytes(target: Tier2Target, rel: str, data: bytes) -> None:
    path = target._rel(rel)  # the test rewrites a published file in place, as damage would
    if target.local:
        with open(path, "r+b") as fh:
            fh.write(data)
            fh.truncate()
    else:
        target.fs.pipe_file(path, data)


def event_chunk(data: bytes) -> tuple[int, int]:
    md = pq.ParquetFile(pa.BufferReader(data)).metadata
    col = md.row_group(0).column(2)  # offset, routing_key, event, write_time
    assert col.path_in_schema == "event"
    start = min(col.data_page_offset, col.dictionary_page_offset or col.data_page_offset)
    return start, col.total_compressed_size


def test_a_flipped_byte_in_a_page_is_corrupt_data_naming_the_page(target):
    f = write_segment_file(target, "iot", "s", 0, random_rows())
    rel = file_rel("iot", "s", f)
    good = read_segment_file(target, "iot", "s", f)
    data = bytearray(file_bytes(target, rel))
    start, length = event_chunk(bytes(data))
    data[start + length - 100] ^= 0x10  # inside the chunk's last page's data
    replace_bytes(target, rel, bytes(data))
    with pytest.raises(CorruptDataError, match=r"the page at byte \d+ of row group 0 is damaged"):
        read_segment_file(target, "iot", "s", f)
    # the same bytes decode without complaint when nobody checks the page: the check is what
    # stands between the damage and a wrong payload handed to the reader
    unchecked = pq.ParquetFile(pa.BufferReader(bytes(data))).read()
    assert unchecked.column("event") != good.column("event")
    opened = OpenedFile(target, "iot", "s", f)
    try:
        with pytest.raises(CorruptDataError, match="is damaged"):
            opened.group_at(f.first)
    finally:
        opened.close()


def test_reads_of_undamaged_files_equal_pyarrows_read(target):
    f = write_segment_file(target, "iot", "s", 0, random_rows())
    rel = file_rel("iot", "s", f)
    want = pq.ParquetFile(pa.BufferReader(file_bytes(target, rel))).read()
    got = read_segment_file(target, "iot", "s", f)
    assert got.equals(want.replace_schema_metadata(None))
    opened = OpenedFile(target, "iot", "s", f)
    try:
        assert opened.group_at(f.first).equals(want.replace_schema_metadata(None))
    finally:
        opened.close()


def test_a_file_cut_short_after_its_footer_was_read_is_corrupt_data(target):
    f = write_segment_file(target, "iot", "s", 0, random_rows())
    rel = file_rel("iot", "s", f)
    data = file_bytes(target, rel)
    opened = OpenedFile(target, "iot", "s", f)  # footer read and checked
    try:
        opened.close()
        replace_bytes(target, rel, data[:len(data) // 2])
        with pytest.raises(CorruptDataError):
            opened.group_at(f.first)
    finally:
        opened.close()


def test_a_failing_read_is_a_storage_error(tmp_path):
    target = Tier2Target(str(tmp_path / "tier2"))
    f = write_segment_file(target, "iot", "s", 0, random_rows(200))
    rel = file_rel("iot", "s", f)
    fh = target.open_read(rel)
    md = pq.ParquetFile(fh).metadata
    spans = spans_of(file_bytes(target, rel))
    folder = os.open(str(tmp_path), os.O_RDONLY)
    try:
        os.dup2(folder, fh.fileno())  # the handle now reads a folder: pread fails (EISDIR)
        with pytest.raises(StorageError, match="read a tier-2 file"):
            read_group(fh, md, spans[0], "x")
    finally:
        os.close(folder)
        fh.close()


def test_a_footer_placing_chunks_outside_the_file_is_corrupt_data(tmp_path):
    target = Tier2Target(str(tmp_path / "tier2"))
    f = write_segment_file(target, "iot", "s", 0, random_rows(200))
    data = file_bytes(target, file_rel("iot", "s", f))
    n = int.from_bytes(data[-8:-4], "little")
    moved = encode(join_footers([decode(data[-8 - n:-8])], [len(data) * 2]))
    with pytest.raises(CorruptDataError, match="outside the file"):
        group_spans(moved, 1, 4, len(data), "x")


# ---------------------------------------------------------------------------- the C walk
def check(buf: bytes, chunks: list[int]) -> tuple[int, int, int]:
    pages, bad = ffi.new("uint32_t *"), ffi.new("uint64_t *")
    status = lib.pe_parquet_check_pages(ffi.from_buffer("uint8_t[]", buf), len(buf),
                                        ffi.new("uint64_t[]", chunks), len(chunks) // 2, pages, bad)
    return status, pages[0], bad[0]


def small_file(checksums: bool = True) -> tuple[bytes, list[int]]:
    table = pa.table({"k": pa.array([f"key-{i % 5}" for i in range(2000)]),
                      "v": pa.array([os.urandom(40) for _ in range(2000)])})
    sink = pa.BufferOutputStream()
    pq.write_table(table, sink, compression="zstd", write_page_checksum=checksums,
                   data_page_size=4096, row_group_size=1000, use_dictionary=["k"],
                   write_batch_size=64)
    data = sink.getvalue().to_pybytes()
    chunks = [c for s in spans_of(data) for c in s.chunks]
    return data, chunks


def reference_pages(data: bytes, chunks: list[int]) -> int:
    """The pages of the chunks, walked in Python with the footer codec's reader; each page's
    crc compared with zlib's CRC-32 of its data."""
    pages = 0
    for start, length in zip(chunks[0::2], chunks[1::2]):
        r = _Reader(data[start:start + length])
        while r.pos < len(r.buf):
            header = r.struct(1)
            size, crc = header.get(3).value, header.get(4).value
            assert zlib.crc32(r.take(size)) == crc & 0xFFFFFFFF
            pages += 1
    return pages


def test_every_page_of_every_chunk_is_checked():
    data, chunks = small_file()
    status, pages, _ = check(data, chunks)
    assert status == lib.PE_OK
    assert pages == reference_pages(data, chunks) >= 16  # 2 row groups of 2 pages of k, 6+ of v


def test_a_page_without_a_checksum_is_refused():
    data, chunks = small_file(checksums=False)
    status, _, bad = check(data, chunks)
    assert status == lib.PE_ERR_CORRUPT and bad == chunks[0]


def test_chunks_outside_the_buffer_are_invalid_arguments():
    data, chunks = small_file()
    assert check(data, [len(data) - 10, 11])[0] == lib.PE_ERR_INVAL
    assert check(data, [2 ** 64 - 1, 2])[0] == lib.PE_ERR_INVAL


def test_nesting_past_the_cap_is_corrupt_data():
    # field 5 (a struct) of a page header, then structs in structs past PE_PARQUET_MAX_DEPTH
    header = bytes([0x15, 0x00, 0x15, 0x00, 0x15, 0x00, 0x15, 0x00]) + bytes([0x1C]) * 40
    assert check(header + bytes(60), [0, len(header) + 60])[0] == lib.PE_ERR_CORRUPT


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_the_page_walk_survives_any_damage(data):
    base, chunks = _BASE
    how = data.draw(st.sampled_from(["flip", "cut", "random", "splice", "ranges"]))
    buf = bytearray(base)
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 4))):
            i = data.draw(st.integers(chunks[0], len(buf) - 1))
            buf[i] ^= data.draw(st.integers(1, 255))
    elif how == "cut":
        buf = buf[:data.draw(st.integers(chunks[0], len(buf)))]
        chunks = [x for s, n in zip(chunks[0::2], chunks[1::2]) for x in (s, min(n, max(0, len(buf) - s)))
                  if s <= len(buf)]
    elif how == "random":
        i = data.draw(st.integers(chunks[0], len(buf) - 1))
        blob = data.draw(st.binary(min_size=1, max_size=64))
        buf[i:i + len(blob)] = blob
    elif how == "splice":
        a, b = sorted(data.draw(st.lists(st.integers(chunks[0], len(buf)), min_size=2, max_size=2)))
        buf = buf[:a] + buf[b:] + buf[a:b]
    else:
        s = data.draw(st.integers(0, len(buf)))
        chunks = [s, data.draw(st.integers(0, len(buf) - s))]
    chunks = chunks[:len(chunks) // 2 * 2]
    if any(s + n > len(buf) for s, n in zip(chunks[0::2], chunks[1::2])):
        return  # the caller bounds chunks by the file (group_spans); INVAL is tested above
    status, _, bad = check(bytes(buf), chunks)
    assert status in (lib.PE_OK, lib.PE_ERR_CORRUPT)
    if status == lib.PE_ERR_CORRUPT:  # named at a page of a chunk it was given
        assert any(s <= bad < s + n for s, n in zip(chunks[0::2], chunks[1::2]))


_BASE = small_file()


def test_reading_checks_pages_whose_header_straddles_a_read_block(tmp_path):
    """pe_parquet_read_pages reads PE_PARQUET_READ_BLOCK bytes at a time, counted from ``lo``:
    a ``lo`` chosen so that a block ends one byte into a page header makes it parse that
    header again once the next block is in."""
    n = 40_000
    table = pa.table({"k": pa.array([os.urandom(12).hex() for _ in range(n)]),
                      "v": pa.array([os.urandom(24) for _ in range(n)])})
    path = tmp_path / "f.parquet"
    pq.write_table(table, path, compression="zstd", write_page_checksum=True, use_dictionary=False,
                   data_page_size=4096, write_batch_size=64)
    data = path.read_bytes()
    (span,) = spans_of(data)
    k_start, k_len, v_start, v_len = span.chunks
    block = lib.PE_PARQUET_READ_BLOCK
    assert k_len > 64 * 1024 and v_len > block  # the v chunk starts late enough to move lo
    headers = []
    r = _Reader(data[v_start:v_start + v_len])
    while r.pos < len(r.buf):
        headers.append(v_start + r.pos)
        r.take(r.struct(1).get(3).value)
    p = next(h for h in headers if block < h + 1 <= block + v_start)
    lo = p + 1 - block  # the first block ends one byte into the header at p
    assert 0 <= lo <= v_start
    buf = pa.allocate_buffer(span.hi)
    pages, bad = ffi.new("uint32_t *"), ffi.new("uint64_t *")
    with open(path, "rb") as fh:
        status = lib.pe_parquet_read_pages(
            fh.fileno(), ffi.from_buffer("uint8_t[]", buf, require_writable=True), span.hi, lo,
            span.hi, ffi.new("uint64_t[]", [v_start, v_len]), 1, pages, bad)
    assert status == lib.PE_OK and pages[0] == len(headers)
    assert buf.to_pybytes()[lo:] == data[lo:span.hi]


# ------------------------------------------------------------------ damaged footers
def _rewrite_footer(target: Tier2Target, rel: str, edit) -> None:
    data = file_bytes(target, rel)
    n = int.from_bytes(data[-8:-4], "little")
    footer = decode(data[-8 - n:-8])
    edit(footer)
    raw = encode(footer)
    replace_bytes(target, rel, data[:-8 - n] + raw + len(raw).to_bytes(4, "little") + MAGIC)


def _columns(footer, group=0):
    return footer.get(4).value.items[group].get(1).value.items


@pytest.mark.parametrize("edit", [
    lambda ft: _columns(ft).append(_columns(ft)[3]),  # a column chunk more than the schema has
    lambda ft: _columns(ft).pop(),  # one fewer
    lambda ft: _columns(ft).__setitem__(slice(1, 3), [_columns(ft)[2], _columns(ft)[1]]),  # swapped
    lambda ft: _columns(ft, 1).__setitem__(0, _columns(ft, 0)[0]),  # two groups over the same bytes
    lambda ft: ft.get(6).__setattr__("value", b"parquet-mr version 1.2.8"),  # an old writer's
], ids=["extra", "fewer", "swapped", "overlapping-groups", "old-writer"])
def test_a_damaged_footer_is_corrupt_data_not_a_crash(target, edit):
    """pyarrow's accessors of a column chunk's metadata abort the interpreter on some of these;
    the spans come from the footer parsed in C instead."""
    rows = random_rows(600)
    rows = SegmentRows(rows.first, rows.end, (g for t in rows.groups for g in (t.slice(0, 300), t.slice(300))))
    f = write_segment_file(target, "iot", "s", 0, rows)
    rel = file_rel("iot", "s", f)
    _rewrite_footer(target, rel, edit)
    with pytest.raises(CorruptDataError):
        read_segment_file(target, "iot", "s", f)
    with pytest.raises(CorruptDataError):
        OpenedFile(target, "iot", "s", f).group_at(f.first)


def test_a_page_header_longer_than_the_cap_is_refused_without_rereading_it(tmp_path):
    """A header that never ends (a list of 3 Mi i32) is damage at PE_PARQUET_MAX_HEADER, read
    block by block once, not parsed again for every block of it."""
    n = 3 << 20
    header = bytes([0x19, 0xF5]) + bytes([0x80 | (n & 0x7F), 0x80 | ((n >> 7) & 0x7F), n >> 14]) + bytes(n)
    path = tmp_path / "long"
    path.write_bytes(header)
    buf = pa.allocate_buffer(len(header))
    pages, bad = ffi.new("uint32_t *"), ffi.new("uint64_t *")
    chunks = ffi.new("uint64_t[]", [0, len(header)])
    with open(path, "rb") as fh:
        status = lib.pe_parquet_read_pages(fh.fileno(), ffi.from_buffer("uint8_t[]", buf, require_writable=True),
                                           len(header), 0, len(header), chunks, 1, pages, bad)
    assert status == lib.PE_ERR_CORRUPT and bad[0] == 0
    assert check(header, [0, len(header)])[0] == lib.PE_ERR_CORRUPT
