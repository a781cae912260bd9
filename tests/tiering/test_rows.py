"""A committed range of a segment becomes tier-2 rows that hold exactly what readers read: every
event once, in offset order, with its key, a large event whole, a transaction's events, a byte
stream's bytes; with write times; and a Parquet file of them reads back the same in DuckDB."""

from __future__ import annotations

import time

import duckdb
import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError
from pravega_embedded.tiering.parquetfile import read_segment_file, write_segment_file
from pravega_embedded.tiering.rows import segment_rows
from pravega_embedded.tiering.target import Tier2Target


@pytest.fixture
def store(tmp_path):
    s = pe.open(tmp_path / "s", durability="none", tier2=False)
    s.create_scope("iot")
    yield s
    s.close()


def _segments(store, stream):
    return list(store._engine.streams[f"iot/{stream}"].segments.values())


def test_rows_hold_what_readers_read(store, tmp_path):
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
    target = Tier2Target(str(tmp_path / "t2"))
    total = 0
    for seg in _segments(store, "ev"):
        want = [(e.offset, None if e.routing_key is None else e.routing_key, bytes(e.event))
                for e in store.read_slice("iot", "ev") if e.segment_id == seg.segment_id]
        rows = segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1)
        got = list(zip(rows.offsets, rows.keys, rows.events))
        assert got == want and rows.end == seg.length
        assert all(t0 // 1000 <= t <= t1 // 1000 for t in rows.write_us)
        assert rows.write_us == sorted(rows.write_us)  # never backwards within a segment
        f = write_segment_file(target, "iot", "ev", seg.segment_id, rows)
        assert read_segment_file(target, "iot", "ev", f).column("event").to_pylist() == [e for _, _, e in want]
        total += len(want)
        # a range in the middle, from one event boundary to another
        if len(want) > 10:
            mid = segment_rows(store._engine, seg, want[3][0], want[9][0], fallback_ns=1)
            assert list(zip(mid.offsets, mid.keys, mid.events)) == want[3:9]
            with pytest.raises(CorruptDataError):  # not an event boundary
                segment_rows(store._engine, seg, want[3][0], want[9][0] + 1, fallback_ns=1)
    assert total == 309
    n, big = duckdb.sql(f"SELECT count(*), max(octet_length(event)) FROM read_parquet("
                        f"'{tmp_path}/t2/**/*.parquet', hive_partitioning=1)").fetchall()[0]
    assert (n, big) == (309, 9 << 20)  # the large event is one whole value


def test_byte_stream_rows_are_its_bytes(store, tmp_path):
    b = store.create_byte_stream("iot", "bytes")
    b.write(b"hello ")
    b.write(b"world" * 1000)
    b.write(bytes(range(256)) * (5 << 12))  # over 4 MiB: staged pieces and a MERGE
    b.flush()
    (seg,) = _segments(store, "bytes")
    rows = segment_rows(store._engine, seg, 0, seg.length, fallback_ns=1)
    assert rows.keys == [None] * len(rows.offsets)
    assert b"".join(rows.events) == b"hello " + b"world" * 1000 + bytes(range(256)) * (5 << 12)
    assert [o for o in rows.offsets] == [sum(map(len, rows.events[:i])) for i in range(len(rows.events))]
    f = write_segment_file(Tier2Target(str(tmp_path / "t2")), "iot", "bytes", seg.segment_id, rows)
    assert f.end == seg.length


def test_a_range_past_the_committed_data_is_refused(store):
    store.create_stream("iot", "ev")
    with store.create_writer("iot", "ev") as w:
        w.write_event(b"x")
    (seg,) = _segments(store, "ev")
    with pytest.raises(CorruptDataError):
        segment_rows(store._engine, seg, 0, seg.length + 1, fallback_ns=1)
