"""EventStreamWriter.write_sequenced and write_frames (the same batch as a client's WRITE sends
it: journal frames): a client's batch taken in one call, as write_event with explicit sequences
would take it event by event."""

from __future__ import annotations

import pytest

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.remote import wire


@pytest.fixture
def store():
    with pe.open_temporary() as s:
        s.create_scope("a")
        s.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        yield s


@pytest.fixture(params=["sequenced", "frames"])
def write(request):
    if request.param == "sequenced":
        return lambda w, first, events: w.write_sequenced(first, events)

    def frames(w, first, events):
        body = wire.encode_write(1, first, [(None if k is None else k.encode("utf-8", "surrogateescape"), e)
                                            for k, e in events])
        return w.write_frames(first, body[wire.WRITE_HEADER_SIZE:], len(events))
    return frames


def _events(store):
    with store.create_reader("a", "s") as r:
        out = []
        while (ev := r.read_next_event(timeout=0)) is not None:
            out.append((ev.routing_key, ev.event))
        return out


def test_duplicates_are_dropped_gaps_kept_and_per_key_order_kept(store, write):
    w = store.create_writer("a", "s", writer_id="c")
    batch = [(f"k{i % 3}", b"%d" % i) for i in range(10)]
    assert write(w, 0, batch) == 9
    assert write(w, 5, [(f"k{i % 3}", b"%d" % i) for i in range(5, 15)]) == 14  # 5..9 resent
    assert w.duplicates_dropped == 5
    assert write(w, 100, [(None, b"gap")]) == 100  # explicit sequences may skip numbers
    assert write(w, 3, [("k0", b"old")]) == 100 and w.duplicates_dropped == 6
    w.close()
    got = _events(store)
    assert sorted(int(e) for k, e in got if k) == list(range(15)) and (None, b"gap") in got
    for key in ("k0", "k1", "k2"):
        nums = [int(e) for k, e in got if k == key]
        assert nums == sorted(nums)
    assert store.create_writer("a", "s", writer_id="c").last_sequence == 100


def test_a_bad_key_refuses_the_whole_batch_before_anything_is_buffered(store, write):
    w = store.create_writer("a", "s", writer_id="c")
    with pytest.raises(errors.InvalidRoutingKeyError):
        write(w, 0, [("ok", b"1"), ("bad\udcff", b"2")])  # a lone surrogate
    assert w.last_sequence == -1
    w.close()
    assert _events(store) == []


def test_a_closed_writer_refuses(store, write):
    w = store.create_writer("a", "s")
    w.close()
    with pytest.raises(errors.WriterClosedError):
        write(w, 0, [("k", b"x")])


def test_a_batch_bigger_than_one_record_is_taken_event_by_event(store, write):
    w = store.create_writer("a", "s", writer_id="big")
    batch = [("k", bytes([i % 251]) * 200_000) for i in range(400)]  # 80 MB: over one record
    assert write(w, 0, batch) == 399
    w.close()
    got = _events(store)
    assert [e for _, e in got] == [e for _, e in batch]
