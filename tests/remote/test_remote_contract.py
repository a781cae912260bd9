"""One contract, two handles: every test runs against the owner's in-process store and against
a client connected to it (``pe.open`` of a store another handle owns), so the two cannot drift."""

from __future__ import annotations

import threading

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _stream(store, segments=2, stream="s"):
    store.create_scope("a", exist_ok=True)
    store.create_stream("a", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def _drain(r, timeout=0):
    out = []
    while (ev := r.read_next_event(timeout=timeout)) is not None:
        out.append(ev)
    return out


def test_admin_round_trip(handle):
    assert handle.create_scope("a") is True
    assert handle.create_scope("a", exist_ok=True) is False
    cfg = pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3),
                                 retention=pe.RetentionPolicy.by_size(1 << 20))
    assert handle.create_stream("a", "s", cfg) is True
    assert handle.list_scopes() == ["a"] and handle.list_streams("a") == ["s"]
    info = handle.stream_info("a", "s")
    assert isinstance(info, pe.StreamInfo) and info.config == cfg
    assert len(info.current_segments) == 3 and info.tail.scope == "a"
    handle.seal_stream("a", "s")
    assert handle.stream_info("a", "s").sealed
    handle.delete_stream("a", "s")
    handle.delete_scope("a")
    assert handle.list_scopes() == []
    assert isinstance(handle.status(), pe.StoreStatus)


def test_errors_are_the_library_classes(handle):
    with pytest.raises(errors.ScopeNotFoundError, match="nope"):
        handle.list_streams("nope")
    handle.create_scope("a")
    with pytest.raises(errors.ScopeExistsError):
        handle.create_scope("a")
    with pytest.raises(errors.InvalidNameError):
        handle.create_stream("a", "bad name!")
    with pytest.raises(errors.StreamNotFoundError):
        handle.create_writer("a", "missing")
    _stream(handle)
    with pytest.raises(errors.InvalidConfigurationError):
        handle.create_writer("a", "s", linger=-1)


def test_events_round_trip_in_order_per_key(handle):
    _stream(handle, segments=3)
    with handle.create_writer("a", "s", writer_id="w") as w:
        for i in range(3000):
            assert w.write_event(b"%d:%d" % (i % 5, i), routing_key=f"k{i % 5}") == i
        assert w.flush() == 2999 and w.durable_sequence == 2999
    with handle.create_reader("a", "s") as r:
        got = _drain(r)
    assert len(got) == 3000
    per_key = {}
    for ev in got:
        k, i = ev.event.split(b":")
        assert ev.routing_key == f"k{int(k)}" and (ev.scope, ev.stream) == ("a", "s")
        per_key.setdefault(ev.routing_key, []).append(int(i))
    assert all(v == sorted(v) for v in per_key.values())
    assert sorted(i for v in per_key.values() for i in v) == list(range(3000))


def test_a_serializer_works_on_both_sides(handle):
    _stream(handle)
    with handle.create_writer("a", "s", serializer="json") as w:
        w.write_event({"t": 21.5, "id": [1, 2]}, routing_key="x")
        w.write_event("text", routing_key=None)
        w.flush()
    with handle.create_reader("a", "s", serializer="json") as r:
        events = sorted((ev.event for ev in _drain(r)), key=str)
    assert events == ["text", {"t": 21.5, "id": [1, 2]}]
    with handle.create_writer("a", "s") as w:
        with pytest.raises(errors.SerializationError):
            w.write_event({"not": "bytes"})
        with pytest.raises(errors.InvalidRoutingKeyError):
            w.write_event(b"x", routing_key=b"bytes-key")


def test_position_resumes_exactly_after_the_last_event_returned(handle):
    _stream(handle, segments=4)
    with handle.create_writer("a", "s") as w:
        for i in range(5000):
            w.write_event(b"%d" % i, routing_key=f"k{i % 11}")
    first = []
    with handle.create_reader("a", "s") as r:
        for _ in range(1234):  # stops inside a batch the client already holds
            first.append(r.read_next_event(timeout=0))
        cut = r.position()
    with handle.create_reader("a", "s", start=cut) as r2:
        rest = _drain(r2)
    got = [int(ev.event) for ev in first + rest]
    assert sorted(got) == list(range(5000)) and len(got) == 5000  # exactly once


def test_explicit_sequences_drop_duplicates_and_resume(handle):
    _stream(handle)
    w = handle.create_writer("a", "s", writer_id="gw")
    for seq in range(10):
        w.write_event(b"e%d" % seq, routing_key="k", sequence=seq)
    w.write_event(b"dup", routing_key="k", sequence=4)  # dropped
    w.write_event(b"e20", routing_key="k", sequence=20)  # a gap is allowed
    assert w.flush() == 20 and w.duplicates_dropped == 1
    w.close()
    w = handle.create_writer("a", "s", writer_id="gw")  # re-created: resumes
    assert w.last_sequence == 20
    for seq in range(15, 25):  # a resend after a crash: 15..20 are duplicates
        w.write_event(b"e%d" % seq, routing_key="k", sequence=seq)
    w.close()
    with handle.create_reader("a", "s") as r:
        got = [ev.event for ev in _drain(r)]
    assert got == [b"e%d" % i for i in [*range(10), *range(20, 25)]]


def test_write_events_is_one_atomic_batch(handle):
    _stream(handle)
    with handle.create_writer("a", "s", writer_id="b") as w:
        w.write_event(b"first", routing_key="k")
        assert w.write_events([b"x", b"y", b"z"], routing_key="k") == 3
        w.write_event(b"last", routing_key="k")
        assert w.flush() == 4
    with handle.create_reader("a", "s") as r:
        assert [ev.event for ev in _drain(r)] == [b"first", b"x", b"y", b"z", b"last"]


def test_tail_read_waits_for_a_later_write(handle):
    _stream(handle, segments=1)
    r = handle.create_reader("a", "s")
    assert r.read_next_event(timeout=0.05) is None

    def later():
        with handle.create_writer("a", "s") as w:
            w.write_event(b"late")

    t = threading.Timer(0.2, later)
    t.start()
    try:
        ev = r.read_next_event(timeout=60)
        assert ev is not None and ev.event == b"late"
    finally:
        t.join()
        r.close()
    with pytest.raises(errors.ReaderClosedError):
        r.read_next_event(timeout=0)


def test_a_sealed_stream_ends_and_refuses_writes(handle):
    _stream(handle)
    w = handle.create_writer("a", "s")
    w.write_event(b"one")
    w.flush()
    handle.seal_stream("a", "s")
    with handle.create_reader("a", "s") as r:
        assert [ev.event for ev in iter(r)] == [b"one"]  # iteration ends at a sealed end
        assert r.read_next_event(timeout=None) is None
    with pytest.raises(errors.StreamSealedError):
        w.write_event(b"two")
        w.flush()


def test_fetch_event_by_pointer(handle):
    _stream(handle)
    with handle.create_writer("a", "s") as w:
        for i in range(10):
            w.write_event(b"v%d" % i, routing_key="k")
    with handle.create_reader("a", "s") as r:
        evs = _drain(r)
    ev = evs[7]
    ptr = pe.EventPointer(scope="a", stream="s", segment_id=ev.segment_id, offset=ev.offset, length=ev.length)
    got = handle.fetch_event(ptr)
    assert got.event == b"v7" and got.routing_key == "k" and got.offset == ev.offset


def test_truncate_and_scale_through_the_handle(handle):
    _stream(handle, segments=1)
    with handle.create_writer("a", "s") as w:
        for i in range(100):
            w.write_event(b"%d" % i, routing_key="k")
    with handle.create_reader("a", "s") as r:
        for _ in range(50):
            r.read_next_event(timeout=0)
        cut = r.position()
    handle.truncate_stream("a", "s", cut)
    (seg,) = handle.stream_info("a", "s").current_segments
    handle.scale_stream("a", "s", [seg.segment_id], [(0.0, 0.5), (0.5, 1.0)])
    assert len(handle.stream_info("a", "s").current_segments) == 2
    with handle.create_writer("a", "s") as w:
        for i in range(100, 110):
            w.write_event(b"%d" % i, routing_key="k")
    with handle.create_reader("a", "s") as r:
        assert [int(ev.event) for ev in _drain(r)] == list(range(50, 110))


def test_closed_handles_refuse(handle):
    _stream(handle)
    w = handle.create_writer("a", "s")
    w.close()
    w.close()  # idempotent
    with pytest.raises(errors.WriterClosedError):
        w.write_event(b"x")
    r = handle.create_reader("a", "s")
    r.close()
    r.close()
    with pytest.raises(errors.ReaderClosedError):
        r.read_next_event(timeout=0)
