"""pe_parse_frames / pe_gather_payloads: round trips, truncation, damage, fuzz."""

from __future__ import annotations

import struct

from hypothesis import given, settings
from hypothesis import strategies as st

keys = st.none() | st.binary(max_size=40)
events = st.lists(st.tuples(keys, st.binary(max_size=200)), max_size=30)


def parse(h, buf: bytes, max_events: int | None = None):
    ffi, lib = h.ffi, h.lib
    cap = max(1, len(buf) // 6 + 1) if max_events is None else max(1, max_events)
    fo, pl = ffi.new("uint32_t[]", cap), ffi.new("uint32_t[]", cap)
    kl = ffi.new("int32_t[]", cap)
    n, consumed = ffi.new("uint32_t *"), ffi.new("uint64_t *")
    rc = lib.pe_parse_frames(ffi.from_buffer(buf), len(buf), cap if max_events is None else max_events,
                             fo, pl, kl, n, consumed)
    return rc, n[0], consumed[0], list(fo[0 : n[0]]), list(pl[0 : n[0]]), list(kl[0 : n[0]])


def gather(h, buf: bytes, fo, pl, kl, base=0, cap=None):
    ffi, lib = h.ffi, h.lib
    total = sum(pl)
    cap = total if cap is None else cap
    out = ffi.new("char[]", max(1, cap))
    offs = ffi.new("int64_t[]", len(fo) + 1)
    rc = lib.pe_gather_payloads(ffi.from_buffer(buf), len(buf), len(fo),
                                ffi.new("uint32_t[]", fo or [0]), ffi.new("uint32_t[]", pl or [0]),
                                ffi.new("int32_t[]", kl or [0]), out, cap, base, offs)
    data = bytes(ffi.buffer(out, total)) if rc == lib.PE_OK else b""
    return rc, data, list(offs)


def check_parse(h, buf, evs, base=0):
    rc, n, consumed, fo, pl, kl = parse(h, buf)
    assert rc == h.lib.PE_OK
    assert n == len(evs) and consumed == len(buf)
    for i, (key, payload) in enumerate(evs):
        assert pl[i] == len(payload)
        if key is None:
            assert kl[i] == -1
        else:
            assert kl[i] == len(key)
            assert buf[fo[i] + 6 : fo[i] + 6 + len(key)] == key
        start = fo[i] + 6 + max(kl[i], 0)
        assert buf[start : start + pl[i]] == payload
    rc, data, offs = gather(h, buf, fo, pl, kl, base)
    assert rc == h.lib.PE_OK
    assert data == b"".join(p for _, p in evs)
    expect = [base]
    for _, p in evs:
        expect.append(expect[-1] + len(p))
    assert offs == expect


@settings(max_examples=200, deadline=None)
@given(events, st.integers(0, 2**40))
def test_round_trip(h, evs, base):
    buf = b"".join(h.frame(k, p) for k, p in evs)
    check_parse(h, buf, evs, base)


def test_round_trip_edge_keys(h):
    evs = [(b"", b"x"), (None, b""), (b"k" * 4096, b"payload"), (None, b"y" * 1000), (b"a", b"")]
    check_parse(h, b"".join(h.frame(k, p) for k, p in evs), evs)


def test_empty_buffer(h):
    rc, n, consumed, *_ = parse(h, b"", 4)
    assert (rc, n, consumed) == (h.lib.PE_OK, 0, 0)


def test_max_events_limits_the_parse(h):
    evs = [(b"k", b"a" * 10), (None, b"b" * 5), (b"kk", b"c")]
    buf = b"".join(h.frame(k, p) for k, p in evs)
    rc, n, consumed, *_ = parse(h, buf, 2)
    assert (rc, n, consumed) == (h.lib.PE_OK, 2, len(h.frame(*evs[0])) + len(h.frame(*evs[1])))


def test_truncated_last_frame(h):
    evs = [(b"key", b"first"), (None, b"second"), (b"k2", b"third payload")]
    frames = [h.frame(k, p) for k, p in evs]
    head = b"".join(frames[:2])
    for cut in range(len(head), len(head) + len(frames[2])):
        rc, n, consumed, *_ = parse(h, head + frames[2][: cut - len(head)])
        assert (rc, n, consumed) == (h.lib.PE_OK, 2, len(head)), cut


def test_key_too_long_is_corrupt(h):
    good = h.frame(b"a", b"1") + h.frame(None, b"2")
    bad = struct.pack("<IH", 1, 4097) + b"k" * 4097 + b"x"
    rc, n, consumed, *_ = parse(h, good + bad + h.frame(None, b"3"))
    assert (rc, n, consumed) == (h.lib.PE_ERR_CORRUPT, 2, len(good))
    # 4096 is the limit and still fine; 65534 is not a key length
    rc, n, *_ = parse(h, struct.pack("<IH", 0, 4096) + b"k" * 4096)
    assert (rc, n) == (h.lib.PE_OK, 1)
    rc, n, *_ = parse(h, struct.pack("<IH", 0, 65534) + bytes(10))
    assert (rc, n) == (h.lib.PE_ERR_CORRUPT, 0)


def test_gather_rejects_bad_arguments(h):
    buf = h.frame(b"k", b"hello") + h.frame(None, b"world!")
    rc, n, _, fo, pl, kl = parse(h, buf)
    assert rc == h.lib.PE_OK and n == 2
    assert gather(h, buf, fo, pl, kl, cap=10)[0] == h.lib.PE_ERR_INVAL  # needs 11
    assert gather(h, buf, fo, pl, kl, cap=11)[0] == h.lib.PE_OK
    assert gather(h, buf, [fo[0], len(buf) - 3], pl, kl)[0] == h.lib.PE_ERR_INVAL
    assert gather(h, buf, fo, [pl[0], pl[1] + 1], kl)[0] == h.lib.PE_ERR_INVAL
    assert gather(h, buf, fo, pl, [kl[0], -2])[0] == h.lib.PE_ERR_INVAL
    assert gather(h, buf, fo, pl, [kl[0], 4097])[0] == h.lib.PE_ERR_INVAL
    assert gather(h, buf, fo, pl, kl, base=-1)[0] == h.lib.PE_ERR_INVAL
    assert gather(h, buf, [], [], [])[0] == h.lib.PE_OK


def _check_fuzz(h, buf):
    rc, n, consumed, fo, pl, kl = parse(h, buf)
    assert rc in (h.lib.PE_OK, h.lib.PE_ERR_CORRUPT)
    assert consumed <= len(buf)
    at = 0
    for i in range(n):
        assert fo[i] == at  # frames are contiguous from 0
        assert -1 <= kl[i] <= 4096
        at += 6 + max(kl[i], 0) + pl[i]
        assert at <= consumed
    assert at == consumed
    if rc == h.lib.PE_OK:
        assert len(buf) - consumed < 6 or consumed + 6 + pl_key_len(buf, consumed) > len(buf)
    rc2, data, offs = gather(h, buf, fo, pl, kl)
    assert rc2 == h.lib.PE_OK
    assert len(data) == sum(pl) and offs[-1] == len(data)


def pl_key_len(buf, at):
    plen, klen = struct.unpack_from("<IH", buf, at)
    return plen + (0 if klen == 65535 else klen)


@settings(max_examples=400, deadline=None)
@given(st.binary(max_size=300))
def test_fuzz_random_bytes(h, buf):
    _check_fuzz(h, buf)


@settings(max_examples=300, deadline=None)
@given(events, st.lists(st.tuples(st.integers(0, 10_000), st.integers(0, 255)), max_size=6),
       st.integers(0, 10_000))
def test_fuzz_mutated_frames(h, evs, flips, cut):
    buf = bytearray(b"".join(h.frame(k, p) for k, p in evs))
    for at, val in flips:
        if buf:
            buf[at % len(buf)] = val
    _check_fuzz(h, bytes(buf[: cut % (len(buf) + 1)]))
