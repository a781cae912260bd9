"""Writers: sequence numbers, exactly-once explicit sequences, flush, size limits, bad events,
closed writers, duplicate writer ids, sealed and deleted streams."""

from __future__ import annotations

import pytest

import pravega_embedded as pe
from pravega_embedded import errors


def _stream(store, n=1, scope="w", stream="t"):
    store.create_scope(scope, exist_ok=True)
    store.create_stream(scope, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)))


def _events(store, scope="w", stream="t"):
    return [e.event for e in store.read_slice(scope, stream)]


def _tail(store, scope="w", stream="t"):
    return store.stream_info(scope, stream).tail


# ------------------------------------------------------------------ sequence numbers
def test_write_event_returns_0_1_2_and_write_events_the_last(pe_store):
    _stream(pe_store, 2)
    w = pe_store.create_writer("w", "t", writer_id="w1")
    assert w.last_sequence == -1 and w.durable_sequence == -1
    assert [w.write_event(b"e%d" % i, routing_key="k") for i in range(3)] == [0, 1, 2]
    assert w.write_events([b"a", b"b", b"c"], routing_key="k") == 5
    assert w.write_event(b"nokey") == 6
    assert w.write_events([b"x", b"y"]) == 8
    assert w.write_events([]) == 8  # an empty batch writes nothing
    assert w.last_sequence == 8
    assert w.flush() == 8
    assert w.durable_sequence == w.last_sequence == 8
    assert len(_events(pe_store)) == 9


def test_flush_makes_everything_durable(durable_store):
    s = durable_store
    _stream(s, 4)
    w = s.create_writer("w", "t", writer_id="w1", linger=60)
    for i in range(1000):
        w.write_event(b"%d" % i, routing_key=f"k{i % 7}")
    assert w.last_sequence == 999
    assert w.flush() == 999 and w.durable_sequence == 999
    w.write_events([b"x"] * 10, routing_key="k")
    w.flush()
    assert w.durable_sequence == w.last_sequence == 1009
    w.close()
    assert len(_events(s)) == 1010


def test_sequences_continue_after_reopen(store_path):
    with pe.open(store_path, durability="os") as s:
        _stream(s)
        with s.create_writer("w", "t", writer_id="w1") as w:
            w.write_events([b"a", b"b", b"c"], routing_key="k")
    with pe.open(store_path, durability="os") as s:
        w = s.create_writer("w", "t", writer_id="w1")
        assert w.last_sequence == w.durable_sequence == 2
        assert w.write_event(b"d", routing_key="k") == 3
        other = s.create_writer("w", "t", writer_id="w2")
        assert other.last_sequence == -1  # sequences are per writer id


# ------------------------------------------------------------------ explicit sequences
def test_explicit_sequences_drop_resent_events(pe_store):
    _stream(pe_store, 2)
    w = pe_store.create_writer("w", "t", writer_id="src")
    for off in (10, 20, 30):
        assert w.write_event(b"off-%d" % off, routing_key="k", sequence=off) == off
    assert w.last_sequence == 30
    w.flush()
    for off in (10, 20, 30, 0, 29):  # re-sent after a retry: dropped
        assert w.write_event(b"dup-%d" % off, routing_key="k", sequence=off) == off
    assert w.duplicates_dropped == 5
    assert w.write_event(b"off-31", routing_key="k", sequence=31) == 31
    assert w.write_event(b"auto", routing_key="k") == 32  # auto sequences go on from the last
    w.flush()
    assert _events(pe_store) == [b"off-10", b"off-20", b"off-30", b"off-31", b"auto"]
    assert w.durable_sequence == 32


def test_explicit_sequences_drop_duplicates_within_one_batch(pe_store):
    _stream(pe_store)
    w = pe_store.create_writer("w", "t", writer_id="src", linger=60)
    w.write_event(b"5", routing_key="k", sequence=5)
    w.write_event(b"5-again", routing_key="k", sequence=5)  # not yet flushed: still a duplicate
    w.write_event(b"4", routing_key="k", sequence=4)
    w.flush()
    assert _events(pe_store) == [b"5"] and w.duplicates_dropped == 2


def test_explicit_sequences_survive_close_and_reopen(store_path):
    with pe.open(store_path, durability="os") as s:
        _stream(s, 2)
        with s.create_writer("w", "t", writer_id="src") as w:
            for off in range(0, 100, 10):
                w.write_event(b"%d" % off, routing_key=f"k{off % 3}", sequence=off)
    with pe.open(store_path, durability="os") as s:
        w = s.create_writer("w", "t", writer_id="src")
        assert w.last_sequence == 90
        for off in range(0, 100, 10):  # the application replays its source from the start
            w.write_event(b"%d" % off, routing_key=f"k{off % 3}", sequence=off)
        assert w.duplicates_dropped == 10
        w.write_event(b"100", routing_key="k0", sequence=100)
        w.close()
        got = sorted(int(e) for e in _events(s))
        assert got == list(range(0, 101, 10))  # each exactly once
    with pe.open(store_path, durability="os") as s:
        assert s.create_writer("w", "t", writer_id="src").last_sequence == 100


@pytest.mark.parametrize("bad", [-1, 2**63, 2**64, "3", 1.5, True, b"1", [1]], ids=repr)
def test_bad_sequences_are_refused(pe_store, bad):
    _stream(pe_store)
    w = pe_store.create_writer("w", "t", writer_id="src")
    w.write_event(b"ok", routing_key="k", sequence=3)
    with pytest.raises(errors.InvalidSequenceError) as info:
        w.write_event(b"x", routing_key="k", sequence=bad)
    assert isinstance(info.value, ValueError) and "src" in str(info.value)
    assert w.last_sequence == 3
    w.flush()
    assert _events(pe_store) == [b"ok"]


def test_largest_sequence_is_accepted(pe_store):
    _stream(pe_store)
    with pe_store.create_writer("w", "t", writer_id="src") as w:
        assert w.write_event(b"last", routing_key="k", sequence=2**63 - 1) == 2**63 - 1
        w.flush()
        assert w.durable_sequence == 2**63 - 1
    assert _events(pe_store) == [b"last"]


# ------------------------------------------------------------------ sizes and event types
def test_event_over_the_large_event_limit_is_refused_and_nothing_is_written():
    with pe.open_temporary(large_event_limit=pe.MAX_EVENT_SIZE) as store:
        _refused_and_nothing_written(store)


def _refused_and_nothing_written(pe_store):
    _stream(pe_store, 2)
    w = pe_store.create_writer("w", "t", writer_id="big", linger=60)
    w.write_event(b"before", routing_key="k")
    w.flush()
    tail = _tail(pe_store)
    big = b"x" * (pe.MAX_EVENT_SIZE + 1)
    with pytest.raises(errors.EventTooLargeError) as info:
        w.write_event(big, routing_key="k")
    assert "w/t" in str(info.value) and str(pe.MAX_EVENT_SIZE) in str(info.value)
    with pytest.raises(errors.EventTooLargeError):
        w.write_event(bytearray(big))
    with pytest.raises(errors.EventTooLargeError):
        w.write_events([b"small", big, b"small"], routing_key="k")  # atomic: none of the batch
    with pytest.raises(errors.EventTooLargeError):
        w.write_event(big, routing_key="k", sequence=100)
    assert w.last_sequence == 0
    assert w.flush() == 0
    assert _tail(pe_store) == tail
    assert _events(pe_store) == [b"before"]
    assert w.write_event(b"after", routing_key="k") == 1  # the writer still works
    w.close()
    assert _events(pe_store) == [b"before", b"after"]


def test_event_of_exactly_8_mib_round_trips(pe_store):
    _stream(pe_store, 2)
    big = bytes(range(256)) * (pe.MAX_EVENT_SIZE // 256)
    assert len(big) == pe.MAX_EVENT_SIZE
    with pe_store.create_writer("w", "t") as w:
        w.write_event(big, routing_key="k")
        w.write_events([b"tiny", big])
    evs = list(pe_store.read_slice("w", "t"))
    assert sorted(len(e.event) for e in evs) == [4, pe.MAX_EVENT_SIZE, pe.MAX_EVENT_SIZE]
    assert all(e.event == big for e in evs if len(e.event) > 4)
    r = pe_store.create_reader("w", "t")
    got = [r.read_next_event(0) for _ in range(3)]
    assert sorted(len(e.event) for e in got) == [4, pe.MAX_EVENT_SIZE, pe.MAX_EVENT_SIZE]
    assert pe_store.fetch_event(evs[0].event_pointer).event == evs[0].event


@pytest.mark.parametrize("bad", ["text", 5, None, 1.5, ["b"], {"a": 1}, object()], ids=repr)
def test_non_bytes_events_without_a_serializer(pe_store, bad):
    _stream(pe_store)
    w = pe_store.create_writer("w", "t")
    with pytest.raises(errors.SerializationError) as info:
        w.write_event(bad, routing_key="k")
    assert isinstance(info.value, TypeError) and type(bad).__name__ in str(info.value)
    with pytest.raises(errors.SerializationError):
        w.write_events([b"ok", bad], routing_key="k")
    with pytest.raises(errors.SerializationError):
        w.write_event(bad, routing_key="k", sequence=7)
    assert w.last_sequence == -1
    w.flush()
    assert _events(pe_store) == []


def test_bytearray_and_memoryview_are_accepted(pe_store):
    _stream(pe_store)
    buf = bytearray(b"mutable")
    with pe_store.create_writer("w", "t") as w:
        w.write_event(buf, routing_key="k")
        buf[:] = b"CHANGED"  # the writer copied it
        w.write_event(memoryview(b"view-of-bytes")[8:], routing_key="k")
        w.write_events([bytearray(b"ba"), memoryview(b"mv")], routing_key="k")
        w.write_event(b"", routing_key="k")
    assert _events(pe_store) == [b"mutable", b"bytes", b"ba", b"mv", b""]
    assert all(type(e) is bytes for e in _events(pe_store))


# ------------------------------------------------------------------ lifecycle
def test_closed_writer_refuses_everything(pe_store):
    _stream(pe_store)
    w = pe_store.create_writer("w", "t", writer_id="w1")
    w.write_event(b"a", routing_key="k")
    w.close()
    assert w.closed
    w.close()  # idempotent
    for call in (lambda: w.write_event(b"x", routing_key="k"), lambda: w.write_event(b"x"),
                 lambda: w.write_events([b"x"], routing_key="k"), lambda: w.flush(),
                 lambda: w.write_event(b"x", routing_key="k", sequence=99)):
        with pytest.raises(errors.WriterClosedError) as info:
            call()
        assert "w1" in str(info.value) and "w/t" in str(info.value)
    assert _events(pe_store) == [b"a"]  # close flushed; nothing after it


def test_context_manager_flushes_and_closes(pe_store):
    _stream(pe_store)
    with pe_store.create_writer("w", "t", writer_id="w1", linger=60) as w:
        w.write_events([b"a", b"b"], routing_key="k")
    assert w.closed and w.durable_sequence == 1
    assert _events(pe_store) == [b"a", b"b"]
    with pytest.raises(RuntimeError):
        with pe_store.create_writer("w", "t", writer_id="w1", linger=60) as w2:
            w2.write_event(b"c", routing_key="k")
            raise RuntimeError("boom")
    assert w2.closed and _events(pe_store) == [b"a", b"b", b"c"]
    pe_store.create_writer("w", "t", writer_id="w1").close()  # the id is free again


def test_second_writer_with_the_same_id(pe_store):
    _stream(pe_store)
    _stream(pe_store, stream="u")
    w = pe_store.create_writer("w", "t", writer_id="gw-1")
    w.write_event(b"one", routing_key="k")
    with pytest.raises(errors.WriterExistsError) as info:
        pe_store.create_writer("w", "t", writer_id="gw-1")
    assert "gw-1" in str(info.value) and "w/t" in str(info.value)
    assert isinstance(info.value, FileExistsError)
    pe_store.create_writer("w", "u", writer_id="gw-1").close()  # another stream: fine
    w.close()
    w2 = pe_store.create_writer("w", "t", writer_id="gw-1")
    assert w2.last_sequence == 0
    assert w2.write_event(b"two", routing_key="k") == 1
    w2.close()
    assert _events(pe_store) == [b"one", b"two"]


def test_sealed_stream_refuses_writes_and_keeps_what_was_written(pe_store):
    _stream(pe_store, 2)
    w = pe_store.create_writer("w", "t", writer_id="w1", linger=60)
    for i in range(50):
        w.write_event(b"%d" % i, routing_key=f"k{i % 5}")  # not flushed before the seal
    pe_store.seal_stream("w", "t")
    with pytest.raises(errors.StreamSealedError) as info:
        w.write_event(b"late", routing_key="k0")
    assert "w/t" in str(info.value)
    with pytest.raises(errors.StreamSealedError):
        w.write_events([b"late"], routing_key="k0")
    with pytest.raises(errors.StreamSealedError):
        w.write_event(b"late")
    with pytest.raises(errors.StreamSealedError):
        pe_store.create_writer("w", "t", writer_id="w2")
    with pytest.raises(errors.StreamSealedError):
        pe_store.create_writer("w", "t", writer_id="w1")
    assert sorted(int(e) for e in _events(pe_store)) == list(range(50))
    try:
        w.close()
    except errors.StreamSealedError:
        pass
    assert pe_store.stream_info("w", "t").sealed
    pe_store.seal_stream("w", "t")  # sealing twice is fine
    assert sorted(int(e) for e in _events(pe_store)) == list(range(50))


def test_sealed_stream_stays_sealed_after_reopen(store_path):
    with pe.open(store_path, durability="os") as s:
        _stream(s)
        with s.create_writer("w", "t") as w:
            w.write_event(b"a", routing_key="k")
        s.seal_stream("w", "t")
    with pe.open(store_path, durability="os") as s:
        assert s.stream_info("w", "t").sealed
        with pytest.raises(errors.StreamSealedError):
            s.create_writer("w", "t")
        assert _events(s) == [b"a"]


def test_deleted_stream_refuses_writes(pe_store):
    _stream(pe_store, 2)
    w = pe_store.create_writer("w", "t", writer_id="w1")
    w.write_event(b"a", routing_key="k")
    w.flush()
    pe_store.delete_stream("w", "t")
    with pytest.raises(errors.StreamNotFoundError) as info:
        w.write_event(b"b", routing_key="k")
    assert "w/t" in str(info.value)
    with pytest.raises(errors.StreamNotFoundError):
        w.write_events([b"b"])
    with pytest.raises(errors.StreamNotFoundError):
        pe_store.create_writer("w", "t", writer_id="w2")
    try:
        w.close()
    except errors.StreamNotFoundError:
        pass
    pe_store.create_stream("w", "t")  # recreated: empty, and the old writer cannot touch it
    with pytest.raises((errors.StreamNotFoundError, errors.WriterClosedError)):
        w.write_event(b"c", routing_key="k")
    assert _events(pe_store) == []


def test_bad_writer_options(pe_store):
    _stream(pe_store)
    for kw in (dict(linger=-1), dict(linger=61), dict(linger="1"), dict(batch_bytes=0),
               dict(batch_bytes=1.5), dict(batch_bytes=2**40)):
        with pytest.raises(errors.InvalidConfigurationError):
            pe_store.create_writer("w", "t", **kw)
    with pytest.raises(errors.SerializationError):
        pe_store.create_writer("w", "t", serializer="yaml")
    with pytest.raises(errors.StreamNotFoundError):
        pe_store.create_writer("w", "missing")
    with pytest.raises(errors.ScopeNotFoundError):
        pe_store.create_writer("missing", "t")


@pytest.mark.parametrize("linger", [0.0, 0.0005, 0.003])
def test_a_batch_nobody_flushes_is_drained_by_its_linger_beside_a_writer_that_flushes_all_the_time(
        pe_store, linger):
    """The linger thread stays on a timer after a flush took the batch that woke it (so a writer
    flushing all the time does not wake it once per flush); a batch another writer starts then
    must still reach readers without any flush, whether due before or after that timer."""
    import threading
    _stream(pe_store, stream="busy")
    _stream(pe_store, stream="lazy")
    stop = threading.Event()

    def flush_all_the_time() -> None:
        with pe_store.create_writer("w", "busy", writer_id="flusher") as f:
            while not stop.is_set():
                f.write_event(b"f", "k")
                f.flush()

    t = threading.Thread(target=flush_all_the_time)
    t.start()
    try:
        lazy = pe_store.create_writer("w", "lazy", writer_id="lazy", linger=linger)
        with pe_store.create_reader("w", "lazy") as r:
            for i in range(150):
                lazy.write_event(b"l%d" % i, "k")  # never flushed: only the linger drains it
                ev = r.read_next_event(timeout=30)
                assert ev is not None and ev.event == b"l%d" % i, f"event {i} was not drained by its linger"
    finally:
        stop.set()
        t.join()
    lazy.close()
