"""Event counts (``StreamInfo.events``, Redis's XLEN), the cut N events before the tail
(kcat's ``-o -N``), a reader group's lag in events, write times of events and the listing of
transactions: each checked against what a reader actually reads, after truncations inside a
section, restarts, large events, transactions and scaling, in-process and through a client."""

from __future__ import annotations

import time

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors


def readable(store, scope="a", stream="s", start=None) -> list:
    r = store.create_reader(scope, stream, start=start)
    out = []
    while (ev := r.read_next_event(timeout=0)) is not None:
        out.append(ev)
    r.close()
    return out


def fill(store, n, *, keys=7, flush_every=50, size=lambda i: i % 40) -> None:
    with store.create_writer("a", "s") as w:
        for i in range(n):
            w.write_event(b"x" * size(i), routing_key=f"k{i % keys}")
            if flush_every and i % flush_every == flush_every - 1:
                w.flush()  # many sections


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(steps=st.lists(st.one_of(
    st.tuples(st.just("write"), st.integers(1, 300)),
    st.tuples(st.just("truncate"), st.integers(0, 400)),
    st.tuples(st.just("reopen"), st.just(0))), min_size=1, max_size=6))
def test_counts_match_what_a_reader_reads(tmp_path_factory, steps):
    path = tmp_path_factory.mktemp("counts")
    store = pe.open(path, "none")
    try:
        store.create_scope("a")
        store.create_stream("a", "s", 3)
        for op, n in steps:
            if op == "write":
                fill(store, n, flush_every=37)
            elif op == "truncate":
                r = store.create_reader("a", "s")
                for _ in range(n):  # a cut after n events: usually inside a section
                    if r.read_next_event(timeout=0) is None:
                        break
                store.truncate_stream("a", "s", r.position())
                r.close()
            else:
                store.close()
                store = pe.open(path, "none")
            info = store.stream_info("a", "s")
            events = readable(store)
            assert info.events == len(events)
            per_segment = {s.segment_id: s.events for s in info.segments}
            for sid, n_seg in per_segment.items():
                assert n_seg == sum(1 for e in events if e.segment_id == sid)
    finally:
        store.close()


def test_counts_of_large_events_transactions_and_scaling(tmp_path):
    with pe.open(tmp_path / "s", "none") as store:
        store.create_scope("a")
        store.create_stream("a", "s", 2)
        fill(store, 100)
        with store.create_writer("a", "s") as w:
            w.write_event(b"L" * (20 << 20), routing_key="big")  # a large event: many sections
        tw = store.create_transactional_writer("a", "s")
        with tw.begin_txn() as t:
            for i in range(30):
                t.write_event(b"t%d" % i, routing_key=f"k{i}")
        tw.close()
        info = store.stream_info("a", "s")
        store.scale_stream("a", "s", [s.segment_id for s in info.current_segments], [(0.0, 0.5), (0.5, 1.0)])
        fill(store, 40)
        info = store.stream_info("a", "s")
        assert info.events == 171 == len(readable(store))
        with pe.open(tmp_path / "s") as client:  # a second open in this process: a client
            assert client.stream_info("a", "s").events == 171
        bs = store.create_byte_stream("a", "bytes")
        bs.write(b"raw bytes")
        bs.flush()
        assert store.stream_info("a", "bytes").events is None  # bytes, not events


def test_cut_from_tail_reads_the_last_n_events_of_each_current_segment(tmp_path):
    with pe.open(tmp_path / "s", "none") as store:
        store.create_scope("a")
        store.create_stream("a", "s", 2)
        fill(store, 200, keys=5)
        old = store.stream_info("a", "s").current_segments
        store.scale_stream("a", "s", [s.segment_id for s in old], [(0.0, 0.25), (0.25, 1.0)])
        fill(store, 100, keys=5, size=lambda i: 1 + i % 3)
        events = readable(store)
        current = {s.segment_id for s in store.stream_info("a", "s").current_segments}
        for n in (0, 1, 3, 17, 10_000):
            got = readable(store, start=store.get_stream_cut_from_tail("a", "s", n))
            for sid in current:
                mine = [(e.segment_id, e.offset) for e in events if e.segment_id == sid]
                assert [(e.segment_id, e.offset) for e in got if e.segment_id == sid] == mine[len(mine) - min(n, len(mine)):]
            assert all(e.segment_id in current for e in got)  # scaled-away segments are done
        with pe.open(tmp_path / "s") as client:
            assert client.get_stream_cut_from_tail("a", "s", 3) == store.get_stream_cut_from_tail("a", "s", 3)
        for bad in (-1, 1.5, True, "3"):
            with pytest.raises(errors.InvalidConfigurationError):
                store.get_stream_cut_from_tail("a", "s", bad)


def test_group_lag_in_events(tmp_path):
    with pe.open(tmp_path / "s", "none") as store:
        store.create_scope("a")
        store.create_stream("a", "s", 3)
        fill(store, 500)
        g = store.create_reader_group("g", "a", "s")
        assert g.unread_events() == 500 == g.unread_events("a", "s")
        r = g.create_reader("r1")
        n = 0
        while r.read_next_event(timeout=0) is not None:
            n += 1
        assert n == 500 and g.unread_events() == 0 and g.unread_bytes() == 0
        fill(store, 25)
        assert g.unread_events() == 25
        with pe.open(tmp_path / "s") as client:
            assert client.get_reader_group("g").unread_events() == 25
        with pytest.raises(errors.InvalidConfigurationError):
            g.unread_events("a")
        r.close()


def test_write_times_and_transaction_listing(tmp_path):
    with pe.open(tmp_path / "s", "none") as store:
        store.create_scope("a")
        store.create_stream("a", "s", 2)
        t0 = time.time_ns()
        fill(store, 120)
        t1 = time.time_ns()
        events = readable(store)
        times = store.write_times([e.event_pointer for e in events])
        assert len(times) == 120 and all(t0 <= t <= t1 for t in times)
        with pe.open(tmp_path / "s") as client:
            assert client.write_times([e.event_pointer for e in events[:5]]) == times[:5]
        with pytest.raises(errors.InvalidEventPointerError):
            store.write_times(["not a pointer"])
        tw = store.create_transactional_writer("a", "s", "tw1")
        t = tw.begin_txn()
        t.write_event(b"x", routing_key="k")
        t.flush()
        (info,) = store.list_transactions("a", "s")
        assert (info.writer_id, info.status, info.staged_bytes > 0) == ("tw1", "OPEN", True)
        t.abort()
        assert [i.status for i in store.list_transactions("a", "s")] == ["ABORTED"]
        tw.close()
