"""pe_crc32 (the Parquet page CRC, zlib's crc32) against zlib: inputs under 64 bytes take the
table path, longer ones the PCLMULQDQ path (where the CPU has it) and the table for their
last bytes, at every alignment and with any seed."""

from __future__ import annotations

import os
import zlib

from hypothesis import given, settings
from hypothesis import strategies as st


def _crc(h, data: bytes, seed: int = 0, offset: int = 0) -> int:
    out = h.ffi.new("uint32_t *")
    buf = h.ffi.from_buffer(data)
    assert h.lib.pe_crc32(buf + offset, len(data) - offset, seed, out) == h.lib.PE_OK
    return out[0]


def test_known_vectors(h):
    assert _crc(h, b"123456789") == 0xCBF43926
    assert _crc(h, b"") == 0
    assert _crc(h, bytes(64)) == zlib.crc32(bytes(64))


def test_null_with_length_is_invalid(h):
    out = h.ffi.new("uint32_t *")
    assert h.lib.pe_crc32(h.ffi.NULL, 1, 0, out) == h.lib.PE_ERR_INVAL
    assert h.lib.pe_crc32(h.ffi.NULL, 0, 0, out) == h.lib.PE_OK
    assert out[0] == 0


def test_every_length_around_the_fold_sizes_matches_zlib(h):
    data = os.urandom(700)
    for n in range(0, 300):
        assert _crc(h, data[:n]) == zlib.crc32(data[:n]), n
    for n in (511, 512, 513, 639, 640, 641, 700):
        assert _crc(h, data[:n], 0x12345678) == zlib.crc32(data[:n], 0x12345678), n


def test_large_buffers_match_zlib(h):
    for n in (65_536, 1_000_003, 4 << 20):
        data = os.urandom(n)
        assert _crc(h, data) == zlib.crc32(data)


@settings(max_examples=300, deadline=None)
@given(st.binary(max_size=3000), st.integers(0, 15), st.integers(0, 2**32 - 1))
def test_matches_zlib_at_any_alignment_and_seed(h, data, offset, seed):
    data = bytes(offset) + data
    assert _crc(h, data, seed, offset) == zlib.crc32(data[offset:], seed)


@settings(max_examples=200, deadline=None)
@given(st.binary(max_size=2000), st.binary(max_size=2000))
def test_incremental_equals_one_shot(h, a, b):
    assert _crc(h, b, _crc(h, a)) == _crc(h, a + b)
