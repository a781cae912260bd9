"""Readers and slices: exactly-once per-key order, timeouts and wake-ups, bounded reads, EventRead
fields and EventPointers, closed readers, deleted streams, Arrow and pandas."""

from __future__ import annotations

import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors


def _stream(store, n=1, scope="r", stream="t"):
    store.create_scope(scope, exist_ok=True)
    store.create_stream(scope, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)))


def _drain(reader):
    out = []
    while (ev := reader.read_next_event(timeout=0)) is not None:
        out.append(ev)
    return out


def _write_keyed(store, n, keys=7, scope="r", stream="t", writer_id=None, batch=50):
    with store.create_writer(scope, stream, writer_id=writer_id) as w:
        for i in range(n):
            w.write_event(b"k%d:%d" % (i % keys, i), routing_key=f"k{i % keys}")
            if i % batch == batch - 1:
                w.flush()


def _per_key(evs):
    out: dict[str, list[bytes]] = {}
    for e in evs:
        out.setdefault(e.routing_key, []).append(e.event)
    return out


def test_read_back_exactly_once_in_per_key_order(pe_store):
    _stream(pe_store, 4)
    _write_keyed(pe_store, 1000)
    with pe_store.create_writer("r", "t") as w:  # plus batches
        for b in range(10):
            w.write_events([b"k%d:b%d-%d" % (b % 3, b, j) for j in range(5)], routing_key=f"k{b % 3}")
    evs = _drain(pe_store.create_reader("r", "t"))
    assert len(evs) == 1050 and len({(e.segment_id, e.offset) for e in evs}) == 1050
    expected: dict[str, list[bytes]] = {}
    for i in range(1000):
        expected.setdefault(f"k{i % 7}", []).append(b"k%d:%d" % (i % 7, i))
    for b in range(10):
        expected[f"k{b % 3}"] += [b"k%d:b%d-%d" % (b % 3, b, j) for j in range(5)]
    assert _per_key(evs) == expected


def test_read_timeout_on_an_empty_stream_returns_none(pe_store):
    _stream(pe_store, 2)
    r = pe_store.create_reader("r", "t")
    assert r.read_next_event(timeout=0.2) is None
    assert r.read_next_event(timeout=0) is None
    with pe_store.create_writer("r", "t") as w:
        w.write_event(b"a", routing_key="k")
    assert r.read_next_event(timeout=0.2).event == b"a"
    assert r.read_next_event(timeout=0.2) is None


def test_blocked_reader_wakes_when_a_writer_flushes(pe_store):
    _stream(pe_store, 2)
    r = pe_store.create_reader("r", "t")
    waiting, got = threading.Event(), []

    def read():
        waiting.set()
        got.append(r.read_next_event(timeout=30))

    t = threading.Thread(target=read)
    t.start()
    assert waiting.wait(10)
    w = pe_store.create_writer("r", "t", linger=60)
    w.write_event(b"wake-up", routing_key="k")
    w.flush()
    t.join(20)
    assert not t.is_alive()
    assert got and got[0] is not None and got[0].event == b"wake-up"
    w.close()


def test_reader_without_timeout_wakes_on_write(durable_store):
    s = durable_store
    _stream(s)
    r = s.create_reader("r", "t")
    got = []
    t = threading.Thread(target=lambda: got.append(r.read_next_event()))
    t.start()
    with s.create_writer("r", "t") as w:
        w.write_events([b"1", b"2"], routing_key="k")
    t.join(20)
    assert not t.is_alive() and got[0].event == b"1"
    assert r.read_next_event(0).event == b"2"


def test_bounded_reader_yields_exactly_the_events_between_the_cuts(pe_store):
    _stream(pe_store, 3)
    _write_keyed(pe_store, 100)
    a = pe_store.stream_info("r", "t").tail
    _write_keyed(pe_store, 200)
    b = pe_store.stream_info("r", "t").tail
    _write_keyed(pe_store, 50)
    all_evs = list(pe_store.read_slice("r", "t"))
    ad, bd = a.as_dict(), b.as_dict()
    between = {(e.segment_id, e.offset) for e in all_evs if ad[e.segment_id] <= e.offset < bd[e.segment_id]}
    assert len(between) == 200
    r = pe_store.create_reader("r", "t", start=a, end=b)
    evs = _drain(r)
    assert {(e.segment_id, e.offset) for e in evs} == between and len(evs) == 200
    assert r.read_next_event(timeout=None) is None  # the end: returns at once, never blocks
    assert r.read_next_event(timeout=1) is None
    assert r.position() == b
    assert {(e.segment_id, e.offset) for e in pe_store.read_slice("r", "t", start=a, end=b)} == between
    # head -> a, and a -> tail
    assert len(_drain(pe_store.create_reader("r", "t", end=a))) == 100
    assert len(_drain(pe_store.create_reader("r", "t", start=a))) == 250
    assert list(pe_store.read_slice("r", "t", start=a, end=a)) == []
    assert _drain(pe_store.create_reader("r", "t", start=b, end=b)) == []


def test_reader_on_a_sealed_stream_returns_none_at_the_end(pe_store):
    _stream(pe_store, 2)
    _write_keyed(pe_store, 30)
    pe_store.seal_stream("r", "t")
    r = pe_store.create_reader("r", "t")
    got, done = [], threading.Event()

    def read_all():
        while (ev := r.read_next_event(timeout=None)) is not None:
            got.append(ev)
        done.set()

    t = threading.Thread(target=read_all, daemon=True)
    t.start()
    t.join(20)
    assert done.is_set() and len(got) == 30
    again = list(pe_store.create_reader("r", "t"))  # iteration ends at the end of a sealed stream
    assert sorted(again) == sorted(got) == sorted(pe_store.read_slice("r", "t"))


def test_waiting_reader_returns_none_when_the_stream_is_sealed(pe_store):
    _stream(pe_store)
    r = pe_store.create_reader("r", "t")
    got = []
    t = threading.Thread(target=lambda: got.append(r.read_next_event(timeout=None)), daemon=True)
    t.start()
    t.join(0.2)
    pe_store.seal_stream("r", "t")
    t.join(20)
    assert not t.is_alive() and got == [None]


def test_event_read_fields_and_fetch_event(pe_store):
    _stream(pe_store, 2)
    with pe_store.create_writer("r", "t") as w:
        w.write_event(b"keyed", routing_key="sensor-7")
        w.write_event(b"keyless")
        w.write_event(b"", routing_key="empty-event")
    evs = list(pe_store.read_slice("r", "t"))
    by_event = {e.event: e for e in evs}
    assert set(by_event) == {b"keyed", b"keyless", b""}
    segs = {s.segment_id for s in pe_store.stream_info("r", "t").segments}
    for e in evs:
        assert e.segment_id in segs and e.offset >= 0 and e.scope == "r" and e.stream == "t"
        p = e.event_pointer
        assert isinstance(p, pe.EventPointer)
        assert (p.scope, p.stream, p.segment_id, p.offset) == ("r", "t", e.segment_id, e.offset)
        again = pe_store.fetch_event(p)
        assert (again.event, again.routing_key, again.segment_id, again.offset) == \
            (e.event, e.routing_key, e.segment_id, e.offset)
        assert pe_store.fetch_event(pe.EventPointer.from_bytes(p.to_bytes())).event == e.event
    assert by_event[b"keyed"].routing_key == "sensor-7"
    assert by_event[b"keyless"].routing_key is None
    assert by_event[b""].routing_key == "empty-event"
    r = pe_store.create_reader("r", "t")
    assert sorted(_drain(r), key=lambda e: (e.segment_id, e.offset)) == \
        sorted(evs, key=lambda e: (e.segment_id, e.offset))


def test_event_pointer_bytes_round_trip(pe_store):
    p = pe.EventPointer(scope="s" * 255, stream="t", segment_id=(3 << 32) | 7, offset=2**40, length=99)
    b = p.to_bytes()
    assert b.startswith(b"PEP1") and pe.EventPointer.from_bytes(b) == p
    assert pe.EventPointer.from_bytes(bytearray(b)) == p and pe.EventPointer.from_bytes(memoryview(b)) == p


GOOD_PTR = pe.EventPointer(scope="s", stream="t", segment_id=0, offset=0, length=10).to_bytes()


@pytest.mark.parametrize("bad", [
    b"", b"PEP1", b"\0" * 26, GOOD_PTR[:-1], GOOD_PTR + b"x", b"PEP2" + GOOD_PTR[4:],
    GOOD_PTR[:24] + b"\x02\x01" + b"..t", GOOD_PTR[:24] + b"\x01\x01" + b"_t", GOOD_PTR[:24] + b"\x01\x01" + b"s/",
    GOOD_PTR[:24] + b"\x00\x02" + b"st", GOOD_PTR[:24] + b"\x02\x01" + "é".encode(), None, "PEP1", 5, [1, 2],
], ids=lambda b: repr(b)[:30])
def test_garbage_event_pointer_bytes(bad):
    with pytest.raises(errors.InvalidEventPointerError):
        pe.EventPointer.from_bytes(bad)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=80) | st.builds(lambda t: GOOD_PTR[:26] + t, st.binary(max_size=4)))
def test_random_event_pointer_bytes(data):
    try:
        p = pe.EventPointer.from_bytes(data)
    except errors.InvalidEventPointerError:
        return
    assert p.to_bytes() == data


def test_fetch_event_refuses_bad_pointers(pe_store):
    _stream(pe_store)
    with pe_store.create_writer("r", "t") as w:
        w.write_events([b"first-event", b"second"], routing_key="k")
    e = list(pe_store.read_slice("r", "t"))[1]
    p = e.event_pointer
    for bad in (
        pe.EventPointer(scope="r", stream="t", segment_id=0, offset=p.offset + 1, length=p.length),
        pe.EventPointer(scope="r", stream="t", segment_id=0, offset=p.offset, length=p.length + 1),
        pe.EventPointer(scope="r", stream="t", segment_id=0, offset=p.offset, length=p.length - 1),
        pe.EventPointer(scope="r", stream="t", segment_id=0, offset=10**9, length=p.length),
    ):
        with pytest.raises(errors.InvalidEventPointerError):
            pe_store.fetch_event(bad)
    with pytest.raises(errors.SegmentNotFoundError):
        pe_store.fetch_event(pe.EventPointer(scope="r", stream="t", segment_id=5, offset=0, length=8))
    with pytest.raises(errors.StreamNotFoundError):
        pe_store.fetch_event(pe.EventPointer(scope="r", stream="x", segment_id=0, offset=0, length=8))
    with pytest.raises(errors.InvalidEventPointerError):
        pe_store.fetch_event(p.to_bytes())
    pe_store.truncate_stream("r", "t", pe_store.stream_info("r", "t").tail)
    with pytest.raises(errors.TruncatedDataError):
        pe_store.fetch_event(p)


def test_closed_reader_refuses_reads(pe_store):
    _stream(pe_store)
    r = pe_store.create_reader("r", "t")
    r.close()
    r.close()  # idempotent
    assert r.closed
    with pytest.raises(errors.ReaderClosedError) as info:
        r.read_next_event(timeout=0)
    assert "r/t" in str(info.value)
    with pe_store.create_reader("r", "t") as r2:
        pass
    assert r2.closed
    with pytest.raises(errors.ReaderClosedError):
        r2.read_next_event(timeout=0)


def test_closed_reader_refuses_reads_also_with_events_fetched_ahead(pe_store):
    """Library bug: read_next_event() first returns events buffered from the last chunk, so a
    closed reader keeps returning events (reader.py, read_next_event: check _closed first)."""
    _stream(pe_store)
    with pe_store.create_writer("r", "t") as w:
        w.write_events([b"e%d" % i for i in range(10)], routing_key="k")
    r = pe_store.create_reader("r", "t")
    assert r.read_next_event(timeout=0).event == b"e0"
    r.close()
    with pytest.raises(errors.ReaderClosedError):
        r.read_next_event(timeout=0)



@pytest.mark.parametrize("closing", ["reader", "store"])
def test_position_after_close_is_just_after_the_last_event_returned(store_path, closing):
    """Library bug (found by the torture run): close() dropped the events fetched ahead without
    moving the position back, so position() named the end of the fetched chunk and a reader
    resumed there skipped the rest of it."""
    store = pe.open(store_path)
    _stream(store)
    with store.create_writer("r", "t") as w:
        w.write_events([b"e%d" % i for i in range(10)], routing_key="k")  # one record, one chunk
    r = store.create_reader("r", "t")
    assert r.read_next_event(timeout=1).event == b"e0"
    before = r.position()
    if closing == "reader":
        r.close()
    store.close()
    assert r.position() == before
    with pe.open(store_path) as store:
        r2 = store.create_reader("r", "t", start=r.position())
        assert [ev.event for ev in _drain(r2)] == [b"e%d" % i for i in range(1, 10)]

def test_close_wakes_a_blocked_reader(pe_store):
    _stream(pe_store)
    r = pe_store.create_reader("r", "t")
    raised = []

    def read():
        try:
            r.read_next_event(timeout=None)
        except errors.ReaderClosedError as exc:
            raised.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(0.2)
    r.close()
    t.join(20)
    assert not t.is_alive() and len(raised) == 1


def test_reading_a_deleted_stream(pe_store):
    _stream(pe_store, 2)
    _write_keyed(pe_store, 20)
    r = pe_store.create_reader("r", "t")
    sl = pe_store.read_slice("r", "t")
    pe_store.delete_stream("r", "t")
    with pytest.raises(errors.StreamNotFoundError) as info:
        r.read_next_event(timeout=0)
    assert "r/t" in str(info.value)
    with pytest.raises(errors.StreamNotFoundError):
        list(sl)
    with pytest.raises(errors.StreamNotFoundError):
        sl.to_arrow()
    with pytest.raises(errors.StreamNotFoundError):
        pe_store.create_reader("r", "t")
    with pytest.raises(errors.StreamNotFoundError):
        pe_store.read_slice("r", "t")


def test_blocked_reader_fails_when_the_stream_is_deleted(pe_store):
    """delete_stream seals first, so a reader blocked at the tail may see the end of the sealed
    stream (None) or the deletion (StreamNotFoundError); after that every read raises."""
    _stream(pe_store)
    r = pe_store.create_reader("r", "t")
    outcome = []

    def read():
        try:
            outcome.append(r.read_next_event(timeout=None))
        except errors.StreamNotFoundError as exc:
            outcome.append(exc)

    t = threading.Thread(target=read, daemon=True)
    t.start()
    t.join(0.2)
    pe_store.delete_stream("r", "t")
    t.join(20)
    assert not t.is_alive() and len(outcome) == 1
    assert outcome[0] is None or isinstance(outcome[0], errors.StreamNotFoundError)
    with pytest.raises(errors.StreamNotFoundError):
        r.read_next_event(timeout=0)


def test_slice_iteration_equals_reader_output(pe_store):
    _stream(pe_store, 4)
    _write_keyed(pe_store, 500, keys=13)
    with pe_store.create_writer("r", "t") as w:
        w.write_events([b"nokey-%d" % i for i in range(20)])
    sl = pe_store.read_slice("r", "t")
    from_slice = list(sl)
    assert list(sl) == from_slice  # iterable again, same result
    from_reader = _drain(pe_store.create_reader("r", "t"))
    key = lambda e: (e.segment_id, e.offset)  # noqa: E731
    assert sorted(from_slice, key=key) == sorted(from_reader, key=key)
    assert len(from_slice) == 520
    for sid in {e.segment_id for e in from_slice}:  # per segment: the same order
        assert [e for e in from_slice if e.segment_id == sid] == [e for e in from_reader if e.segment_id == sid]
    assert sl.nbytes == sum(e.length for e in from_slice)


def test_slice_is_a_snapshot(pe_store):
    _stream(pe_store)
    _write_keyed(pe_store, 10)
    sl = pe_store.read_slice("r", "t")
    _write_keyed(pe_store, 10)
    assert len(list(sl)) == 10
    assert len(list(pe_store.read_slice("r", "t"))) == 20


def test_to_arrow_columns_values_and_nulls(pe_store):
    import pyarrow as pa
    _stream(pe_store, 2)
    with pe_store.create_writer("r", "t") as w:
        w.write_event(b"keyed-1", routing_key="k")
        w.write_events([b"free-%d" % i for i in range(5)])
        w.write_event(b"keyed-2", routing_key="k")
        w.write_event(b"", routing_key="")
    sl = pe_store.read_slice("r", "t")
    table = sl.to_arrow()
    assert table.column_names == ["event", "routing_key", "segment_id", "offset"]
    assert table.schema.field("event").type == pa.large_binary()
    assert table.schema.field("routing_key").type == pa.large_string()
    assert table.schema.field("segment_id").type == pa.int64()
    assert table.schema.field("offset").type == pa.int64()
    evs = list(sl)
    assert table.num_rows == len(evs) == 8
    rows = table.to_pylist()
    assert [(r["event"], r["routing_key"], r["segment_id"], r["offset"]) for r in rows] == \
        [(e.event, e.routing_key, e.segment_id, e.offset) for e in evs]
    assert table.column("routing_key").null_count == 5
    assert sorted(r["event"] for r in rows if r["routing_key"] is None) == [b"free-%d" % i for i in range(5)]
    assert pe_store.read_slice("r", "t", end=pe_store.stream_info("r", "t").head).to_arrow().num_rows == 0


def test_to_pandas(pe_store):
    _stream(pe_store, 2)
    _write_keyed(pe_store, 40, keys=4)
    df = pe_store.read_slice("r", "t").to_pandas()
    assert list(df.columns) == ["event", "routing_key", "segment_id", "segment", "offset"]
    assert len(df) == 40
    # beside the numeric id, its readable name (number#epoch), as tables and pictures show it
    assert set(df["segment"]) == {f"{sid}#0" for sid in df["segment_id"]} == {"0#0", "1#0"}
    assert sorted(df["event"].tolist()) == sorted(e.event for e in pe_store.read_slice("r", "t"))
    assert df.groupby("routing_key").size().to_dict() == {f"k{i}": 10 for i in range(4)}


def test_reader_serializers_and_closed_store(pe_store):
    _stream(pe_store)
    with pe_store.create_writer("r", "t", serializer="json") as w:
        w.write_event({"a": [1, 2]}, routing_key="k")
    assert pe_store.create_reader("r", "t", serializer="json").read_next_event(0).event == {"a": [1, 2]}
    assert list(pe_store.read_slice("r", "t", serializer="text"))[0].event == '{"a":[1,2]}'
    r = pe_store.create_reader("r", "t")
    pe_store.close()
    with pytest.raises(errors.ClosedError):
        r.read_next_event(timeout=0)
