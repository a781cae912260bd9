"""The batch API (Pravega's BatchClient): ``get_segments``, ``read_segment_range`` and
``get_next_stream_cut`` behave the same in process, through a client on the unix socket and over
TCP (``handle`` runs each test three ways). What a user relies on: the ranges of a slice hold
each of its events exactly once, read in any order and in parallel; steps of
``get_next_stream_cut`` move forward on event boundaries, never split a large event, reach
successors only after their predecessors, and stop at the tail."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _stream(store, segments=3, stream="s"):
    store.create_scope("a", exist_ok=True)
    store.create_stream("a", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def _fill(store, first, n, stream="s", batch=50):
    w = store.create_writer("a", stream)
    for i in range(first, first + n):
        w.write_event(b"e%06d" % i, routing_key=f"k{i % 11}")
        if i % batch == 0:
            w.flush()  # many sections per segment: boundaries inside a range
    w.close()


def _ids(events):
    return [int(ev.event[1:]) for ev in events]


def _per_key_in_order(events):
    last = {}
    for ev in events:
        i = int(ev.event[1:])
        assert last.get(ev.routing_key, -1) < i, f"out of order for {ev.routing_key}"
        last[ev.routing_key] = i


def test_ranges_of_a_slice_hold_each_event_exactly_once(handle):
    _stream(handle)
    _fill(handle, 0, 3000)
    rngs = handle.get_segments("a", "s")
    assert [r.segment_id for r in rngs] == sorted(r.segment_id for r in rngs)
    assert all(isinstance(r, pe.SegmentRange) and r.nbytes > 0 for r in rngs)
    sl = handle.read_slice("a", "s")
    assert sum(r.nbytes for r in rngs) == sl.nbytes
    got = [ev for r in reversed(rngs) for ev in handle.read_segment_range(r)]  # any order
    assert sorted(_ids(got)) == list(range(3000))
    _per_key_in_order(got)
    tables = [handle.read_segment_range(r).to_arrow() for r in rngs]
    assert sum(t.num_rows for t in tables) == 3000
    assert sorted(b for t in tables for b in t.column("event").to_pylist()) == [b"e%06d" % i for i in range(3000)]
    for r, t in zip(rngs, tables):
        assert set(t.column("segment_id").to_pylist()) == {r.segment_id}
    # a text round trip (what a Spark task is given) reads the same events
    again = pe.SegmentRange.from_json(rngs[0].to_json())
    assert again == rngs[0]
    assert [ev.event for ev in handle.read_segment_range(again)] == tables[0].column("event").to_pylist()


def test_ranges_between_cuts_of_a_scaled_stream_are_read_in_parallel(handle):
    _stream(handle, segments=2)
    _fill(handle, 0, 1000)
    start = handle.stream_info("a", "s").tail
    _fill(handle, 1000, 1000)
    handle.scale_stream("a", "s", [0], [(0.0, 0.25), (0.25, 0.5)])
    _fill(handle, 2000, 1000)
    end = handle.stream_info("a", "s").tail
    _fill(handle, 3000, 500)  # after the end cut: not in the ranges
    rngs = handle.get_segments("a", "s", start, end)
    assert len({r.segment_id for r in rngs}) == 4  # the sealed one, its successors, the other
    got: list = []
    lock = threading.Lock()

    def read(r):
        evs = list(handle.read_segment_range(r, serializer="bytes"))
        with lock:
            got.extend(evs)

    threads = [threading.Thread(target=read, args=(r,)) for r in rngs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    assert sorted(_ids(got)) == list(range(1000, 3000))
    assert Counter(_ids(got)) == Counter(_ids(handle.read_slice("a", "s", start, end)))


def test_next_stream_cut_steps_forward_exactly_once_to_the_tail(handle):
    _stream(handle, segments=2)
    _fill(handle, 0, 1500)
    handle.scale_stream("a", "s", [1], [(0.5, 0.75), (0.75, 1.0)])
    _fill(handle, 1500, 1500)
    big = b"L" * (9 << 20)  # a large event: a step never ends inside it
    w = handle.create_writer("a", "s")
    w.write_event(big, routing_key="k3")
    w.close()
    _fill(handle, 3000, 200)
    cut, seen, steps = handle.stream_info("a", "s").head, [], 0
    while True:
        nxt = handle.get_next_stream_cut("a", "s", cut, 4000)
        if nxt == cut:
            break
        assert all(o >= dict(cut.positions).get(s, 0) for s, o in nxt.positions if s in dict(cut.positions))
        seen += list(handle.read_slice("a", "s", cut, nxt))  # a valid cut on event boundaries
        cut, steps = nxt, steps + 1
        assert steps < 500
    assert steps > 5
    small = [ev for ev in seen if ev.event != big]
    assert sorted(_ids(small)) == list(range(3200))
    assert sum(ev.event == big for ev in seen) == 1
    _per_key_in_order(small)
    assert cut == handle.stream_info("a", "s").tail
    assert handle.get_next_stream_cut("a", "s", cut, 1 << 30) == cut  # at the tail: no move
    # one big step reaches the tail at once; None starts at the head
    assert handle.get_next_stream_cut("a", "s", None, 1 << 40) == cut


def test_batch_api_errors_are_the_library_classes(handle):
    _stream(handle, segments=1)
    _fill(handle, 0, 300)
    (r,) = handle.get_segments("a", "s")
    with pytest.raises(errors.InvalidStreamCutError):  # not an event boundary
        handle.read_segment_range(pe.SegmentRange(scope="a", stream="s", segment_id=0, start=3, end=r.end))
    with pytest.raises(errors.InvalidStreamCutError):  # past the segment's end
        handle.read_segment_range(pe.SegmentRange(scope="a", stream="s", segment_id=0, start=0, end=r.end + 13))
    with pytest.raises(errors.SegmentNotFoundError):
        handle.read_segment_range(pe.SegmentRange(scope="a", stream="s", segment_id=7, start=0, end=0))
    with pytest.raises(errors.StreamNotFoundError):
        handle.read_segment_range(pe.SegmentRange(scope="a", stream="nope", segment_id=0, start=0, end=0))
    with pytest.raises(errors.InvalidConfigurationError):
        handle.get_next_stream_cut("a", "s", None, 0)
    with pytest.raises(errors.InvalidConfigurationError):
        handle.read_segment_range(("a", "s", 0, 0, 10))
    mid = handle.get_next_stream_cut("a", "s", None, r.nbytes // 2)
    handle.truncate_stream("a", "s", mid)
    with pytest.raises(errors.TruncatedDataError):
        list(handle.read_segment_range(r))
    with pytest.raises(errors.TruncatedDataError):
        handle.get_next_stream_cut("a", "s", pe.StreamCut.of("a", "s", {0: 0}), 10)
    (after,) = handle.get_segments("a", "s")
    assert after.start == dict(mid.positions)[0] and after.end == r.end
    assert len(list(handle.read_segment_range(after))) == len(list(handle.read_slice("a", "s")))


def test_segment_range_values_are_checked():
    r = pe.SegmentRange(scope="a", stream="s", segment_id=(1 << 32) | 4, start=10, end=90)
    assert r.nbytes == 80 and "4#1" in repr(r)
    assert pe.SegmentRange.from_json(r.to_json()) == r
    for bad in (dict(start=-1, end=3), dict(start=5, end=4), dict(start=True, end=3),
                dict(start=0, end=1 << 63)):
        with pytest.raises(errors.InvalidConfigurationError):
            pe.SegmentRange(scope="a", stream="s", segment_id=0, **bad)
    with pytest.raises(errors.InvalidNameError):
        pe.SegmentRange(scope="a", stream="../x", segment_id=0, start=0, end=0)
    for text in ("", "[]", "{}", "[" * 100000, '{"scope":"a","stream":"s","segment_id":0,"start":0}',
                 '{"scope":1,"stream":"s","segment_id":0,"start":0,"end":0}',
                 '{"scope":"a","stream":"s","segment_id":0,"start":0,"end":0,"x":1}', "\xff"):
        with pytest.raises(errors.InvalidConfigurationError):
            pe.SegmentRange.from_json(text)


def test_a_read_token_gets_ranges_of_its_streams_only(owner):
    reader = "reader-0123456789abcdef"
    srv = pe.serve_tcp(owner, "127.0.0.1:0", tokens=pe.TokenTable.of({reader: ["read:iot/*"]}))
    for scope in ("iot", "secret"):
        owner.create_scope(scope)
        owner.create_stream(scope, "x")
        with owner.create_writer(scope, "x") as w:
            w.write_event(f"{scope}-0".encode())
    (theirs,) = owner.get_segments("secret", "x")
    with pe.connect(f"tcp://127.0.0.1:{srv.address[1]}", token=reader) as c:
        (mine,) = c.get_segments("iot", "x")
        assert [ev.event for ev in c.read_segment_range(mine)] == [b"iot-0"]
        assert c.get_next_stream_cut("iot", "x", None, 100) == owner.stream_info("iot", "x").tail
        for call in (lambda: c.get_segments("secret", "x"),
                     lambda: c.read_segment_range(theirs),
                     lambda: c.get_next_stream_cut("secret", "x", None, 100)):
            with pytest.raises(errors.PermissionDeniedError):
                call()


def test_arrow_write_time_and_a_table_started_again(handle):
    import time
    _stream(handle, segments=2)
    t0 = time.time_ns() // 1000
    w = handle.create_writer("a", "s")
    for i in range(20000):  # 12 MB: more than one part of an owner's ARROW answers
        w.write_event(b"e%06d" % i + b"." * 600, routing_key=f"k{i % 11}")
    w.close()
    t1 = time.time_ns() // 1000
    sl = handle.read_slice("a", "s")
    plain = sl.to_arrow()
    assert plain.column_names == ["event", "routing_key", "segment_id", "offset"]
    timed = sl.to_arrow(write_time=True)
    assert timed.column_names == plain.column_names + ["write_time"]
    assert timed.drop_columns(["write_time"]).equals(plain)
    times = [t.value for t in timed.column("write_time")]
    assert all(t0 <= t <= t1 for t in times)
    # a reader that stops part-way through the batches, then asks for the table again, gets
    # all of it from the start (a client's owner keeps the batches it has not sent yet)
    it = sl.arrow_batches(write_time=True)
    next(it)
    it.close()
    assert sl.to_arrow().equals(plain)
    (r0, r1) = handle.get_segments("a", "s")
    assert sum(b.num_rows for b in handle.read_segment_range(r1).arrow_batches(write_time=True)) == \
        sum(1 for _ in handle.read_segment_range(r1))


def test_next_stream_cut_with_an_event_budget_and_an_end(handle):
    _stream(handle)
    _fill(handle, 0, 3000, batch=30)  # sections of about 10 events per segment
    mid = handle.get_next_stream_cut("a", "s", None, 20_000)
    cut, counts = None, []
    while (nxt := handle.get_next_stream_cut("a", "s", cut, 1 << 40, max_events=100, end=mid)) != cut:
        counts.append(sum(1 for _ in handle.read_slice("a", "s", cut, nxt)))
        cut = nxt
    assert cut == mid  # stepped exactly to the end, never past it
    assert sum(counts) == sum(1 for _ in handle.read_slice("a", "s", None, mid))
    # soft: at most one section per segment over the budget, and never an empty step
    assert all(1 <= c <= 100 + 3 * 31 for c in counts) and len(counts) >= 3
    assert handle.get_next_stream_cut("a", "s", mid, 1 << 40, end=mid) == mid
    with pytest.raises(errors.InvalidConfigurationError):
        handle.get_next_stream_cut("a", "s", None, 100, max_events=0)


def test_two_tables_of_one_slice_read_at_once_stay_apart(handle):
    _stream(handle, segments=1)
    w = handle.create_writer("a", "s")
    for i in range(20000):  # more than one part of an owner's ARROW answers
        w.write_event(b"e%06d" % i + b"." * 600, routing_key="k")
    w.close()
    sl = handle.read_slice("a", "s")
    first = sl.arrow_batches()
    head = next(first)
    whole = sl.to_arrow()  # a second table while the first is part-way
    rest = sum(b.num_rows for b in first)
    assert whole.num_rows == 20000 and head.num_rows + rest == 20000


def test_split_ranges_make_as_many_pieces_as_the_boundaries_allow(owner):
    owner.create_scope("a")
    owner.create_stream("a", "s")
    w = owner.create_writer("a", "s")
    for _ in range(5):  # five events, each in its own section: 8 bytes apiece
        w.write_event(b"ab")
        w.flush()
    w.close()
    for max_bytes, pieces in ((40, 1), (20, 2), (14, 3), (10, 4), (8, 5), (1, 5)):
        got = owner.get_segments("a", "s", max_bytes=max_bytes)
        assert len(got) == pieces, (max_bytes, got)
        assert [r.start for r in got[1:]] == [r.end for r in got[:-1]] and got[-1].end == 40
        assert sum(len(list(owner.read_segment_range(r))) for r in got) == 5


def test_tier2_ranges_must_start_and_end_on_events(tmp_path):
    with pe.open(tmp_path / "data", tier2=str(tmp_path / "t2"), durability="none") as store:
        store.create_scope("a")
        store.create_stream("a", "s")
        with store.create_writer("a", "s") as w:
            for i in range(100):
                w.write_event(b"e%03d" % i)  # 10 bytes apiece
        store.flush_tier2()
    t2 = pe.open_tier2(str(tmp_path / "t2"))
    (r,) = t2.get_segments("a", "s")
    assert r.nbytes == 1000 and len(list(t2.read_segment_range(r))) == 100
    for start, end in ((3, 1000), (0, 13)):
        with pytest.raises(errors.InvalidStreamCutError):
            t2.read_segment_range(pe.SegmentRange(scope="a", stream="s", segment_id=0, start=start, end=end))
    part = pe.SegmentRange(scope="a", stream="s", segment_id=0, start=10, end=30)
    assert [ev.event for ev in t2.read_segment_range(part)] == [b"e001", b"e002"]


def test_min_events_keeps_the_start_until_that_many_events_are_there(handle):
    """What ``min_events_per_trigger`` stands on: with fewer events after the start than
    ``min_events``, the step does not move; with that many, it steps as without it."""
    _stream(handle, segments=2)
    _fill(handle, 0, 30, batch=7)
    head = handle.stream_info("a", "s").head
    tail = handle.stream_info("a", "s").tail
    assert handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=31) == head
    assert handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=30) == tail
    step = handle.get_next_stream_cut("a", "s", head, 1 << 30, max_events=5, min_events=30)
    assert step == handle.get_next_stream_cut("a", "s", head, 1 << 30, max_events=5) != head
    assert handle.get_next_stream_cut("a", "s", tail, 1 << 30, min_events=1) == tail
    for bad in (0, -1, True, 1.5):
        with pytest.raises(errors.InvalidConfigurationError, match="min_events"):
            handle.get_next_stream_cut("a", "s", head, 1 << 30, min_events=bad)
