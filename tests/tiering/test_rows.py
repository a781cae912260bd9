"""A committed range of a segment becomes tier-2 rows that hold exactly what readers read: every
event once, in offset order, with its key, a large event whole, a transaction's events, a byte
stream's bytes; with write times; and a Parquet file of them reads back the same in DuckDB."""

from __future__ import annotations

import time

import duckdb
import pyarrow as pa
import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError
from pravega_embedded.segsource import SegmentSource
from pravega_embedded.tiering.parquetfile import read_segment_file, write_segment_file
from pravega_embedded.tiering.rows import segment_rows
from pravega_embedded.tiering.target import Tier2Target


@pytest.fixture(params=["cached", "from disk"])
def store(tmp_path, request):
    """A store whose sections are read from the tail cache, or (no tail cache) straight from
    their journal files, their index entries from LMDB once a checkpoint persisted them."""
    cache = {} if request.param == "cached" else {"tail_cache_bytes": 0}
    s = pe.open(tmp_path / "s", durability="none", tier2=False, **cache)
    s.create_scope("iot")
    yield s
    s.close()


class Cols:
    """The columns of SegmentRows as Python lists."""

    def __init__(self, rows):
        t = pa.concat_tables(list(rows.groups))
        self.offsets = t.column("offset").to_pylist()
        self.keys = t.column("routing_key").to_pylist()
        self.events = t.column("event").to_pylist()
        self.write_us = t.column("write_time").cast("int64").to_pylist()
        self.end = rows.end


def _segments(store, stream):
    return list(store._engine.streams[f"iot/{stream}"].segments.values())


def test_rows_hold_what_readers_read(store, tmp_path, monkeypatch):
    store.create_stream("iot", "ev", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    t0 = time.time_ns()
    with store.create_writer("iot", "ev", writer_id="w") as w:
        for i in range(300):
            w.write_event(b"e%03d" % i, routing_key=None if i % 4 == 0 else f"k{i % 5}")
        w.write_event(b"B" * (9 << 20), routing_key="big")
        w.write_event(b"", routing_key="k1")
    tx = store.create_transactional_writer("iot", "ev", writer_id="t").begin_txn()
    for i in range(7):
        tx.write_event(b"t%d" % i, routing_key=f"k{i}")
    tx.commit()
    t1 = time.time_ns()
    store.checkpoint()  # the index entries go to LMDB (and, with no tail cache, leave memory)
    reads = []
    real_into = SegmentSource.read_section_into

    def counted(self, entry, buf):
        reads.append(entry)
        return real_into(self, entry, buf)
    monkeypatch.setattr(SegmentSource, "read_section_into", counted)
    framed = []  # reads the way readers read (frames parsed again to count them)
    real_read = SegmentSource.read

    def counted_read(self, offset, limit, *, copy=True):
        framed.append(offset)
        return real_read(self, offset, limit, copy=copy)
    monkeypatch.setattr(SegmentSource, "read", counted_read)
    target = Tier2Target(str(tmp_path / "t2"))
    total = 0
    for seg in _segments(store, "ev"):
        want = [(e.offset, None if e.routing_key is None else e.routing_key, bytes(e.event))
                for e in store.read_slice("iot", "ev") if e.segment_id == seg.segment_id]
        rows = segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1)
        framed.clear()
        c = Cols(rows)
        # every whole section, cached or not, is taken as it is; only the large event is read
        # as readers read it (it comes back whole)
        assert len(framed) <= 1
        got = list(zip(c.offsets, c.keys, c.events))
        assert got == want and c.end == seg.length
        assert all(t0 // 1000 <= t <= t1 // 1000 for t in c.write_us)
        assert c.write_us == sorted(c.write_us)  # never backwards within a segment
        f = write_segment_file(target, "iot", "ev", seg.segment_id,
                               segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1))
        assert read_segment_file(target, "iot", "ev", f).column("event").to_pylist() == [e for _, _, e in want]
        total += len(want)
        # a range in the middle, from one event boundary to another
        if len(want) > 10:
            mid = Cols(segment_rows(store._engine, seg, want[3][0], want[9][0], fallback_ns=1))
            assert list(zip(mid.offsets, mid.keys, mid.events)) == want[3:9]
            with pytest.raises(CorruptDataError):  # not an event boundary
                Cols(segment_rows(store._engine, seg, want[3][0], want[9][0] + 1, fallback_ns=1))
    assert total == 309
    if store._engine.index.tail_cache_bytes == 0:  # whole sections straight into the buffer
        assert len(reads) > 10
    n, big = duckdb.sql(f"SELECT count(*), max(octet_length(event)) FROM read_parquet("
                        f"'{tmp_path}/t2/**/*.parquet', hive_partitioning=1)").fetchall()[0]
    assert (n, big) == (309, 9 << 20)  # the large event is one whole value


def test_a_large_event_longer_than_a_row_group_after_a_section_read_whole(store, monkeypatch):
    """A large event's first section, read whole into the row group's buffer, turns out to
    start a frame longer than itself: the event is taken whole instead, into a buffer as large
    as it when it is longer than a row group."""
    from pravega_embedded.tiering import rows as rows_mod

    monkeypatch.setattr(rows_mod, "ROW_GROUP_BYTES", 1 << 20)
    store.create_stream("iot", "le")
    big = bytes(range(256)) * (9 << 12)  # 9 MiB: a large event, longer than a row group
    with store.create_writer("iot", "le", writer_id="w") as w:
        w.write_event(b"before", routing_key="k")
        w.flush()
        w.write_event(big, routing_key="k")
        w.write_event(b"after", routing_key="k")
    store.checkpoint()
    (seg,) = _segments(store, "le")
    c = Cols(segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1))
    assert c.events == [b"before", big, b"after"] and c.end == seg.length
    assert c.offsets == [e.offset for e in store.read_slice("iot", "le")]


def test_a_range_truncated_away_during_a_copy_is_truncated_data(tmp_path):
    """A truncation that dropped the index entries of the range a copy reads (retention racing
    the tierer; the sections no longer in the tail cache) is TruncatedDataError, which the
    tierer retries from the new head, never a report of damage."""
    from pravega_embedded.errors import TruncatedDataError

    with pe.open(tmp_path / "s", durability="none", tier2=False, tail_cache_bytes=0) as store:
        store.create_scope("iot")
        store.create_stream("iot", "tr")
        with store.create_writer("iot", "tr", writer_id="w") as w:
            for i in range(40):
                w.write_event(b"e%03d" % i, routing_key="k")
                w.flush()  # one section each
        store.checkpoint()
        (seg,) = _segments(store, "tr")
        length = seg.length
        mid = list(store.read_slice("iot", "tr"))[20]
        store.truncate_stream("iot", "tr", pe.StreamCut.of("iot", "tr", {seg.segment_id: mid.offset}))
        with pytest.raises(TruncatedDataError):
            list(segment_rows(store._engine, seg, 0, length, fallback_ns=1).groups)


def test_byte_stream_rows_are_its_bytes(store, tmp_path):
    b = store.create_byte_stream("iot", "bytes")
    b.write(b"hello ")
    b.write(b"world" * 1000)
    b.write(bytes(range(256)) * (5 << 12))  # over 4 MiB: staged pieces and a MERGE
    b.flush()
    (seg,) = _segments(store, "bytes")
    rows = segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1)
    c = Cols(rows)
    assert c.keys == [None] * len(c.offsets)
    assert b"".join(c.events) == b"hello " + b"world" * 1000 + bytes(range(256)) * (5 << 12)
    assert c.offsets == [sum(map(len, c.events[:i])) for i in range(len(c.events))]
    f = write_segment_file(Tier2Target(str(tmp_path / "t2")), "iot", "bytes", seg.segment_id,
                           segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1))
    assert f.end == seg.length


def test_a_range_past_the_committed_data_is_refused(store):
    store.create_stream("iot", "ev")
    with store.create_writer("iot", "ev") as w:
        w.write_event(b"x")
    (seg,) = _segments(store, "ev")
    with pytest.raises(CorruptDataError):
        segment_rows(store._engine, seg, 0, seg.length + 1, fallback_ns=1)


def test_a_routing_key_that_is_not_utf8_is_corrupt_data():
    """Keys reach tier 2 as Parquet strings: bytes that are not UTF-8 (only damage can make
    them) are refused, not written as an invalid string column."""
    import struct
    from types import SimpleNamespace

    from pravega_embedded.tiering.rows import _EventRows

    def frame(key: bytes, payload: bytes) -> bytes:
        return struct.pack("<IH", len(payload), len(key)) + key + payload

    seg = SimpleNamespace(name="iot/ev/0", segment_id=0)
    ok = _EventRows(seg, "test")
    ok.add(frame(b"k\xc3\xa9", b"one") + frame(b"k", b"two"), 0, 5)
    (t,) = ok.take()
    assert t.column("routing_key").to_pylist() == ["k\u00e9", "k"] and t.column("offset").to_pylist() == [0, 12]
    bad = _EventRows(seg, "test")
    bad.add(frame(b"k\xff", b"one"), 0, 5)
    with pytest.raises(CorruptDataError, match="not UTF-8"):
        list(bad.take())


def test_row_groups_are_bounded_by_bytes_and_a_failed_read_publishes_nothing(store, tmp_path, monkeypatch):
    """Big events make row groups of about ROW_GROUP_BYTES (a cold read of one event loads one
    group, not 128 Ki rows); if reading the journal fails mid-file, no file is published."""
    import pyarrow.parquet as pq

    from pravega_embedded.tiering import rows as rows_mod
    from pravega_embedded.tiering.layout import ROW_GROUP_BYTES

    monkeypatch.setattr(rows_mod, "ROW_GROUP_BYTES", 1 << 20)
    store.create_stream("iot", "big")
    payloads = [bytes([i % 251]) * (100 << 10) for i in range(40)]  # 4 MB in 100 KiB events
    with store.create_writer("iot", "big", writer_id="w") as w:
        for p in payloads:
            w.write_event(p, routing_key="k")
    (seg,) = _segments(store, "big")
    target = Tier2Target(str(tmp_path / "t2"))
    f = write_segment_file(target, "iot", "big", seg.segment_id,
                           segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1))
    pf = pq.ParquetFile(next((tmp_path / "t2").rglob("*.parquet")))
    sizes = [pf.metadata.row_group(i).num_rows for i in range(pf.metadata.num_row_groups)]
    assert sum(sizes) == 40 and len(sizes) >= 4 and max(sizes) <= 11  # about 1 MiB each
    assert read_segment_file(target, "iot", "big", f).column("event").to_pylist() == payloads
    assert ROW_GROUP_BYTES >= 8 << 20  # the default is far above one section

    boom = CorruptDataError("damaged journal section (injected)")
    real = rows_mod.SegmentSource.read
    calls = []

    fail_at = [None]

    def failing(self, offset, limit, *, copy=True):
        calls.append(offset)
        if len(calls) == fail_at[0]:
            raise boom
        return real(self, offset, limit, copy=copy)

    real_into = rows_mod.SegmentSource.read_section_into

    def failing_into(self, entry, buf):  # a whole section not in the tail cache
        calls.append(entry.start)
        if len(calls) == fail_at[0]:
            raise boom
        return real_into(self, entry, buf)

    real_entries = rows_mod.SegmentSource.entries

    def failing_entries(self, offset, stop, limit):  # a run of sections (a tail cache's bytes too)
        calls.append(offset)
        if len(calls) == fail_at[0]:
            raise boom
        return real_entries(self, offset, stop, limit)

    monkeypatch.setattr(rows_mod.SegmentSource, "read", failing)
    monkeypatch.setattr(rows_mod.SegmentSource, "read_section_into", failing_into)
    monkeypatch.setattr(rows_mod.SegmentSource, "entries", failing_entries)
    list(segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1).groups)
    assert len(calls) >= 3
    fail_at[0], calls[:] = len(calls), []  # the last read: after groups were encoded
    other = Tier2Target(str(tmp_path / "t3"))
    with pytest.raises(CorruptDataError, match="injected"):
        write_segment_file(other, "iot", "big", seg.segment_id,
                           segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1))
    assert not list((tmp_path / "t3").rglob("*.parquet"))
