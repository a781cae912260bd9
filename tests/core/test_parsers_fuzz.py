"""Fuzzing the Python-side parsers of bytes from disk: malformed input raises the library's
own error, never another exception (the C parsers are fuzzed in tests/native)."""

from __future__ import annotations

import struct

from hypothesis import given, settings, strategies as st

from pravega_embedded import errors
from pravega_embedded.events import EventPointer
from pravega_embedded.journal import parse_events_record

_REC = struct.Struct("<IIQBBHI")
_EVH = struct.Struct("<QQQIH")
_SEC = struct.Struct("<QQIIII")  # journal format 2: uid, offset, events, bytes, crc32c, 0


def _record(writer: bytes, sections: list[tuple[int, int, bytes]], pos: int = 1000) -> bytes:
    body = _EVH.pack(5, 9, 123, len(sections), len(writer)) + writer
    for uid, off, frames in sections:
        body += _SEC.pack(uid, off, 1, len(frames), 0, 0) + frames
    return _REC.pack(0, len(body), pos, 1, 0, 0x4550, 0) + body


def test_parses_a_well_formed_record():
    rec = _record(b"w1", [(7, 0, b"\x00" * 10), (8, 40, b"\x01" * 6)])
    parsed = parse_events_record(rec, 0, 1000, len(rec))
    assert (parsed.writer_id, parsed.first_seq, parsed.last_seq) == ("w1", 5, 9)
    assert [(s.segment_uid, s.segment_offset, s.n_bytes) for s in parsed.sections] == [(7, 0, 10), (8, 40, 6)]
    assert parsed.sections[0].data_pos == 1000 + 24 + 30 + 2 + 32
    assert parsed.end == 1000 + len(rec)


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.integers(min_value=0, max_value=500))
def test_random_bytes_raise_corrupt_data_error_only(data, total):
    try:
        parse_events_record(data, 0, 0, total)
    except errors.CorruptDataError:
        pass


@settings(max_examples=500, deadline=None)
@given(st.data())
def test_mutated_records_raise_corrupt_data_error_or_parse_within_bounds(data):
    rec = bytearray(_record(b"writer", [(1, 0, b"a" * 20), (2, 0, b"b" * 30)]))
    for _ in range(data.draw(st.integers(1, 4))):
        i = data.draw(st.integers(0, len(rec) - 1))
        rec[i] = data.draw(st.integers(0, 255))
    cut = data.draw(st.integers(0, len(rec)))
    try:
        parsed = parse_events_record(bytes(rec), 0, 0, cut)
    except errors.CorruptDataError:
        return
    for s in parsed.sections:
        assert 0 <= s.data_pos and s.data_pos + s.n_bytes <= cut


@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=120))
def test_event_pointer_from_garbage(data):
    try:
        p = EventPointer.from_bytes(data)
    except errors.InvalidEventPointerError:
        return
    assert EventPointer.from_bytes(p.to_bytes()) == p
