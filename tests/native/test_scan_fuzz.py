"""pe_scan: clean, torn and corrupt tails, and fuzzing against a pure-Python reference."""

from __future__ import annotations

import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st


def journal_bytes(h, buf_pos: int, payloads, types=None) -> tuple[bytes, list[int]]:
    """Records back to back starting at buf_pos; returns the bytes and the record positions."""
    out, starts = b"", []
    for i, p in enumerate(payloads):
        starts.append(buf_pos + len(out))
        out += h.make_record(buf_pos + len(out), (types or [1] * len(payloads))[i], p)
    return out, starts


def check_against_ref(h, buf, buf_pos, start_pos):
    status, res = h.scan(buf, buf_pos, start_pos)
    assert status == h.lib.PE_OK
    assert res == h.scan_ref(buf, buf_pos, start_pos)
    # properties that do not depend on the reference
    assert start_pos <= res["valid_end"] <= buf_pos + len(buf)
    at, n = start_pos, 0
    while at < res["valid_end"]:  # every record reported valid re-validates
        size = h.record_ok(buf, at - buf_pos, at)
        assert size
        at, n = at + size, n + 1
    assert at == res["valid_end"] and n == res["n_records"]
    if res["tail_state"] == h.lib.PE_TAIL_CLEAN:
        assert res["valid_end"] == buf_pos + len(buf)
    else:
        assert res["bad_pos"] == res["valid_end"] < buf_pos + len(buf)
    if res["tail_state"] == h.lib.PE_TAIL_CORRUPT:
        nv = res["next_valid_pos"]
        assert nv > res["bad_pos"] and h.record_ok(buf, nv - buf_pos, nv)
    return res


PAYLOADS = [os.urandom(n) for n in (0, 1, 40, 300, 7, 1000, 64)]


def test_clean(h):
    for buf_pos in (0, 32, 10**12):
        buf, starts = journal_bytes(h, buf_pos, PAYLOADS, [1, 2, 1, 15, 1, 3, 1])
        res = check_against_ref(h, buf, buf_pos, buf_pos)
        assert res["tail_state"] == h.lib.PE_TAIL_CLEAN
        assert res["n_records"] == len(PAYLOADS) and res["valid_end"] == buf_pos + len(buf)
        res = check_against_ref(h, buf, buf_pos, starts[3])  # start in the middle
        assert res["n_records"] == len(PAYLOADS) - 3
        res = check_against_ref(h, buf, buf_pos, buf_pos + len(buf))  # nothing to scan
        assert (res["tail_state"], res["n_records"]) == (h.lib.PE_TAIL_CLEAN, 0)
    st, res = h.scan(b"", 5, 5)
    assert (st, res["tail_state"], res["valid_end"]) == (h.lib.PE_OK, h.lib.PE_TAIL_CLEAN, 5)


def test_bad_arguments(h):
    buf, _ = journal_bytes(h, 100, PAYLOADS[:2])
    res = h.ffi.new("pe_scan_result *")
    assert h.lib.pe_scan(buf, len(buf), 100, 99, res) == h.lib.PE_ERR_INVAL
    assert h.lib.pe_scan(buf, len(buf), 100, 101 + len(buf), res) == h.lib.PE_ERR_INVAL
    assert h.lib.pe_scan(buf, len(buf), 2**64 - 10, 2**64 - 10, res) == h.lib.PE_ERR_INVAL
    assert h.lib.pe_scan(buf, len(buf), 100, 100, h.ffi.NULL) == h.lib.PE_ERR_INVAL
    assert h.lib.pe_scan(h.ffi.NULL, 1, 0, 0, res) == h.lib.PE_ERR_INVAL


def test_truncated_at_every_byte_of_the_last_two_records(h):
    buf, starts = journal_bytes(h, 32, PAYLOADS)
    n = len(PAYLOADS)
    for cut in range(starts[-2] - 32, len(buf)):
        res = check_against_ref(h, buf[:cut], 32, 32)
        complete = [s for s in starts[1:] + [32 + len(buf)] if s <= 32 + cut]
        if 32 + cut in starts:  # cut exactly at a record boundary
            assert res["tail_state"] == h.lib.PE_TAIL_CLEAN
        else:
            assert res["tail_state"] == h.lib.PE_TAIL_TORN, cut
            assert res["bad_pos"] == res["valid_end"]
        assert res["valid_end"] == max([32] + complete)
        assert res["n_records"] == (n - 2 if cut < starts[-1] - 32 else n - 1)


def test_bit_flip_before_valid_records_is_corrupt(h):
    buf, starts = journal_bytes(h, 1000, PAYLOADS)
    k = 3  # damage record 3, records 4.. stay valid
    rec_start, rec_end = starts[k] - 1000, starts[k + 1] - 1000
    for at in range(rec_start, rec_end, 3):
        for bit in (0, 5):
            damaged = bytearray(buf)
            damaged[at] ^= 1 << bit
            res = check_against_ref(h, bytes(damaged), 1000, 1000)
            assert res["tail_state"] == h.lib.PE_TAIL_CORRUPT, (at, bit)
            assert (res["bad_pos"], res["next_valid_pos"]) == (starts[k], starts[k + 1])
            assert (res["n_records"], res["valid_end"]) == (k, starts[k])


def test_damage_before_a_final_empty_record_is_corrupt(h):
    buf, starts = journal_bytes(h, 0, [b"abc", b"defgh", b""])  # the last record is 24 bytes
    damaged = bytearray(buf)
    damaged[starts[1] + 26] ^= 1  # in the payload of record 1
    res = check_against_ref(h, bytes(damaged), 0, 0)
    assert res["tail_state"] == h.lib.PE_TAIL_CORRUPT and res["next_valid_pos"] == starts[2]


def test_bit_flip_in_last_record_is_torn(h):
    buf, starts = journal_bytes(h, 0, PAYLOADS)
    for at in range(starts[-1], len(buf), 5):
        damaged = bytearray(buf)
        damaged[at] ^= 0x10
        res = check_against_ref(h, bytes(damaged), 0, 0)
        assert res["tail_state"] == h.lib.PE_TAIL_TORN
        assert res["bad_pos"] == res["valid_end"] == starts[-1]


def test_zero_tail_is_torn(h):
    buf, starts = journal_bytes(h, 32, PAYLOADS)
    for zeros in (1, 23, 24, 4096):
        res = check_against_ref(h, buf + bytes(zeros), 32, 32)
        assert res["tail_state"] == h.lib.PE_TAIL_TORN
        assert res["valid_end"] == res["bad_pos"] == 32 + len(buf)
        assert res["n_records"] == len(PAYLOADS)


def test_record_position_field_must_match(h):
    rec = h.make_record(32, 1, b"payload")
    res = check_against_ref(h, rec, 32, 32)  # where it belongs
    assert (res["tail_state"], res["n_records"]) == (h.lib.PE_TAIL_CLEAN, 1)
    res = check_against_ref(h, rec, 0, 0)  # says 32, sits at 0: a stale copy, not valid
    assert (res["tail_state"], res["n_records"]) == (h.lib.PE_TAIL_TORN, 0)
    res = check_against_ref(h, bytes(32) + rec, 0, 0)  # found by the resync at 32
    assert (res["tail_state"], res["next_valid_pos"]) == (h.lib.PE_TAIL_CORRUPT, 32)


def test_length_past_the_end_then_valid_record_is_corrupt(h):
    buf, starts = journal_bytes(h, 0, PAYLOADS[:3])
    damaged = bytearray(buf)
    # record 1 claims a payload running past the buffer; record 2 behind it is intact
    damaged[starts[1] + 4 : starts[1] + 8] = (10**6).to_bytes(4, "little")
    res = check_against_ref(h, bytes(damaged), 0, 0)
    assert res["tail_state"] == h.lib.PE_TAIL_CORRUPT and res["next_valid_pos"] == starts[2]


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.binary(max_size=400), st.integers(0, 2**48), st.integers(0, 400))
def test_fuzz_random_bytes(h, buf, buf_pos, start):
    check_against_ref(h, buf, buf_pos, buf_pos + min(start, len(buf)))


mutation = st.tuples(st.sampled_from(["flip", "set", "cut", "insert", "delete", "zero"]),
                     st.integers(0, 5000), st.integers(0, 255))


@pytest.mark.slow
@settings(max_examples=500, deadline=None)
@given(st.lists(st.binary(max_size=120), min_size=1, max_size=8), st.lists(mutation, max_size=4),
       st.integers(0, 2**40), st.integers(0, 7))
def test_fuzz_mutated_journal(h, payloads, mutations, buf_pos, first):
    buf, starts = journal_bytes(h, buf_pos, payloads)
    b = bytearray(buf)
    for kind, at, val in mutations:
        at %= len(b) + 1
        if kind == "flip" and at < len(b):
            b[at] ^= 1 << (val % 8)
        elif kind == "set" and at < len(b):
            b[at] = val
        elif kind == "cut":
            del b[at:]
        elif kind == "insert":
            b[at:at] = bytes([val]) * (val % 5 + 1)
        elif kind == "delete":
            del b[at : at + val % 30 + 1]
        elif kind == "zero":
            b[at : at + val] = bytes(len(b[at : at + val]))
        if not b:
            b = bytearray(buf[:1])
    start = min(starts[first % len(starts)], buf_pos + len(b))
    check_against_ref(h, bytes(b), buf_pos, start)
