"""Every parser of network bytes (remote.wire, remote.values): valid messages round-trip, and
any other bytes raise ProtocolError (never another exception, never a huge allocation)."""

from __future__ import annotations

import json
import struct

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import pravega_embedded as pe
from pravega_embedded import errors
from pravega_embedded.remote import values, wire

FUZZ = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

keys = st.one_of(st.none(), st.text(max_size=40))
payloads = st.binary(max_size=300)


@FUZZ
@given(st.lists(st.tuples(keys, payloads), max_size=30), st.integers(0, 2**32 - 1), st.integers(0, 2**62))
def test_write_round_trip(events, handle, first):
    body = wire.encode_write(handle, first, [(None if k is None else k.encode("utf-8", "surrogateescape"), e)
                                             for k, e in events])
    batch = wire.parse_write(body)
    assert (batch.handle, batch.first, batch.count, batch.events()) == (handle, first, len(events), events)
    for cut in range(len(body)):  # every truncation is refused
        with pytest.raises(errors.ProtocolError):
            wire.parse_write(body[:cut])
    with pytest.raises(errors.ProtocolError):
        wire.parse_write(body + b"\0")


@FUZZ
@given(st.lists(st.tuples(st.integers(0, 2**64 - 1), st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1),
                          st.one_of(st.none(), st.binary(max_size=40)), payloads), max_size=20), st.booleans(),
       st.one_of(st.none(), st.binary(max_size=100)))
def test_events_round_trip(rows, end, meta):
    evs = [wire.WireEvent(*r) for r in rows]
    body = wire.encode_events(evs, end, meta)
    assert wire.parse_events(body) == wire.EventsBody(evs, end, meta)
    for cut in range(len(body)):
        with pytest.raises(errors.ProtocolError):
            wire.parse_events(body[:cut])


@FUZZ
@given(st.binary(max_size=wire.TOKEN_MAX))
def test_hello_round_trip(token):
    assert wire.parse_hello(wire.encode_hello(token)) == wire.Hello(wire.VERSION, wire.VERSION, token)


@FUZZ
@given(st.binary(max_size=600))
def test_random_bytes_only_raise_protocol_error(data):
    for parse in (wire.parse_write, wire.parse_events, wire.parse_hello, wire.parse_welcome, wire.parse_bytes_write,
                  values.loads, lambda b: wire.parse_header(b, wire.FRAME_MAX)):
        try:
            parse(data)
        except errors.ProtocolError:
            pass
        except errors.PravegaEmbeddedError:
            pass  # a value's own check (an invalid StreamCut text, ...): the library's error


def test_counts_and_sizes_are_checked_before_allocation():
    # an EVENTS' JSON section longer than its body, or over META_MAX: refused
    with pytest.raises(errors.ProtocolError, match="does not fit"):
        wire.parse_events(struct.pack(">IBI", 0, 2, 2**31))
    with pytest.raises(errors.ProtocolError, match="does not fit"):
        wire.parse_events(struct.pack(">IBI", 0, 2, wire.META_MAX + 1) + bytes(wire.META_MAX + 1))
    # a count of 2**32-1 events in a 5-byte body: refused at once, nothing allocated for them
    with pytest.raises(errors.ProtocolError, match="cannot hold"):
        wire.parse_events(struct.pack(">IB", 2**32 - 1, 0))
    with pytest.raises(errors.ProtocolError, match="over the limits"):
        wire.parse_write(struct.pack(">IQI", 1, 0, 2**32 - 1))
    big = struct.pack(">IQI", 1, 0, 1) + struct.pack("<IH", 2**32 - 1, 0xFFFF)
    with pytest.raises(errors.ProtocolError, match="does not fit"):
        wire.parse_write(big)
    key = struct.pack(">IQI", 1, 0, 1) + struct.pack("<IH", 1, 5000) + b"k" * 5000 + b"x"
    with pytest.raises(errors.ProtocolError, match="routing key"):
        wire.parse_write(key)
    over = struct.pack(">IQI", 1, 0, 1) + struct.pack("<IH", (8 << 20) + 1, 0xFFFF) + bytes((8 << 20) + 1)
    with pytest.raises(errors.ProtocolError, match="over the"):
        wire.parse_write(over)
    with pytest.raises(errors.ProtocolError, match="over the limit"):
        wire.parse_header(struct.pack(">IBI", wire.HELLO_MAX + 1, wire.Kind.HELLO, 0), wire.HELLO_MAX)
    with pytest.raises(errors.ProtocolError, match="unknown message kind"):
        wire.parse_header(struct.pack(">IBI", 5, 99, 0), wire.FRAME_MAX)
    with pytest.raises(errors.ProtocolError, match="magic"):
        wire.parse_hello(b"HTTP" + bytes(6))


def test_values_round_trip_through_json():
    with pe.open_temporary() as s:
        s.create_scope("a")
        cfg = pe.StreamConfiguration(scaling=pe.ScalingPolicy.by_event_rate(100, 3, 2),
                                     retention=pe.RetentionPolicy.by_time(3600))
        s.create_stream("a", "s", cfg)
        info = s.stream_info("a", "s")
        status = s.status()
    ptr = pe.EventPointer(scope="a", stream="s", segment_id=1 << 32 | 3, offset=99, length=12)
    samples = [None, True, 3, -1.5, float("inf"), "x", b"\x00\xff", [1, [2]], (1, (2, "3")),
               {1: "a", (2, 3): [b"b"]}, cfg, info, status, info.tail, pe.StreamCut.UNBOUNDED, ptr,
               pe.TimeWindow(None, 5)]
    for v in samples:
        assert values.loads(values.dumps(v)) == v
    assert values.loads(values.dumps(pe.StreamCut.UNBOUNDED)) is pe.StreamCut.UNBOUNDED


@pytest.mark.parametrize("text", [
    '{"$t": "Store", "f": {}}',  # not on the allowlist
    '{"$t": "StreamConfiguration", "f": {"evil": 1}}',  # no such field
    '{"$t": "StreamConfiguration", "f": {"scaling": 5}}',  # the class's own check refuses
    '{"$b": "not base64!"}', '{"$map": [[1]]}', '{"$map": [[[1], 2]]}', '{"$tuple": 5}',
    '{"$h": "x", "info": {"$map": []}}', '{"unknown": 1}', '{}', '[' * 100000, '{"$cut": "pe1:garbage"}',
])
def test_bad_values_are_refused(text):
    with pytest.raises((errors.ProtocolError, errors.InvalidConfigurationError, errors.InvalidStreamCutError)):
        values.loads(text.encode())


def test_objects_that_are_not_values_are_not_sent():
    with pytest.raises(errors.InvalidConfigurationError, match="plain values"):
        values.dumps(object())


@pytest.mark.parametrize("exc", [
    errors.ScopeNotFoundError("scope 'x' not found"), errors.StreamSealedError("sealed"),
    errors.StorageFullError(28, "disk full; free space"), errors.LocalBudgetError(28, "budget"),
    errors.StoreLockedError("held by pid 7", path="/d", pid=7), errors.ConnectionLostError("gone"),
    errors.PermissionDeniedError("no"), errors.DurabilityTimeoutError("late"),
])
def test_errors_arrive_as_the_same_class(exc):
    got = values.decode_error(values.encode_error(exc))
    assert type(got) is type(exc) and str(got) == str(exc)
    if isinstance(exc, OSError) and exc.errno is not None:
        assert got.errno == exc.errno
    if isinstance(exc, errors.StoreLockedError):
        assert (got.pid, got.path) == (7, "/d")


def test_a_bug_in_the_owner_arrives_as_remote_error_and_unknown_types_as_protocol_error():
    got = values.decode_error(values.encode_error(KeyError("boom")))
    assert isinstance(got, values.RemoteError) and "KeyError" in str(got) and "boom" in str(got)
    got = values.decode_error(json.dumps({"type": "SystemExit", "message": "x"}).encode())
    assert isinstance(got, errors.ProtocolError)
    assert isinstance(values.decode_error(b"\xff"), errors.ProtocolError)


json_values = st.recursive(
    st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70), st.floats(allow_nan=False), st.text(max_size=10)),
    lambda inner: st.one_of(st.lists(inner, max_size=6), st.dictionaries(st.sampled_from(["start", "stop", "p", "x"]), inner,
                                                                         max_size=4)),
    max_leaves=40)
pieces = st.lists(st.lists(st.integers(-5, 2**40), min_size=5, max_size=5), min_size=1, max_size=8)


@FUZZ
@given(st.one_of(json_values, st.fixed_dictionaries({"start": st.integers(-5, 2**40), "stop": st.integers(-5, 2**40),
                                                     "p": pieces})))
def test_journal_ranges_from_the_wire_are_checked(value):
    """A journal range (the JSON section of a group read, remote/session.py invariant 9):
    accepted only whole and in bounds, else ProtocolError."""
    from pravega_embedded.journalrange import MAX_PIECES, MAX_SECTION, JournalRange

    try:
        rng = JournalRange.from_json(json.loads(json.dumps(value)))
    except errors.ProtocolError:
        return
    assert 0 <= rng.start <= rng.stop and 0 < len(rng.pieces) <= MAX_PIECES
    assert sum(p.hi - p.lo for p in rng.pieces) == rng.stop - rng.start
    assert all(0 <= p.lo < p.hi <= p.nbytes <= MAX_SECTION and p.pos > p.base for p in rng.pieces)
    assert JournalRange.from_json(rng.to_json()) == rng
