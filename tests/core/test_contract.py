"""The public contract of issue 2: names, configuration, routing, StreamCuts, writers, readers,
and the bad inputs of each (every one raises an error of pravega_embedded.errors and loses
nothing)."""

from __future__ import annotations

import hashlib
import inspect
import threading

import pytest
from hypothesis import given, settings, strategies as st

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.routing import key_point
from pravega_embedded.streamcut import segment_id


def fixed(n: int) -> pe.StreamConfiguration:
    return pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n))


def drain(reader) -> list[pe.EventRead]:
    out = []
    while (ev := reader.read_next_event(timeout=0)) is not None:
        out.append(ev)
    return out


@pytest.fixture
def s(pe_store):
    pe_store.create_scope("sc")
    pe_store.create_stream("sc", "st", fixed(4))
    return pe_store


# ------------------------------------------------------------------ surface
def test_public_names():
    assert set(pe.__all__) == {
        "errors", "open", "open_temporary", "open_tier2", "Store", "StoreStatus", "TieringStatus",
        "RemoteStore", "RemoteWriter", "RemoteReader", "connect", "serve_tcp", "TokenTable", "Tier2Store", "Tier2StreamInfo", "Tier2Slice", "BackgroundFailure",
        "StreamConfiguration", "ScalingPolicy",
        "RetentionPolicy", "StreamInfo", "SegmentInfo", "EpochInfo", "SegmentWithRange", "SegmentRange", "Truncation", "SegmentCountChange", "SegmentWatcher", "TimeWindow", "TransactionalEventStreamWriter", "Transaction", "TxnStatus", "TransactionInfo", "ByteStream", "StreamCut", "EventRead", "EventPointer",
        "EventStreamWriter", "EventStreamReader", "Slice", "BytesSerializer", "TextSerializer",
        "JsonSerializer", "MAX_EVENT_SIZE", "__version__",
        "ReaderGroupConfig", "ReaderGroup", "GroupReader", "Checkpoint", "CheckpointFuture",
        "Position", "SegmentDistribution",
        "open_async", "AsyncStore", "AsyncWriter", "AsyncReader", "AsyncReaderGroup", "AsyncGroupReader",
        "AsyncCheckpoint", "AsyncSlice", "AsyncTransactionalWriter", "AsyncTransaction",
    }
    for name in pe.__all__:
        assert getattr(pe, name) is not None


def test_exception_tree():
    builtin = {
        "InvalidNameError": ValueError, "InvalidConfigurationError": ValueError,
        "InvalidStreamCutError": ValueError, "InvalidEventPointerError": ValueError,
        "EventTooLargeError": ValueError, "InvalidRoutingKeyError": ValueError,
        "InvalidSequenceError": ValueError, "SerializationError": TypeError,
        "NotFoundError": LookupError, "ScopeNotFoundError": LookupError,
        "StreamNotFoundError": LookupError, "SegmentNotFoundError": LookupError,
        "AlreadyExistsError": FileExistsError, "ScopeExistsError": FileExistsError,
        "StreamExistsError": FileExistsError, "WriterExistsError": FileExistsError,
        "ScopeNotEmptyError": OSError, "StreamSealedError": RuntimeError,
        "SegmentSealedError": RuntimeError, "TruncatedDataError": LookupError,
        "ClosedError": ValueError, "StoreClosedError": ValueError, "WriterClosedError": ValueError,
        "ReaderClosedError": ValueError, "StoreLockedError": BlockingIOError,
        "ConnectionLostError": ConnectionError, "ProtocolError": ConnectionError,
        "PermissionDeniedError": PermissionError,
        "StorageError": OSError, "StorageFullError": OSError, "CorruptDataError": OSError,
        "StoragePermissionError": PermissionError,
        "FormatVersionError": OSError, "DurabilityTimeoutError": TimeoutError, "TieringTimeoutError": TimeoutError,
        "LocalBudgetError": OSError,
        "ReinitializationRequiredError": RuntimeError,
        "ReaderGroupNotFoundError": LookupError, "ReaderNotFoundError": LookupError,
        "ReaderGroupExistsError": FileExistsError, "ReaderExistsError": FileExistsError,
        "CheckpointExistsError": FileExistsError, "InvalidPositionError": ValueError,
        "ReaderGroupClosedError": ValueError, "ReaderNotInGroupError": RuntimeError,
        "MaxCheckpointsExceededError": RuntimeError, "CheckpointFailedError": RuntimeError,
        "TxnNotFoundError": LookupError, "StoreNotFoundError": LookupError,
        "StreamKindError": TypeError, "TxnFailedError": RuntimeError,
    }
    assert set(errors.__all__) == set(builtin) | {"PravegaEmbeddedError"}
    for name, base in builtin.items():
        cls = getattr(errors, name)
        assert issubclass(cls, errors.PravegaEmbeddedError) and issubclass(cls, base), name
        assert cls.__doc__, name
    assert issubclass(errors.SerializationError, ValueError)


def test_every_public_callable_is_documented():
    for name in pe.__all__:
        obj = getattr(pe, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert obj.__doc__, name


# ------------------------------------------------------------------ names and configuration
@pytest.mark.parametrize("bad", ["", ".", "..", ".hidden", "-x", "_x", "a/b", "a\\b", "a b", "é",
                                 "a=b", "x" * 256, None, 3, b"abc"])
def test_bad_names_are_refused(pe_store, bad):
    with pytest.raises(errors.InvalidNameError) as info:
        pe_store.create_scope(bad)
    assert repr(bad)[:20] in str(info.value) or type(bad).__name__ in str(info.value)
    pe_store.create_scope("ok", exist_ok=True)
    with pytest.raises(errors.InvalidNameError):
        pe_store.create_stream("ok", bad)
    assert pe_store.list_scopes() == ["ok"]


def test_longest_names_work_end_to_end(store_path):
    scope, stream = "s" * 255, "t" * 255
    with pe.open(store_path, durability="none") as store:
        store.create_scope(scope)
        store.create_stream(scope, stream)
        with store.create_writer(scope, stream, writer_id="w" * 255) as w:
            w.write_event(b"x", routing_key="k")
    with pe.open(store_path, durability="none") as store:
        assert [e.event for e in store.read_slice(scope, stream)] == [b"x"]


@pytest.mark.parametrize("bad", [0, -1, 1025, True, "2", 2.0, None])
def test_bad_scaling_policy(bad):
    with pytest.raises(errors.InvalidConfigurationError):
        pe.ScalingPolicy.fixed(bad)


def test_bad_store_options(tmp_path):
    with pytest.raises(errors.InvalidConfigurationError):
        pe.open(tmp_path / "a", durability="bogus")
    with pytest.raises(errors.InvalidConfigurationError):
        pe.open(tmp_path / "b", roll_bytes=10)
    with pytest.raises(errors.InvalidConfigurationError):
        pe.StreamConfiguration(scaling="fixed")  # type: ignore[arg-type]


def test_fixed_segments_split_the_key_space_equally(s):
    segs = s.stream_info("sc", "st").segments
    assert [x.segment_id for x in segs] == [0, 1, 2, 3]
    assert segs[0].key_low == 0.0 and segs[-1].key_high == 1.0
    for a, b in zip(segs, segs[1:]):
        assert a.key_high == b.key_low
    assert {round(x.key_high - x.key_low, 12) for x in segs} == {0.25}


# ------------------------------------------------------------------ routing
def test_key_point_is_the_documented_stable_hash():
    for key in ["", "sensor-7", "é", "x" * 1000]:
        d = hashlib.blake2b(key.encode("utf-8"), digest_size=8).digest()
        assert key_point(key) == (int.from_bytes(d, "big") >> 11) / 2**53
        assert 0.0 <= key_point(key) < 1.0


def test_same_key_same_segment_and_keys_spread(s):
    w = s.create_writer("sc", "st")
    for i in range(2000):
        w.write_event(b"%d" % i, routing_key=f"key-{i % 1000}")
    w.flush()
    seg_of: dict[str, set[int]] = {}
    for ev in s.read_slice("sc", "st"):
        seg_of.setdefault(ev.routing_key, set()).add(ev.segment_id)
        assert ev.segment_id == int(key_point(ev.routing_key) * 4)
    assert all(len(v) == 1 for v in seg_of.values())
    assert {x for v in seg_of.values() for x in v} == {0, 1, 2, 3}


def test_keyless_events_spread_over_segments(s):
    w = s.create_writer("sc", "st")
    for i in range(10):
        w.write_events([b"n%d" % j for j in range(10)])
        w.flush()
    evs = list(s.read_slice("sc", "st"))
    assert len(evs) == 100 and all(e.routing_key is None for e in evs)
    assert {e.segment_id for e in evs} == {0, 1, 2, 3}


@pytest.mark.parametrize("bad", [7, b"k", ("a",), "k" * 4097])
def test_bad_routing_keys(s, bad):
    w = s.create_writer("sc", "st")
    with pytest.raises(errors.InvalidRoutingKeyError):
        w.write_event(b"x", routing_key=bad)
    w.write_event(b"fine", routing_key="k")
    w.flush()
    assert [e.event for e in s.read_slice("sc", "st")] == [b"fine"]


# ------------------------------------------------------------------ StreamCuts
seg_ids = st.builds(segment_id, st.integers(0, 2**32 - 1), st.integers(0, 2**32 - 1))


@settings(max_examples=200, deadline=None)
@given(st.dictionaries(seg_ids, st.integers(0, 2**63 - 1), min_size=1, max_size=20))
def test_streamcut_text_round_trip(positions):
    cut = pe.StreamCut.of("a-b.c", "D9", positions)
    assert pe.StreamCut.from_text(cut.to_text()) == cut
    assert cut.as_dict() == positions


@pytest.mark.parametrize("text", [
    "", "pe1:", "pe1:a/b:", "pe1:a/b:0=", "pe1:a/b:0=-1", "pe1:a/b:x=1", "pe1:../b:0=1",
    "pe1:a/b:0=1,", "pe1:a/b:0=1,0=2", "pe1:a/b:99999999999=1", "pe1:a/b:0=999999999999999999999",
    "unbounded", "pe2:a/b:0=1", "pe1:a/b/c:0=1", " pe1:a/b:0=1", "pe1:a/b:0=1\n", None, 5, b"UNBOUNDED",
])
def test_garbage_streamcut_text(text):
    with pytest.raises(errors.InvalidStreamCutError):
        pe.StreamCut.from_text(text)


@settings(max_examples=300, deadline=None)
@given(st.text(max_size=60))
def test_random_streamcut_text(text):
    try:
        cut = pe.StreamCut.from_text(text)
    except errors.InvalidStreamCutError:
        return
    assert cut.to_text() == text or cut is pe.StreamCut.UNBOUNDED


def test_unbounded_and_ordering():
    assert pe.StreamCut.from_text("UNBOUNDED") is pe.StreamCut.UNBOUNDED
    assert pe.StreamCut.UNBOUNDED.to_text() == "UNBOUNDED"
    a = pe.StreamCut.of("s", "t", {0: 1, 1: 5})
    b = pe.StreamCut.of("s", "t", {0: 2, 1: 5})
    c = pe.StreamCut.of("s", "t", {0: 0, 1: 9})
    assert a <= b and a < b and not b <= a and b >= a
    assert not a <= c and not c <= a  # a partial order
    with pytest.raises(errors.InvalidStreamCutError):
        a <= pe.StreamCut.of("s", "u", {0: 1, 1: 5})  # noqa: B015
    with pytest.raises(errors.InvalidStreamCutError):
        pe.StreamCut.of("s", "t", {0: -1})


def test_cuts_are_validated_against_the_stream(s):
    s.create_stream("sc", "other", fixed(4))
    w = s.create_writer("sc", "st")
    w.write_events([b"abc", b"defg"], routing_key="k")
    w.flush()
    info = s.stream_info("sc", "st")
    other = s.stream_info("sc", "other").tail
    for call in (lambda c: s.create_reader("sc", "st", start=c), lambda c: s.read_slice("sc", "st", end=c),
                 lambda c: s.truncate_stream("sc", "st", c)):
        with pytest.raises(errors.InvalidStreamCutError):
            call(other)
        seg = next(x for x in info.segments if x.length)
        inside = {**info.tail.as_dict(), seg.segment_id: 3}  # inside the first frame
        with pytest.raises(errors.InvalidStreamCutError):
            call(pe.StreamCut.of("sc", "st", inside))
        beyond = {**info.tail.as_dict(), seg.segment_id: seg.length + 1}
        with pytest.raises(errors.InvalidStreamCutError):
            call(pe.StreamCut.of("sc", "st", beyond))
        with pytest.raises(errors.InvalidStreamCutError):
            call(pe.StreamCut.of("sc", "st", {0: 0}))  # not every segment
    assert s.stream_info("sc", "st").head == info.head  # nothing was truncated


# ------------------------------------------------------------------ writers
def test_sequences_and_durability(s):
    w = s.create_writer("sc", "st", writer_id="w1")
    assert w.last_sequence == -1 and w.durable_sequence == -1
    assert [w.write_event(b"e", routing_key="k") for _ in range(3)] == [0, 1, 2]
    assert w.write_events([b"a", b"b"], routing_key="k") == 4
    assert w.flush() == 4 and w.durable_sequence == 4 and w.last_sequence == 4


def test_explicit_sequences_drop_duplicates_also_after_reopen(store_path):
    with pe.open(store_path, durability="none") as store:
        store.create_scope("sc")
        store.create_stream("sc", "st")
        with store.create_writer("sc", "st", writer_id="src") as w:
            for off in (10, 20, 30):
                assert w.write_event(b"o%d" % off, routing_key="k", sequence=off) == off
            w.write_event(b"dup", routing_key="k", sequence=20)
            assert w.duplicates_dropped == 1
    with pe.open(store_path, durability="none") as store:
        with store.create_writer("sc", "st", writer_id="src") as w:
            assert w.last_sequence == 30
            for off in (20, 30, 40):  # a source replaying from an older offset
                w.write_event(b"o%d" % off, routing_key="k", sequence=off)
            assert w.duplicates_dropped == 2
        assert [e.event for e in store.read_slice("sc", "st")] == [b"o10", b"o20", b"o30", b"o40"]


@pytest.mark.parametrize("bad", [-1, 2**63, "3", 1.5, True])
def test_bad_sequence(s, bad):
    w = s.create_writer("sc", "st")
    with pytest.raises(errors.InvalidSequenceError):
        w.write_event(b"x", routing_key="k", sequence=bad)


def test_event_size_limit(s):
    with pe.open_temporary(large_event_limit=pe.MAX_EVENT_SIZE) as small:
        small.create_scope("sc")
        small.create_stream("sc", "st")
        with pytest.raises(errors.EventTooLargeError):  # over the store's large_event_limit
            small.create_writer("sc", "st").write_event(b"x" * (pe.MAX_EVENT_SIZE + 1), routing_key="k")
        assert list(small.read_slice("sc", "st")) == []
    w = s.create_writer("sc", "st")
    with pytest.raises(errors.EventTooLargeError):
        w.write_events([b"ok", b"x" * (pe.MAX_EVENT_SIZE + 1)], routing_key="k")
    w.flush()
    assert list(s.read_slice("sc", "st")) == []  # nothing of the refused calls was written
    big = bytes(range(256)) * (pe.MAX_EVENT_SIZE // 256)
    w.write_event(big, routing_key="k")
    w.write_event(bytearray(b"ba"), routing_key="k")
    w.write_event(memoryview(b"mv"), routing_key="k")
    w.flush()
    assert [e.event for e in s.read_slice("sc", "st")] == [big, b"ba", b"mv"]


@pytest.mark.parametrize("bad", ["text", 5, None, ["x"]])
def test_non_bytes_events_without_a_serializer(s, bad):
    w = s.create_writer("sc", "st")
    with pytest.raises(errors.SerializationError):
        w.write_event(bad, routing_key="k")


def test_closed_writer_and_duplicate_writer_ids(s):
    w = s.create_writer("sc", "st", writer_id="dup")
    with pytest.raises(errors.WriterExistsError):
        s.create_writer("sc", "st", writer_id="dup")
    with w:
        w.write_event(b"x", routing_key="k")
    assert w.closed
    w.close()  # idempotent
    with pytest.raises(errors.WriterClosedError):
        w.write_event(b"y", routing_key="k")
    with pytest.raises(errors.WriterClosedError):
        w.write_events([b"y"], routing_key="k")
    with pytest.raises(errors.WriterClosedError):
        w.flush()
    assert s.create_writer("sc", "st", writer_id="dup").last_sequence == 0


def test_sealed_and_deleted_streams_refuse_writes(s):
    w = s.create_writer("sc", "st", writer_id="before")
    for i in range(50):
        w.write_event(b"%d" % i, routing_key="k")
    s.seal_stream("sc", "st")  # flushes the open writer first
    assert [e.event for e in s.read_slice("sc", "st")] == [b"%d" % i for i in range(50)]
    with pytest.raises(errors.StreamSealedError):
        w.write_event(b"late", routing_key="k")
    with pytest.raises(errors.StreamSealedError):
        s.create_writer("sc", "st")
    assert s.stream_info("sc", "st").sealed
    s.create_stream("sc", "gone")
    w2 = s.create_writer("sc", "gone")
    s.delete_stream("sc", "gone")
    with pytest.raises(errors.StreamNotFoundError):
        w2.write_event(b"x", routing_key="k")
    with pytest.raises(errors.StreamNotFoundError):
        s.create_writer("sc", "gone")


# ------------------------------------------------------------------ readers
def test_reader_timeout_and_wakeup(s):
    r = s.create_reader("sc", "st")
    assert r.read_next_event(timeout=0.05) is None
    got: list[pe.EventRead] = []
    t = threading.Thread(target=lambda: got.append(r.read_next_event(timeout=30)))
    t.start()
    with s.create_writer("sc", "st") as w:
        w.write_event(b"wake", routing_key="k")
    t.join(30)
    assert not t.is_alive() and got[0].event == b"wake"


def test_bounded_reads_and_event_pointers(s):
    w = s.create_writer("sc", "st")
    w.write_events([b"a%d" % i for i in range(10)], routing_key="k")
    w.flush()
    cut1 = s.stream_info("sc", "st").tail
    w.write_events([b"b%d" % i for i in range(10)], routing_key="k")
    w.flush()
    cut2 = s.stream_info("sc", "st").tail
    w.write_events([b"c%d" % i for i in range(10)], routing_key="k")
    w.flush()
    between = drain(s.create_reader("sc", "st", start=cut1, end=cut2))
    assert [e.event for e in between] == [b"b%d" % i for i in range(10)]
    assert [e.event for e in s.read_slice("sc", "st", start=cut1, end=cut2)] == [e.event for e in between]
    r = s.create_reader("sc", "st", end=cut1)
    assert len(drain(r)) == 10 and r.read_next_event(timeout=0.5) is None  # stops at the end cut
    ev = between[3]
    assert (ev.event, ev.routing_key, ev.segment_id) == (b"b3", "k", ev.event_pointer.segment_id)
    again = s.fetch_event(pe.EventPointer.from_bytes(ev.event_pointer.to_bytes()))
    assert again.event == b"b3" and again.offset == ev.offset
    with pytest.raises(errors.InvalidEventPointerError):
        pe.EventPointer.from_bytes(b"garbage")
    wrong = pe.EventPointer(scope="sc", stream="st", segment_id=ev.segment_id, offset=ev.offset + 1, length=ev.length)
    with pytest.raises(errors.InvalidEventPointerError):
        s.fetch_event(wrong)


def test_reader_position_resumes_exactly(s):
    w = s.create_writer("sc", "st")
    for i in range(100):
        w.write_event(b"%d" % i, routing_key=f"k{i % 7}")
    w.flush()
    r = s.create_reader("sc", "st")
    first = [r.read_next_event(timeout=0) for _ in range(40)]
    rest = drain(s.create_reader("sc", "st", start=r.position()))
    assert sorted(e.event for e in first + rest) == sorted(b"%d" % i for i in range(100))
    assert len(first + rest) == 100


def test_reader_ends_on_sealed_stream_and_fails_on_deleted(s):
    s.create_stream("sc", "done")
    with s.create_writer("sc", "done") as w:
        w.write_event(b"last", routing_key="k")
    s.seal_stream("sc", "done")
    r = s.create_reader("sc", "done")
    assert r.read_next_event(timeout=None).event == b"last"
    assert r.read_next_event(timeout=None) is None  # end of a sealed stream, no waiting
    r2 = s.create_reader("sc", "done")
    s.delete_stream("sc", "done")
    with pytest.raises(errors.StreamNotFoundError):
        r2.read_next_event(timeout=0)
    r.close()
    with pytest.raises(errors.ReaderClosedError):
        r.read_next_event(timeout=0)


def test_slice_to_arrow_and_pandas(s):
    w = s.create_writer("sc", "st")
    w.write_events([b"k1", b"k2"], routing_key="key")
    w.write_events([b"n1"])
    w.flush()
    table = s.read_slice("sc", "st").to_arrow()
    assert table.column_names == ["event", "routing_key", "segment_id", "offset"]
    rows = sorted(zip(table["event"].to_pylist(), table["routing_key"].to_pylist()))
    assert rows == [(b"k1", "key"), (b"k2", "key"), (b"n1", None)]
    df = s.read_slice("sc", "st").to_pandas()
    assert sorted(df["event"]) == [b"k1", b"k2", b"n1"]


# ------------------------------------------------------------------ serializers
def test_text_and_json_serializers(s):
    with s.create_writer("sc", "st", writer_id="t", serializer="text") as w:
        w.write_event("héllo ✓", routing_key="t")
        with pytest.raises(errors.SerializationError):
            w.write_event(b"bytes", routing_key="t")
    s.create_stream("sc", "js")
    doc = {"a": [1, 2.5, None, {"b": "ü"}], "t": True}
    with s.create_writer("sc", "js", serializer="json") as w:
        w.write_event(doc, routing_key="j")
        with pytest.raises(errors.SerializationError):
            w.write_event({1, 2}, routing_key="j")
    assert [e.event for e in s.read_slice("sc", "st", serializer="text")] == ["héllo ✓"]
    assert s.create_reader("sc", "js", serializer=pe.JsonSerializer()).read_next_event(0).event == doc
    with pytest.raises(errors.SerializationError):
        s.create_writer("sc", "st", serializer="yaml")
    s.create_stream("sc", "raw")
    with s.create_writer("sc", "raw") as w:
        w.write_event(b"\xff\xfe", routing_key="r")
    with pytest.raises(errors.SerializationError):
        list(s.read_slice("sc", "raw", serializer="text"))


def test_cut_deep_inside_one_large_section(pe_store):
    """A start cut thousands of frames into one journal section is validated by parsing the
    section up to it (more frames than one parse call returns) and read from exactly there."""
    pe_store.create_scope("deep")
    pe_store.create_stream("deep", "one")
    with pe_store.create_writer("deep", "one") as w:
        w.write_events([b"%05d" % i for i in range(5000)], routing_key="k")  # one section
    evs = list(pe_store.read_slice("deep", "one"))
    cut = pe.StreamCut.of("deep", "one", {0: evs[3000].offset})
    rest = drain(pe_store.create_reader("deep", "one", start=cut))
    assert [e.event for e in rest] == [b"%05d" % i for i in range(3000, 5000)]
    with pytest.raises(errors.InvalidStreamCutError):
        pe_store.create_reader("deep", "one", start=pe.StreamCut.of("deep", "one", {0: evs[3000].offset + 1}))
    assert pe_store.fetch_event(evs[4321].event_pointer).event == b"04321"


def test_fetch_event_bad_pointers(s):
    with pytest.raises(errors.InvalidEventPointerError):
        s.fetch_event(b"not a pointer")  # type: ignore[arg-type]
    with pytest.raises(errors.SegmentNotFoundError):
        s.fetch_event(pe.EventPointer(scope="sc", stream="st", segment_id=99, offset=0, length=7))
    with pytest.raises(errors.StreamNotFoundError):
        s.fetch_event(pe.EventPointer(scope="sc", stream="nope", segment_id=0, offset=0, length=7))
