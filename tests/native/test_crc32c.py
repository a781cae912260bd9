"""pe_crc32c against known vectors and a pure-Python reference (covers whichever of the SSE4.2
and table paths this CPU takes)."""

from __future__ import annotations

import os

from hypothesis import given, settings
from hypothesis import strategies as st


def _crc(h, data: bytes, seed: int = 0, offset: int = 0) -> int:
    out = h.ffi.new("uint32_t *")
    buf = h.ffi.from_buffer(data)
    assert h.lib.pe_crc32c(buf + offset, len(data) - offset, seed, out) == h.lib.PE_OK
    return out[0]


def test_known_vectors(h):
    assert _crc(h, b"123456789") == 0xE3069283
    assert _crc(h, b"") == 0
    assert _crc(h, bytes(32)) == 0x8A9136AA
    assert _crc(h, b"\xff" * 32) == 0x62A8AB43
    assert _crc(h, bytes(range(32))) == 0x46DD794E
    assert h.crc32c_ref(b"123456789") == 0xE3069283


def test_null_with_length_is_invalid(h):
    out = h.ffi.new("uint32_t *")
    assert h.lib.pe_crc32c(h.ffi.NULL, 1, 0, out) == h.lib.PE_ERR_INVAL
    assert h.lib.pe_crc32c(h.ffi.NULL, 0, 0, out) == h.lib.PE_OK
    assert out[0] == 0


def test_large_buffer_matches_reference(h):
    data = os.urandom(100_003)
    assert _crc(h, data) == h.crc32c_ref(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=600), st.integers(0, 15), st.integers(0, 2**32 - 1))
def test_matches_reference_at_any_alignment(h, data, offset, seed):
    data = bytes(offset) + data
    assert _crc(h, data, seed, offset) == h.crc32c_ref(data[offset:], seed)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=400), st.binary(max_size=400))
def test_incremental_equals_one_shot(h, a, b):
    assert _crc(h, b, _crc(h, a)) == _crc(h, a + b)
