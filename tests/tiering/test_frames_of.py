"""The frames a cold read rebuilds from a tier-2 row group (``coldreads.frames_of``, C's
``pe_columns_to_frames``) are exactly the journal's frames of those rows, and the check without
them (``rows_length``, ``pe_rows_check``) agrees on their length, whatever the keys,
payloads and slicing of the Arrow arrays; rows that are not back to back, or that cannot be
frames, are CorruptDataError, never bytes served as events."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pravega_embedded.errors import CorruptDataError
from pravega_embedded.frames import FRAME_HEADER_SIZE, NO_KEY
from pravega_embedded.tiering.coldreads import frames_of, rows_length
from pravega_embedded.tiering.parquetfile import rows_table


def journal_frame(key: str | None, payload: bytes) -> bytes:
    kb = b"" if key is None else key.encode()
    return (len(payload).to_bytes(4, "little") + (NO_KEY if key is None else len(kb)).to_bytes(2, "little")
            + kb + payload)


def table_of(rows: list[tuple[str | None, bytes]], first: int) -> pa.Table:
    offsets, at = [], first
    for key, payload in rows:
        offsets.append(at)
        at += len(journal_frame(key, payload))
    return rows_table(offsets, [k for k, _ in rows], [p for _, p in rows], [0] * len(rows))


rows_st = st.lists(st.tuples(st.one_of(st.none(), st.text(max_size=20)), st.binary(max_size=64)),
                   min_size=1, max_size=40)


@settings(max_examples=200, deadline=None)
@given(rows=rows_st, first=st.integers(0, 1 << 40), cut=st.integers(0, 39))
def test_rebuilt_frames_are_the_journals_frames(rows, first, cut):
    table = table_of(rows, first)
    assert frames_of(table, "t").to_pybytes() == b"".join(journal_frame(k, p) for k, p in rows)
    assert rows_length(table, "t") == sum(len(journal_frame(k, p)) for k, p in rows)  # no frames
    # a slice (Arrow arrays with a non-zero offset, as a row group read in part gives)
    cut = min(cut, len(rows) - 1)
    part = table.slice(cut)
    assert frames_of(part, "t").to_pybytes() == b"".join(journal_frame(k, p) for k, p in rows[cut:])
    assert rows_length(part, "t") == sum(len(journal_frame(k, p)) for k, p in rows[cut:])


@settings(max_examples=100, deadline=None)
@given(rows=rows_st.filter(lambda r: len(r) > 1), at=st.integers(1, 39), shift=st.sampled_from([-1, 1, 7]))
def test_rows_that_are_not_back_to_back_are_corrupt_data(rows, at, shift):
    table = table_of(rows, 1000)
    at = min(at, len(rows) - 1)
    offs = table.column("offset").to_pylist()
    offs[at] += shift
    bad = table.set_column(0, "offset", pa.array(offs, pa.int64()))
    with pytest.raises(CorruptDataError, match="do not cover"):
        frames_of(bad, "t")
    with pytest.raises(CorruptDataError, match="do not cover"):
        rows_length(bad, "t")


def test_a_key_too_long_for_a_frame_is_corrupt_data():
    key = "x" * 70_000  # longer than a frame's u16 key length
    table = rows_table([0, FRAME_HEADER_SIZE + 2], ["k", key], [b"a", b"b"], [0, 0])
    with pytest.raises(CorruptDataError, match="not events of this store"):
        frames_of(table, "t")
    with pytest.raises(CorruptDataError, match="not events of this store"):
        rows_length(table, "t")
