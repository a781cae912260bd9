"""Row groups encoded side by side and joined into one file (tiering/footer.py, parquetfile.py):
the file is, byte for byte, the one pyarrow's writer writes one row group after the other;
the footer codec round-trips pyarrow's footers and refuses damaged ones with CorruptDataError."""

from __future__ import annotations

import json
import tempfile
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pravega_embedded.errors import CorruptDataError
from pravega_embedded.tiering import footer as F
from pravega_embedded.tiering import parquetfile as pqf
from pravega_embedded.tiering.layout import (COMPRESSION, DICTIONARY_COLUMNS, LAYOUT_VERSION, PARQUET_METADATA_KEY,
                                             SCHEMA, STATISTICS_COLUMNS)
from pravega_embedded.tiering.parquetfile import SegmentRows, file_rel, read_segment_file, write_segment_file
from pravega_embedded.tiering.target import Tier2Target

T0 = 1_764_000_000_000_000  # µs


def table(events: list[bytes], keys: list[str | None], first: int = 0) -> pa.Table:
    offsets, at = [], first
    for e in events:
        offsets.append(at)
        at += 6 + len(e) + 8
    return pa.table([pa.array(offsets, pa.int64()), pa.array(keys, pa.string()),
                     pa.array(events, pa.binary()),
                     pa.array([T0 + i for i in range(len(events))], pa.int64()).cast(
                         SCHEMA.field("write_time").type)], schema=SCHEMA)


def serial_file(groups: list[pa.Table], meta: dict) -> bytes:
    """What pyarrow's own writer makes of ``groups``, one row group after the other."""
    sink = pa.BufferOutputStream()
    w = pq.ParquetWriter(sink, SCHEMA, compression=COMPRESSION, write_statistics=list(STATISTICS_COLUMNS),
                         use_dictionary=list(DICTIONARY_COLUMNS), write_page_checksum=True)
    for g in groups:
        w.write_table(g, g.num_rows)
    w.add_key_value_metadata({PARQUET_METADATA_KEY: json.dumps(meta, sort_keys=True)})
    w.close()
    return sink.getvalue().to_pybytes()


def write_and_read_bytes(root: str, groups: list[pa.Table], end: int) -> tuple[bytes, dict]:
    t = Tier2Target(root)
    first = groups[0].column("offset")[0].as_py()
    f = write_segment_file(t, "iot", "s", 7, SegmentRows(first, end, iter(groups)))
    with open(f"{root}/{file_rel('iot', 's', f)}", "rb") as fh:
        got = fh.read()
    meta = {"format": LAYOUT_VERSION, "scope": "iot", "stream": "s", "segment": 7, "first": first,
            "end": end, "events": sum(g.num_rows for g in groups)}
    assert f.size == len(got) and f.events == meta["events"]
    return got, meta


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.lists(st.tuples(st.binary(max_size=300), st.one_of(st.none(), st.sampled_from(["a", "ключ", "k" * 40]))),
                min_size=1, max_size=120),
       st.lists(st.integers(1, 40), min_size=1, max_size=8))
def test_row_groups_encoded_side_by_side_make_the_file_a_serial_writer_makes(rows, cuts):
    tab = table([e for e, _ in rows], [k for _, k in rows])
    groups, at = [], 0
    for c in cuts:
        if at < tab.num_rows:
            groups.append(tab.slice(at, c))
            at += c
    if at < tab.num_rows:
        groups.append(tab.slice(at))
    end = tab.column("offset")[-1].as_py() + 1
    with tempfile.TemporaryDirectory() as root:
        got, meta = write_and_read_bytes(root, groups, end)
    assert got == serial_file(groups, meta)  # every offset in the footer moved right
    back = pq.read_table(pa.BufferReader(got))
    assert back.equals(tab.replace_schema_metadata(back.schema.metadata))
    assert pq.read_metadata(pa.BufferReader(got)).num_row_groups == len(groups)


def test_a_file_of_many_large_row_groups_reads_back_through_every_engine(tmp_path):
    import duckdb
    big = [bytes([i]) * (3 << 20) for i in range(5)] + [b"x" * 100] * 1000 + [bytes(range(256)) * 4096]
    tab = table(big, [None if i % 2 else f"k{i % 5}" for i in range(len(big))])
    groups = [tab.slice(0, 2), tab.slice(2, 3), tab.slice(5, 500), tab.slice(505, 500), tab.slice(1005)]
    got, meta = write_and_read_bytes(str(tmp_path / "t2"), groups, tab.column("offset")[-1].as_py() + 1)
    assert got == serial_file(groups, meta)
    path = tmp_path / "t2" / "scope=iot" / "stream=s" / "segment=7"
    n, total = duckdb.sql(f"SELECT count(*), sum(octet_length(event)) FROM read_parquet('{path}/*.parquet')").fetchall()[0]
    assert (n, total) == (len(big), sum(map(len, big)))
    f = pqf.TieredFile(7, 0, tab.column("offset")[-1].as_py() + 1, len(big), len(got), T0, T0 + len(big) - 1)
    back = read_segment_file(Tier2Target(str(tmp_path / "t2")), "iot", "s", f, 0, None)
    assert back.column("event").to_pylist() == big


def test_row_groups_are_encoded_side_by_side(tmp_path, monkeypatch):
    real = pqf._encode_part
    lock = threading.Lock()
    now = [0]
    most = [0]

    def encode(group):
        with lock:
            now[0] += 1
            most[0] = max(most[0], now[0])
        try:
            deadline = time.monotonic() + 10
            while most[0] < 2 and time.monotonic() < deadline:  # wait for the next to start
                time.sleep(0.001)
            return real(group)
        finally:
            with lock:
                now[0] -= 1

    monkeypatch.setattr(pqf, "_encode_part", encode)
    tab = table([b"e%d" % i for i in range(100)], [None] * 100)
    got, meta = write_and_read_bytes(str(tmp_path / "t2"), [tab.slice(i, 25) for i in range(0, 100, 25)], 10_000)
    assert most[0] >= 2
    assert got == serial_file([tab.slice(i, 25) for i in range(0, 100, 25)], meta)


def test_a_helper_that_finishes_takes_the_next_group_while_the_oldest_is_still_encoded(tmp_path, monkeypatch):
    """The next row group is queued before the wait for the oldest: with two helpers, the third
    group is encoded while the first still is (a slow group does not idle the other helper),
    and no more than one group waits in the queue."""
    real, real_add = pqf._encode_part, pqf._Count.add
    third_started = threading.Event()
    started: list[int] = []
    produced = [0]
    produced_while_oldest_ran = []
    overtaken = []

    def encode(group):
        first = group.column("offset")[0].as_py()
        started.append(first)
        if first == 0:  # the oldest: slow until the third group is under way
            overtaken.append(third_started.wait(10))
            produced_while_oldest_ran.append(produced[0])
        elif len(started) == 3:
            third_started.set()
        return real(group)

    def add(self, group):
        produced[0] += 1
        return real_add(self, group)

    monkeypatch.setattr(pqf, "_ENCODERS", 2)
    monkeypatch.setattr(pqf, "_encode_part", encode)
    monkeypatch.setattr(pqf._Count, "add", add)
    tab = table([b"e%d" % i for i in range(100)], [None] * 100)
    groups = [tab.slice(i, 20) for i in range(0, 100, 20)]
    got, meta = write_and_read_bytes(str(tmp_path / "t2"), groups, 10_000)
    assert overtaken == [True]  # the third group started before the first one's encoding ended
    assert produced_while_oldest_ran == [3]  # two helpers' groups and one queued, no more
    assert got == serial_file(groups, meta)


def test_a_failed_encode_is_raised_and_nothing_is_published(tmp_path, monkeypatch):
    real = pqf._encode_part
    calls = [0]

    def encode(group):
        calls[0] += 1
        if calls[0] == 3:
            raise OSError(5, "Input/output error")
        return real(group)

    monkeypatch.setattr(pqf, "_encode_part", encode)
    tab = table([b"e%d" % i for i in range(100)], [None] * 100)
    t = Tier2Target(str(tmp_path / "t2"))
    with pytest.raises(Exception) as info:
        write_segment_file(t, "iot", "s", 7, SegmentRows(0, 10_000, iter(tab.slice(i, 10) for i in range(0, 100, 10))))
    assert "Input/output error" in str(info.value)
    assert not list((tmp_path / "t2").rglob("*.parquet")) and not list((tmp_path / "t2").rglob("_*"))


# ---------------------------------------------------------------------------- the codec
def pyarrow_footer(tab: pa.Table, **kw) -> bytes:
    sink = pa.BufferOutputStream()
    pq.write_table(tab, sink, **kw)
    b = sink.getvalue().to_pybytes()
    n = int.from_bytes(b[-8:-4], "little")
    return b[len(b) - 8 - n:-8]


FOOTERS = [
    pyarrow_footer(table([b"a", b"b" * 100, b""], ["x", None, "y"]), compression="zstd",
                   write_page_checksum=True, row_group_size=1),
    pyarrow_footer(pa.table({"b": [True, False, None], "d": [1.5, None, -2.0], "l": [[1, 2], [], None],
                             "s": [{"x": 1}, None, {"x": 3}], "m": pa.array([[("k", 1)], None, []],
                                                                            pa.map_(pa.string(), pa.int32()))}),
                   write_page_index=True, sorting_columns=[pq.SortingColumn(0)]),
]


@pytest.mark.parametrize("footer", FOOTERS)
def test_pyarrow_footers_decode_and_encode_byte_for_byte(footer):
    s = F.decode(footer)
    assert F.encode(s) == footer


@settings(max_examples=600, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_damaged_footers_decode_or_raise_corrupt_data(data):
    base = bytearray(data.draw(st.sampled_from(FOOTERS)))
    how = data.draw(st.sampled_from(["flip", "cut", "random", "splice"]))
    if how == "flip":
        for _ in range(data.draw(st.integers(1, 8))):
            i = data.draw(st.integers(0, len(base) - 1))
            base[i] ^= 1 << data.draw(st.integers(0, 7))
    elif how == "cut":
        base = base[:data.draw(st.integers(0, len(base) - 1))]
    elif how == "random":
        base = bytearray(data.draw(st.binary(max_size=200)))
    else:
        i = data.draw(st.integers(0, len(base)))
        base[i:i] = data.draw(st.binary(min_size=1, max_size=12))
    try:
        s = F.decode(bytes(base))
    except CorruptDataError:
        return
    F.encode(s)  # whatever was read can be written


def test_deep_nesting_and_huge_sizes_are_refused_before_any_work():
    with pytest.raises(CorruptDataError, match="nested"):
        F.decode(b"\x1c" * 1000)  # struct in struct in struct ...
    with pytest.raises(CorruptDataError, match="nested"):
        F.decode(b"\x19" + b"\x19" * 5000)  # a list of a list of a list ...
    with pytest.raises(CorruptDataError, match="elements"):
        F.decode(b"\x19\xf5\xff\xff\xff\xff\x0f")  # a list of 2**32 i32s in 5 bytes
    with pytest.raises(CorruptDataError, match="bytes are named"):
        F.decode(b"\x18\xff\xff\xff\xff\x0f")  # a binary of 4 GiB
    with pytest.raises(CorruptDataError, match="follow"):
        F.decode(b"\x00\x00")


def test_footers_of_other_schemas_are_not_joined():
    a = F.decode(pyarrow_footer(table([b"a"], [None])))
    b = F.decode(pyarrow_footer(pa.table({"x": [1]})))
    with pytest.raises(CorruptDataError, match="another schema"):
        F.join_footers([a, b], [4, 100])


def test_parts_with_a_page_index_or_no_schema_are_not_joined():
    tab = table([b"a", b"b"], ["k", None])
    with_index = F.decode(pyarrow_footer(tab, write_page_index=True))
    with pytest.raises(CorruptDataError, match="page index"):
        F.join_footers([with_index], [4])
    plain = F.decode(pyarrow_footer(tab))
    plain.fields = [f for f in plain.fields if f.fid != 2]
    with pytest.raises(CorruptDataError, match="without a schema"):
        F.join_footers([plain], [4])


def test_varints_of_more_than_64_bits_are_refused():
    F.decode(b"\x16" + b"\xff" * 9 + b"\x01" + b"\x00")  # an i64 field of 64 bits: read
    with pytest.raises(CorruptDataError, match="64 bits"):
        F.decode(b"\x16" + b"\xff" * 9 + b"\x02" + b"\x00")


def test_each_group_is_written_once_it_and_those_before_it_are_encoded(tmp_path, monkeypatch):
    """A group goes to the file before the next groups are read, not in a burst at the end."""
    events: list[str] = []

    class Pool(pqf.ThreadPoolExecutor):
        def submit(self, fn, /, *args, **kwargs):
            f = super().submit(fn, *args, **kwargs)
            f.add_done_callback(lambda _: events.append("encoded"))  # after it is done()
            return f

    monkeypatch.setattr(pqf, "ThreadPoolExecutor", Pool)

    def groups():
        tab = table([b"e%d" % i for i in range(60)], [None] * 60)
        for i in range(0, 60, 10):
            deadline = time.monotonic() + 10
            while events.count("encoded") < i // 10 and time.monotonic() < deadline:
                time.sleep(0.001)  # the groups before this one are encoded
            events.append(f"read {i // 10}")
            yield tab.slice(i, 10)

    t = Tier2Target(str(tmp_path / "t2"))
    real_put = t.put_streamed

    def put_streamed(rel, write, exclusive=False):
        return real_put(rel, lambda sink, written: write(sink, lambda: (events.append("written"), written())),
                        exclusive=exclusive)

    monkeypatch.setattr(t, "put_streamed", put_streamed)
    write_segment_file(t, "iot", "s", 7, SegmentRows(0, 10_000, groups()))
    # every group but the last is written before the group two after it is read
    for k in range(4):
        assert events.index("read %d" % (k + 2)) > [i for i, e in enumerate(events) if e == "written"][k], events
