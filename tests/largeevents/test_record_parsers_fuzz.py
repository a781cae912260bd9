"""Fuzzing the BYTES and MERGE record parsers (records.py) with bytes as they could come from
disk: valid records parse back to what was built; random bytes and damaged records raise
CorruptDataError, never another exception, and anything that still parses is consistent
(records invariant 1)."""

from __future__ import annotations

import struct
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pravega_embedded import errors
from pravega_embedded.records import (
    BYTES_DATA_OFFSET,
    MAX_REFS,
    NO_SEQUENCE,
    build_merge,
    parse_bytes_record,
    parse_merge_record,
)

_HDR = 24
_REC = struct.Struct("<IIQBBHI")  # the C journal's record header; the parsers skip it
U64 = st.integers(0, (1 << 64) - 1)
U32 = st.integers(0, (1 << 32) - 1)
FUZZ = settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def header(rtype: int, payload_len: int, pos: int) -> bytes:
    return _REC.pack(0, payload_len, pos, rtype, 0, 0x4550, 0)


def bytes_record(uid: int, soff: int, nev: int, data: bytes, pos: int = 5000, ts: int = 0) -> bytes:
    """A BYTES record of journal format 3: the write time, a section header (uid, offset, events,
    bytes, CRC of the data, 0) and the data (the C journal builds it; the record CRC is not the
    parser's)."""
    section = struct.pack("<QQQIIII", ts, uid, soff, nev, len(data), 0, 0)
    return header(2, 40 + len(data), pos) + section + data


def merge_record(pos: int, parts, *, ts: int = 123, seq: int = 7, txn: uuid.UUID | None = None,
                 wid: bytes = b"writer") -> bytes:
    body = build_merge(ts, seq, txn, wid, parts)
    return header(3, len(body), pos) + body


def check_bytes(rec, pos: int, total: int) -> None:
    """A parsed BYTES record is consistent with the bytes it came from."""
    assert rec.pos == pos and rec.end == pos + total
    assert rec.n_events in (0, 1)
    assert rec.data_pos == pos + BYTES_DATA_OFFSET
    assert rec.data_pos + rec.n_bytes == rec.end


def check_merge(rec, pos: int, total: int) -> None:
    """A parsed MERGE record only references data written before it, and its parts fit."""
    assert rec.pos == pos and rec.end == pos + total
    nrefs = 0
    for part in rec.parts:
        assert len(part.refs) <= MAX_REFS
        for rpos, rbytes, _ in part.refs:
            assert rbytes > 0 and rpos + rbytes <= pos
            nrefs += 1
    assert total >= _HDR + 38 + len(rec.writer_id.encode("utf-8", "surrogateescape")) \
        + 24 * len(rec.parts) + 16 * nrefs
    assert rec.txn_id is None or isinstance(rec.txn_id, uuid.UUID)


# --------------------------------------------------------------------- valid records


@settings(max_examples=200, deadline=None)
@given(U64, U64, st.integers(0, 1), st.binary(max_size=300), st.integers(0, 1 << 40),
       st.binary(max_size=30), U64)
def test_valid_bytes_records_parse_back(uid, soff, nev, data, pos, prefix, ts):
    rec = bytes_record(uid, soff, nev, data, pos, ts)
    buf = prefix + rec + b"\xff" * 5  # at an offset, with bytes after the record
    for b in (buf, memoryview(buf)):
        got = parse_bytes_record(b, len(prefix), pos, len(rec))
        assert (got.segment_uid, got.segment_offset, got.n_events, got.n_bytes) == (uid, soff, nev, len(data))
        assert got.timestamp_ns == ts
        check_bytes(got, pos, len(rec))
        assert buf[len(prefix) + BYTES_DATA_OFFSET : len(prefix) + BYTES_DATA_OFFSET + got.n_bytes] == data


@settings(max_examples=100, deadline=None)
@given(U64, U64, st.integers(0, 1), st.binary(max_size=300), st.integers(0, 1 << 40))
def test_bytes_records_of_journal_format_2_parse_back_without_a_write_time(uid, soff, nev, data, pos):
    rec = header(2, 32 + len(data), pos) + struct.pack("<QQIIII", uid, soff, nev, len(data), 0, 0) + data
    got = parse_bytes_record(rec, 0, pos, len(rec), 2)
    assert (got.segment_uid, got.segment_offset, got.n_events, got.n_bytes) == (uid, soff, nev, len(data))
    assert got.timestamp_ns == 0 and got.data_pos == pos + 56 and got.end == pos + len(rec)


_REFS = st.lists(st.tuples(st.integers(0, 1 << 30), st.integers(1, 1 << 20), st.integers(0, 3)),
                 max_size=4)
_PARTS = st.lists(st.tuples(U64, U64, _REFS), max_size=4)


@settings(max_examples=200, deadline=None)
@given(_PARTS, U64, U64, st.one_of(st.none(), st.uuids()), st.text(max_size=20),
       st.binary(max_size=16))
def test_valid_merge_records_parse_back(parts, ts, seq, txn, wid, prefix):
    pos = (1 << 31) + (1 << 21)  # after every referenced byte
    rec = merge_record(pos, parts, ts=ts, seq=seq, txn=txn, wid=wid.encode("utf-8", "surrogatepass"))
    buf = prefix + rec + b"\x00" * 3
    got = parse_merge_record(memoryview(buf), len(prefix), pos, len(rec))
    check_merge(got, pos, len(rec))
    assert (got.timestamp_ns, got.last_seq, got.txn_id) == (ts, seq, txn)
    assert got.writer_id.encode("utf-8", "surrogateescape") == wid.encode("utf-8", "surrogatepass")
    assert [(p.segment_uid, p.segment_offset, list(p.refs)) for p in got.parts] == \
        [(u, o, [tuple(r) for r in refs]) for u, o, refs in parts]
    for p, (_, _, refs) in zip(got.parts, parts):
        assert p.n_bytes == sum(r[1] for r in refs)


def test_large_event_merge_record_round_trip():
    """The shape a large event writes: one part, the first chunk starting the event."""
    refs = [(1000, 4 << 20, 1), (1000 + (4 << 20) + 48, 4 << 20, 0), (1000 + (8 << 20) + 96, 17, 0)]
    pos = 1000 + (8 << 20) + 200
    rec = merge_record(pos, [(42, 4096, refs)], seq=9, wid=b"w")
    got = parse_merge_record(rec, 0, pos, len(rec))
    assert got.last_seq == 9 and got.txn_id is None and got.writer_id == "w"
    assert got.parts[0].refs == tuple(refs) and got.parts[0].n_bytes == (8 << 20) + 17
    # a transaction's commit: no writer sequence, a txn id
    tid = uuid.uuid4()
    rec = merge_record(pos, [(42, 0, refs[:1])], seq=NO_SEQUENCE, txn=tid, wid=b"")
    got = parse_merge_record(rec, 0, pos, len(rec))
    assert got.txn_id == tid and got.last_seq == NO_SEQUENCE


# --------------------------------------------------------------------- specific damage


@pytest.mark.parametrize("make", [
    lambda: (bytes_record(1, 0, 0, b"abc")[:-1], 0, 1000, 24 + 40 + 3),  # total past buf
    lambda: (bytes_record(1, 0, 0, b"abc"), 0, 1000, 24 + 40 + 2),  # total says fewer bytes
    lambda: (bytes_record(1, 0, 0, b"abc") + b"x", 0, 1000, 24 + 40 + 4),  # a trailing byte
    lambda: (bytes_record(1, 0, 2, b"abc"), 0, 1000, 24 + 40 + 3),  # two events start in it
    lambda: (bytes_record(1, 0, 0, b""), 0, 1000, 24 + 39),  # shorter than its header
    lambda: (bytes_record(1, 0, 0, b"abc"), -1, 1000, 24 + 40 + 3),  # a negative offset
    lambda: (bytes_record(1, 0, 0, b"abc"), 0, 1000, -5),
    lambda: (b"", 0, 0, 0),
])
def test_damaged_bytes_records(make):
    buf, off, pos, total = make()
    with pytest.raises(errors.CorruptDataError):
        parse_bytes_record(buf, off, pos, total)


def _merge_body(nparts: int, wlen: int, rest: bytes) -> bytes:
    return struct.pack("<QQ16sIH", 1, 2, b"\0" * 16, nparts, wlen) + rest


@pytest.mark.parametrize("body, pos", [
    (build_merge(1, 2, None, b"w", [(1, 0, [(100, 10, 1)])]), 105),  # ref ends after the record
    (build_merge(1, 2, None, b"w", [(1, 0, [(100, 10, 1)])]), 109),
    (build_merge(1, 2, None, b"w", [(1, 0, [(100, 0, 1)])]), 1000),  # a zero-byte ref
    (build_merge(1, 2, None, b"w", [(1, 0, [((1 << 64) - 5, 10, 1)])]), 1000),  # wraps around
    (build_merge(1, 2, None, b"w", [(1, 0, [(1, 1, 0)])]) + b"\0", 1000),  # trailing byte
    (build_merge(1, 2, None, b"w", [(1, 0, [(1, 1, 0)])])[:-1], 1000),  # ref cut short
    (_merge_body(1, 0, b""), 1000),  # a part that is not there
    (_merge_body(0, 9, b"abc"), 1000),  # writer id past the end
    (_merge_body(1, 0, struct.pack("<QQII", 1, 0, MAX_REFS + 1, 0)), 1000),  # too many refs
    (_merge_body(1, 0, struct.pack("<QQII", 1, 0, (1 << 32) - 1, 0)), 1000),
    (_merge_body((1 << 32) - 1, 0, struct.pack("<QQII", 1, 0, 0, 0)), 1000),  # parts past the end
    (b"\0" * 37, 1000),  # shorter than the fixed part
])
def test_damaged_merge_records(body, pos):
    rec = header(3, len(body), pos) + body
    with pytest.raises(errors.CorruptDataError):
        parse_merge_record(rec, 0, pos, len(rec))


def test_merge_reference_ending_exactly_at_the_record_is_valid():
    body = build_merge(1, 2, None, b"w", [(1, 0, [(100, 10, 1)])])
    rec = header(3, len(body), 110) + body
    got = parse_merge_record(rec, 0, 110, len(rec))
    assert got.parts[0].refs == ((100, 10, 1),)


# --------------------------------------------------------------------- fuzzing


@FUZZ
@given(st.binary(max_size=200), st.integers(-4, 220), st.integers(0, 1 << 64), st.integers(-10, 260))
def test_random_bytes_raise_corrupt_data_error_only(data, off, pos, total):
    try:
        check_bytes(parse_bytes_record(data, off, pos, total), pos, total)
        assert 0 <= off and off + total <= len(data)
    except errors.CorruptDataError:
        pass
    try:
        check_merge(parse_merge_record(data, off, pos, total), pos, total)
        assert 0 <= off and off + total <= len(data)
    except errors.CorruptDataError:
        pass


@FUZZ
@given(st.data())
def test_mutated_bytes_records(data):
    d = data.draw(st.binary(max_size=64))
    rec = bytearray(bytes_record(data.draw(U64), data.draw(U64), data.draw(st.integers(0, 1)), d))
    _mutate(data, rec)
    total = data.draw(st.sampled_from([len(rec), data.draw(st.integers(0, len(rec) + 8))]))
    pos = data.draw(st.integers(0, 1 << 50))
    try:
        got = parse_bytes_record(bytes(rec), 0, pos, total)
    except errors.CorruptDataError:
        return
    check_bytes(got, pos, total)


@FUZZ
@given(st.data())
def test_mutated_merge_records(data):
    pos = data.draw(st.integers(0, 1 << 32))
    parts = data.draw(_PARTS)
    txn = data.draw(st.one_of(st.none(), st.uuids()))
    rec = bytearray(merge_record(pos, parts, txn=txn, wid=data.draw(st.binary(max_size=12))))
    _mutate(data, rec)
    total = data.draw(st.sampled_from([len(rec), data.draw(st.integers(0, len(rec) + 8))]))
    pos2 = data.draw(st.sampled_from([pos, data.draw(st.integers(0, 1 << 64))]))
    for buf in (bytes(rec), memoryview(bytes(rec))):
        try:
            got = parse_merge_record(buf, 0, pos2, total)
        except errors.CorruptDataError:
            continue
        check_merge(got, pos2, total)


def _mutate(data, rec: bytearray) -> None:
    """Overwrite a few bytes, or a whole aligned u32/u64 with an edge value, or drop or insert a
    run of bytes."""
    for _ in range(data.draw(st.integers(1, 4))):
        what = data.draw(st.sampled_from(["byte", "u32", "u64", "cut", "insert"]))
        if not rec:
            rec.extend(b"\0")
        i = data.draw(st.integers(0, len(rec) - 1))
        if what == "byte":
            rec[i] = data.draw(st.integers(0, 255))
        elif what == "u32" and i + 4 <= len(rec):
            v = data.draw(st.sampled_from([0, 1, 2, 0xFFFF, MAX_REFS, MAX_REFS + 1, 0xFFFFFFFF]))
            rec[i : i + 4] = struct.pack("<I", v)
        elif what == "u64" and i + 8 <= len(rec):
            v = data.draw(st.sampled_from([0, 1, 1 << 63, (1 << 64) - 1]))
            rec[i : i + 8] = struct.pack("<Q", v)
        elif what == "cut":
            del rec[i : i + data.draw(st.integers(1, 24))]
        elif what == "insert":
            rec[i:i] = data.draw(st.binary(min_size=1, max_size=24))
