"""Tier-2 building blocks: the layout's names, complete-or-nothing puts, manifests and the
Parquet data files, on a local folder and on fsspec's memory:// file system; what DuckDB and
pyarrow see of a tier-2 folder with no pravega_embedded involved."""

from __future__ import annotations

import errno
import json
import os
import threading
import uuid

import duckdb
import pyarrow.dataset as ds
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pravega_embedded.errors import (AlreadyExistsError, CorruptDataError, FormatVersionError,
                                     InvalidConfigurationError, StorageError, StorageFullError,
                                     StoragePermissionError, tier2_error)
from pravega_embedded.tiering.layout import (file_name, manifest_dir, manifest_name,
                                             parse_file_name, parse_manifest_name, segment_dir,
                                             stage_name)
from pravega_embedded.tiering.manifest import (Manifest, SegmentNode, TieredFile, latest_manifest,
                                               publish_manifest)
from pravega_embedded.tiering.parquetfile import (SegmentRows, _groups, _spans, file_rel, read_segment_file,
                                                  write_segment_file)
from pravega_embedded.tiering.target import Tier2Target

T0 = 1_764_000_000_000_000  # µs


@pytest.fixture(params=["local", "memory"])
def target(request, tmp_path):
    if request.param == "local":
        return Tier2Target(str(tmp_path / "tier2"))
    return Tier2Target(f"memory://t2-{uuid.uuid4().hex}")


def manifest(version: int = 1, files: tuple[TieredFile, ...] = ()) -> Manifest:
    return Manifest("iot", "sensors", version,
                    (SegmentNode(0, 0.0, 0.5, True, (), (1 << 32 | 2,)),
                     SegmentNode(1, 0.5, 1.0, False),
                     SegmentNode(1 << 32 | 2, 0.0, 0.5, False, (0,), ())),
                    files, ((0, 0), (1, 0), (1 << 32 | 2, 0)), T0)


def tfile(seg: int, first: int, end: int) -> TieredFile:
    return TieredFile(seg, first, end, 3, 1000, T0, T0 + 5)


# ---------------------------------------------------------------------------- layout
@given(st.integers(0, (1 << 63) - 2), st.integers(1, 1 << 40))
def test_file_names_parse_back_and_sort_in_offset_order(first, length):
    end = min(first + length, (1 << 63) - 1)
    name = file_name(first, end)
    assert parse_file_name(name) == (first, end)
    assert (name < file_name(end, end + 1)) if end < (1 << 63) - 1 else True


@pytest.mark.parametrize("name", ["0-1.parquet", "00000000000000000001-00000000000000000001.parquet",
                                  "00000000000000000002-00000000000000000001.parquet",
                                  "00000000000000000000-00000000000000000001.parquet.partial",
                                  "_stage.ab.00000000000000000000-00000000000000000001.parquet.partial",
                                  "99999999999999999999-99999999999999999999.parquet"])
def test_names_that_are_not_data_files_are_refused(name):
    assert parse_file_name(name) is None


def test_staged_names_are_skipped_by_every_reader():
    s = stage_name(file_name(0, 10))
    assert s.startswith("_") and not s.endswith(".parquet")
    assert parse_manifest_name("_stage.x.00000000000000000001.json.partial") is None
    assert parse_manifest_name(manifest_name(7)) == 7


def test_paths_are_hive_partitions_of_valid_names():
    assert segment_dir("iot", "sensors", 1 << 32 | 2) == "scope=iot/stream=sensors/segment=4294967298"
    assert manifest_dir("iot", "sensors") == "scope=iot/stream=sensors/_manifest"
    for bad in ("..", "a/b", "_x", "x=y"):
        with pytest.raises(Exception):
            segment_dir(bad, "s", 0)


# ---------------------------------------------------------------------------- target
def test_put_publishes_whole_files_and_leaves_nothing_staged(target):
    target.put("a/b/c.bin", b"x" * 1000)
    target.put("a/b/c.bin", b"y" * 10)  # a replacement is whole too
    assert target.read("a/b/c.bin", 100) == b"y" * 10
    assert target.list("a/b") == ["c.bin"]
    assert target.list("no/such/folder") == []
    assert target.read("a/b/missing.bin", 100) is None


def test_exclusive_put_never_replaces(target):
    target.put("m/1.json", b"first", exclusive=True)
    with pytest.raises(AlreadyExistsError):
        target.put("m/1.json", b"second", exclusive=True)
    assert target.read("m/1.json", 100) == b"first"
    assert target.list("m") == ["1.json"]


def test_a_streamed_put_is_whole_or_nothing_and_failures_say_what(target):
    """``put_streamed`` (the data files: row groups go to the staged file as they are encoded)
    publishes what was written whole; an error of the writer is raised as it is, a file-system
    error (ENOSPC, EIO) as a StorageError; either leaves nothing behind, staged or published,
    and an exclusive put never replaces a file."""
    def pieces(sink, written):
        for i in range(5):
            sink.write(b"%d" % i * 100_000)
            written()

    assert target.put_streamed("a/f.bin", pieces, exclusive=True) == 500_000
    assert target.read("a/f.bin", 1 << 20) == b"".join(b"%d" % i * 100_000 for i in range(5))

    def full(sink, written):
        sink.write(b"x" * 1000)
        raise OSError(errno.ENOSPC, "No space left on device")
    with pytest.raises(StorageError, match="No space left") as err:
        target.put_streamed("a/g.bin", full)
    assert err.value.errno == errno.ENOSPC

    def damaged(sink, written):
        sink.write(b"x" * 1000)
        raise CorruptDataError("a damaged frame")
    with pytest.raises(CorruptDataError, match="damaged frame"):
        target.put_streamed("a/h.bin", damaged)
    with pytest.raises(AlreadyExistsError):
        target.put_streamed("a/f.bin", lambda sink, written: sink.write(b"other"),
                            exclusive=True)
    assert target.list("a") == ["f.bin"]  # nothing staged or partial left
    assert target.read("a/f.bin", 1 << 20)[:1] == b"0"


def test_a_streamed_put_starts_writing_back_each_piece_and_a_failed_hint_changes_nothing(
        tmp_path, monkeypatch):
    import pravega_embedded.tiering.target as target_mod
    from pravega_embedded._native import lib
    target = Tier2Target(str(tmp_path / "t2"))
    hints = []

    class Lib:  # pe_start_writeback as the OS would answer it, seen by the test
        PE_OK = lib.PE_OK

        def __init__(self, status):
            self.status = status

        def pe_start_writeback(self, fd):
            hints.append((fd, os.readlink(f"/proc/self/fd/{fd}")))
            return lib.pe_start_writeback(fd) if self.status == lib.PE_OK else self.status

    def pieces(sink, written):
        for i in range(3):
            sink.write(b"%d" % i * 100_000)
            written()

    for status in (lib.PE_OK, lib.PE_ERR_IO):
        hints.clear()
        monkeypatch.setattr(target_mod, "lib", Lib(status))
        assert target.put_streamed(f"a/{status}.bin", pieces) == 300_000
        assert len(hints) == 3 and all("_stage." in path for _fd, path in hints)
        assert target.read(f"a/{status}.bin", 1 << 20) == b"".join(b"%d" % i * 100_000 for i in range(3))
    assert target.list("a") == [f"{lib.PE_ERR_IO}.bin", f"{lib.PE_OK}.bin"]


@pytest.mark.parametrize("rel", ["", "/etc/passwd", "../x", "a/../../x", "a//b", "./a"])
def test_paths_outside_the_root_are_refused(target, rel):
    with pytest.raises(InvalidConfigurationError):
        target.put(rel, b"x")
    with pytest.raises(InvalidConfigurationError):
        target.read(rel, 10)


def test_a_read_never_allocates_past_its_cap(target):
    target.put("big.bin", b"z" * 5000)
    with pytest.raises(CorruptDataError, match="5,000 bytes"):
        target.read("big.bin", 4999)


def test_file_system_failures_become_storage_errors():
    e = tier2_error(OSError(errno.ENOSPC, "No space left"), "write a tier-2 file", url="s3://b/x")
    assert isinstance(e, StorageFullError) and "s3://b/x" in str(e)
    assert isinstance(tier2_error(PermissionError("Access Denied"), "list", url="s3://b"),
                      StoragePermissionError)
    e = tier2_error(ConnectionRefusedError("connect to 127.0.0.1:1 refused"), "write", url="s3://b/x")
    assert isinstance(e, StorageError) and "refused" in str(e) and "s3://b/x" in str(e)
    e = tier2_error(RuntimeError("endpoint unreachable"), "write", url="s3://b/x")
    assert type(e) is StorageError and e.errno == errno.EIO and "unreachable" in str(e)


def test_a_file_where_a_tier2_folder_belongs_is_a_storage_error(tmp_path):
    (tmp_path / "t2").write_bytes(b"not a folder")
    t = Tier2Target(str(tmp_path / "t2"))  # an open checks nothing: tier 2 may be away then
    with pytest.raises(StorageError, match="t2/scope=iot"):
        t.put("scope=iot/stream=s/x.bin", b"1")
    t = Tier2Target(str(tmp_path / "ok"))
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "scope=iot").write_bytes(b"in the way")
    with pytest.raises(StorageError, match="scope=iot"):
        t.put("scope=iot/stream=s/x.bin", b"1")


# ---------------------------------------------------------------------------- manifests
def test_manifests_round_trip_and_the_highest_version_wins(target):
    assert latest_manifest(target, "iot", "sensors") is None
    m1 = manifest(1, (tfile(0, 0, 100),))
    m2 = manifest(2, (tfile(0, 0, 100), tfile(0, 100, 250), tfile(1, 0, 10)))
    publish_manifest(target, m1)
    publish_manifest(target, m2)
    target.put(f"{manifest_dir('iot', 'sensors')}/notes.json", b"{}")  # not a manifest name
    got = latest_manifest(target, "iot", "sensors")
    assert got == m2
    assert [f.end for f in got.files_of(0)] == [100, 250] and got.tiered_end(1) == 10
    assert got.tiered_end(1 << 32 | 2) is None
    with pytest.raises(AlreadyExistsError, match="another store"):
        publish_manifest(target, manifest(2))


def test_a_damaged_newest_manifest_is_an_error_naming_it(target):
    publish_manifest(target, manifest(1))
    target.put(f"{manifest_dir('iot', 'sensors')}/{manifest_name(2)}", b'{"format": 1, "scope"')
    with pytest.raises(CorruptDataError, match=manifest_name(2)):
        latest_manifest(target, "iot", "sensors")


def test_a_manifest_of_a_newer_layout_says_to_upgrade(target):
    doc = json.loads(manifest(1).to_json())
    doc["format"] = 2
    target.put(f"{manifest_dir('iot', 'sensors')}/{manifest_name(1)}", json.dumps(doc).encode())
    with pytest.raises(FormatVersionError, match="upgrade"):
        latest_manifest(target, "iot", "sensors")


def test_a_manifest_copied_under_another_name_is_refused(target):
    publish_manifest(target, manifest(1))
    target.put(f"{manifest_dir('iot', 'sensors')}/{manifest_name(3)}", manifest(1).to_json())
    with pytest.raises(CorruptDataError, match="by hand"):
        latest_manifest(target, "iot", "sensors")


@pytest.mark.parametrize("change", [
    lambda d: d["files"].reverse(),
    lambda d: d["files"][0].update(first=50),  # name no longer its range
    lambda d: d["files"][1].update(first=50, name=file_name(50, 250)),  # overlaps
    lambda d: d["files"][0].update(segment=77),
    lambda d: d["segments"].append(dict(d["segments"][0])),
    lambda d: d["segments"][0].update(key_low=0.7),
    lambda d: d["segments"][0].update(key_high=float("inf")) if False else d["segments"][0].update(key_high=2),
    lambda d: d["segments"][0].update(sealed=1),
    lambda d: d["head"].append({"segment": 0, "offset": 5}),
    lambda d: d["head"][0].update(offset=-1),
    lambda d: d["head"][0].update(offset=True),
    lambda d: d.update(version=0),
    lambda d: d.update(scope="../etc"),
    lambda d: d.update(files={}),
    lambda d: d.pop("segments"),
    lambda d: d["files"][0].update(min_write_us=T0 + 9),
    lambda d: d["files"][0].update(events=1 << 64),
    lambda d: d["files"][0].update(events=0),
    lambda d: d["segments"][0].update(key_low=10 ** 400),  # float() of it would overflow
])
def test_inconsistent_manifests_are_refused(change):
    doc = json.loads(manifest(1, (tfile(0, 0, 100), tfile(0, 100, 250))).to_json())
    change(doc)
    with pytest.raises(CorruptDataError):
        Manifest.parse(json.dumps(doc).encode(), "memory://x")


@settings(max_examples=300, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_fuzzed_manifests_parse_or_raise_corrupt_data(data):
    base = manifest(1, (tfile(0, 0, 100), tfile(1, 0, 7))).to_json()
    how = data.draw(st.sampled_from(["bytes", "flip", "cut", "json"]))
    if how == "bytes":
        blob = data.draw(st.binary(max_size=300))
    elif how == "flip":
        i = data.draw(st.integers(0, len(base) - 1))
        blob = base[:i] + bytes([base[i] ^ data.draw(st.integers(1, 255))]) + base[i + 1:]
    elif how == "cut":
        blob = base[: data.draw(st.integers(0, len(base)))]
    else:
        leaf = st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5)
        tree = st.recursive(leaf, lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=8), c, max_size=4))
        doc = json.loads(base)
        key = data.draw(st.sampled_from(sorted(doc)))
        doc[key] = data.draw(tree)
        blob = json.dumps(doc).encode()
    try:
        m = Manifest.parse(blob, "memory://fuzz")
    except CorruptDataError:
        return
    assert Manifest.parse(m.to_json(), "memory://again") == m  # what parses is consistent


def test_a_manifest_in_another_encoding_is_refused():
    text = manifest(1).to_json().decode()
    with pytest.raises(CorruptDataError):
        Manifest.parse(text.encode("utf-16"), "memory://utf16")
    assert Manifest.parse(text.encode("utf-8"), "memory://utf8") == manifest(1)


@pytest.mark.parametrize("name", ["\uff10" * 20 + ".json", "\u0660" * 20 + "-" + "\u0665" * 20 + ".parquet"])
def test_names_with_digits_of_other_scripts_are_not_ours(name):
    assert parse_manifest_name(name) is None and parse_file_name(name) is None


def test_deeply_nested_json_is_corrupt_data_not_a_crash():
    with pytest.raises(CorruptDataError):
        Manifest.parse(b"[" * 100_000 + b"]" * 100_000, "memory://deep")


# ---------------------------------------------------------------------------- data files
def rows(n: int, first: int = 0, step: int = 10) -> SegmentRows:
    offs = list(range(first, first + n * step, step))
    return SegmentRows.from_lists(offs, [None if i % 3 == 0 else f"key-{i % 7}" for i in range(n)],
                       [b"" if i % 11 == 0 else f"event-{i}".encode() for i in range(n)],
                       [T0 + i for i in range(n)], offs[-1] + step)


def test_a_data_file_reads_back_exactly_and_by_offset_range(target):
    r = rows(1000)
    f = write_segment_file(target, "iot", "sensors", 1 << 32 | 2, r)
    assert (f.first, f.end, f.events) == (0, 10_000, 1000) and f.min_write_us == T0
    assert target.list(segment_dir("iot", "sensors", 1 << 32 | 2)) == [f.name]
    t = read_segment_file(target, "iot", "sensors", f)
    assert t.column("offset").to_pylist() == list(range(0, 10_000, 10))
    assert t.column("routing_key").to_pylist() == [None if i % 3 == 0 else f"key-{i % 7}" for i in range(1000)]
    assert t.column("event").to_pylist() == [b"" if i % 11 == 0 else f"event-{i}".encode() for i in range(1000)]
    assert [int(x.timestamp() * 1e6) for x in t.column("write_time").to_pylist()] == [T0 + i for i in range(1000)]
    part = read_segment_file(target, "iot", "sensors", f, 4995, 5030)
    assert part.column("offset").to_pylist() == [5000, 5010, 5020]


def test_offset_range_reads_touch_only_their_row_groups(tmp_path):
    import pyarrow.parquet as pq
    t = Tier2Target(str(tmp_path / "t2"))
    f = write_segment_file(t, "iot", "s", 0, rows(300_000, step=1))
    path = f"{t.root}/{file_rel('iot', 's', f)}"
    pf = pq.ParquetFile(path)
    assert pf.metadata.num_row_groups == 3  # 128 Ki rows each
    with open(path, "rb") as fh:
        spans = _spans(fh, pf.metadata, path)
    assert [(s.first, s.last) for s in spans] == [(0, 131_071), (131_072, 262_143), (262_144, 299_999)]
    assert _groups(spans, 140_000, 140_010) == [1]
    assert _groups(spans, 0, None) == [0, 1, 2]
    assert _groups(spans, 299_999, None) == [2]


def test_columns_readers_filter_on_have_statistics_and_keys_a_dictionary(tmp_path):
    """docs/format.md: min/max statistics on offset, routing_key and write_time (what engines
    prune row groups by), none on the events' bytes; a dictionary for the routing keys only."""
    import pyarrow.parquet as pq
    t = Tier2Target(str(tmp_path / "t2"))
    f = write_segment_file(t, "iot", "s", 0, rows(1000))
    meta = pq.ParquetFile(f"{t.root}/{file_rel('iot', 's', f)}").metadata.row_group(0)
    cols = {meta.column(i).path_in_schema: meta.column(i) for i in range(meta.num_columns)}
    assert {name for name, c in cols.items() if c.is_stats_set and c.statistics.has_min_max} == {
        "offset", "routing_key", "write_time"}
    assert (cols["offset"].statistics.min, cols["offset"].statistics.max) == (0, 9990)
    assert {name for name, c in cols.items() if c.has_dictionary_page} == {"routing_key"}
    assert cols["event"].compression == "ZSTD"


def test_reads_of_several_row_groups_read_them_side_by_side_in_order(target, monkeypatch):
    import pravega_embedded.tiering.parquetfile as pqf
    f = write_segment_file(target, "iot", "s", 0, rows(300_000, step=1))  # 3 row groups
    threads = set()
    real = pqf._opened

    def opened(t, rel):
        threads.add(threading.current_thread().name)
        return real(t, rel)

    monkeypatch.setattr(pqf, "_opened", opened)
    whole = read_segment_file(target, "iot", "s", f)
    assert whole.column("offset").to_pylist() == list(range(300_000))
    assert whole.column("event").to_pylist()[131_070:131_075] == [
        f"event-{i}".encode() if i % 11 else b"" for i in range(131_070, 131_075)]
    assert any(n.startswith("pe-parquet-read") for n in threads)
    part = read_segment_file(target, "iot", "s", f, 131_000, 262_200)  # across three groups
    assert part.column("offset").to_pylist() == list(range(131_000, 262_200))


def test_a_failure_of_one_of_the_side_by_side_reads_is_a_clear_error(target, monkeypatch):
    import pravega_embedded.tiering.parquetfile as pqf
    f = write_segment_file(target, "iot", "s", 0, rows(300_000, step=1))
    real = target.open_read

    def failing_after_the_footer(exc):
        calls = []

        def open_read(rel):
            calls.append(rel)
            if len(calls) > 1:  # the footer's handle opens; a row group's handle fails
                raise exc
            return real(rel)
        return open_read

    monkeypatch.setattr(target, "open_read",
                        failing_after_the_footer(OSError(errno.EIO, "Input/output error")))
    with pytest.raises(StorageError, match="Input/output error"):
        read_segment_file(target, "iot", "s", f)
    monkeypatch.setattr(target, "open_read", failing_after_the_footer(FileNotFoundError("gone")))
    with pytest.raises(CorruptDataError, match="missing"):
        read_segment_file(target, "iot", "s", f)
    assert pqf._READERS >= 2


def test_a_replaced_or_missing_data_file_is_corrupt_data(target):
    f = write_segment_file(target, "iot", "sensors", 0, rows(10))
    other = write_segment_file(target, "iot", "sensors", 0, rows(5, first=1000))
    target.put(file_rel("iot", "sensors", f), target.read(file_rel("iot", "sensors", other), 1 << 20))
    with pytest.raises(CorruptDataError, match="replaced or damaged"):
        read_segment_file(target, "iot", "sensors", f)
    target.put(file_rel("iot", "sensors", f), b"PAR1 not really")
    with pytest.raises(CorruptDataError):
        read_segment_file(target, "iot", "sensors", f)
    good = target.read(file_rel("iot", "sensors", other), 1 << 20)
    target.put(file_rel("iot", "sensors", f), good[:-20] + good[-8:])  # a damaged footer
    with pytest.raises(CorruptDataError, match="damaged"):
        read_segment_file(target, "iot", "sensors", f)
    target.delete(file_rel("iot", "sensors", f))
    with pytest.raises(CorruptDataError, match="missing"):
        read_segment_file(target, "iot", "sensors", f)


def test_a_data_file_is_never_written_over_another(target):
    f = write_segment_file(target, "iot", "sensors", 0, rows(10))
    before = target.read(file_rel("iot", "sensors", f), 1 << 20)
    with pytest.raises(AlreadyExistsError):
        write_segment_file(target, "iot", "sensors", 0, rows(10))
    assert target.read(file_rel("iot", "sensors", f), 1 << 20) == before


def test_plain_engines_read_the_folder_and_never_a_staged_file(tmp_path):
    t = Tier2Target(str(tmp_path / "t2"))
    write_segment_file(t, "iot", "sensors", 0, rows(100))
    write_segment_file(t, "iot", "sensors", 0, rows(50, first=1000))
    write_segment_file(t, "iot", "sensors", 1 << 32 | 2, rows(7))
    publish_manifest(t, manifest(1))
    seg_dir = tmp_path / "t2" / segment_dir("iot", "sensors", 0)
    (seg_dir / stage_name(file_name(2000, 3000))).write_bytes(b"half a file")  # a crash mid-put
    glob = f"{tmp_path}/t2/scope=iot/stream=sensors/**/*.parquet"
    n, segs, keys = duckdb.sql(
        f"SELECT count(*), count(DISTINCT segment), count(routing_key) "
        f"FROM read_parquet('{glob}', hive_partitioning=1)").fetchall()[0]
    assert (n, segs) == (157, 2) and keys == 157 - (34 + 17 + 3)
    table = ds.dataset(str(tmp_path / "t2"), partitioning="hive").to_table()
    assert table.num_rows == 157
    # pyarrow infers int32 partition values at most: a 64-bit segment id comes back as text
    assert sorted(set(table.column("segment").to_pylist())) == ["0", str(1 << 32 | 2)]
