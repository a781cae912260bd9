"""The tier-2 contract, run against three back ends (``conftest.backend``): a local folder,
fsspec's ``memory://`` and S3 through s3fs against moto's server. After ``flush_tier2`` plain
pyarrow and DuckDB see exactly the acknowledged events; ``pe.open_tier2`` lists and reads the
same history with no store; a store whose journal files were reclaimed reads its history back
from tier 2 (events with and without keys, large events, byte streams, scaled streams)."""

from __future__ import annotations

import time

import duckdb
import pyarrow.dataset as ds
import pytest

import pravega_embedded as pe
from pravega_embedded.errors import (InvalidStreamCutError, ScopeNotFoundError,
                                     StreamKindError, StreamNotFoundError)

MiB = 1 << 20


def open_store(path, backend, **kw):
    return pe.open(path, tier2=backend.url, tier2_options=backend.options, roll_bytes=MiB,
                   tier2_file_bytes=kw.pop("file_bytes", 256 << 10), **kw)


def plain_events(backend, scope: str, stream: str) -> list[tuple[int, int, str | None, bytes]]:
    """(segment, offset, key, event) of every row, read by pyarrow with no pravega_embedded."""
    fs, root = backend.fs()
    d = ds.dataset(f"{root}/scope={scope}/stream={stream}", filesystem=fs, format="parquet",
                   partitioning="hive", exclude_invalid_files=False)
    t = d.to_table(columns=["segment", "offset", "routing_key", "event"])
    rows = zip(*(t.column(c).to_pylist() for c in ("segment", "offset", "routing_key", "event")))
    return sorted((int(s), o, k, e) for s, o, k, e in rows)


def duck_count(backend, scope: str, stream: str) -> int:
    fs, root = backend.fs()
    con = duckdb.connect()
    if backend.name == "local":
        glob = f"{root}/scope={scope}/stream={stream}/**/*.parquet"
    else:
        con.register_filesystem(fs)
        glob = f"{backend.url.split('://')[0]}://{root}/scope={scope}/stream={stream}/**/*.parquet"
    return con.sql(f"SELECT count(*) FROM read_parquet('{glob}', hive_partitioning=1)").fetchall()[0][0]


def make(store, stream: str, n: int = 1) -> None:
    store.create_scope("iot", exist_ok=True)
    store.create_stream("iot", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)))


def test_events_round_trip_through_plain_readers_open_tier2_and_cold_reads(tmp_path, backend):
    want = [(f"k{i % 5}" if i % 3 else None, b"ev-%06d-" % i + b"p" * 400) for i in range(6000)]
    with open_store(tmp_path / "data", backend) as store:
        make(store, "s", 3)
        with store.create_writer("iot", "s") as w:
            for key, ev in want:
                w.write_event(ev, routing_key=key)
        store.flush_tier2(timeout=120)
        status = store.tiering_status()
        assert status.state == "ok" and status.untiered_bytes == 0 and status.files >= 3
        assert status.local_bytes < 2 * MiB < status.tiered_bytes  # the journal was reclaimed
        from_store = [(ev.segment_id, ev.offset, ev.routing_key, ev.event)
                      for ev in store.read_slice("iot", "s")]  # read back from tier 2
        info = store.stream_info("iot", "s")
    assert sorted((k or "", e) for _, _, k, e in from_store) == sorted((k or "", e) for k, e in want)
    for key in ("k1", "k2"):  # per key in write order
        assert [e for _, _, k, e in from_store if k == key] == [e for k, e in want if k == key]
    assert sorted(from_store) == plain_events(backend, "iot", "s")
    assert duck_count(backend, "iot", "s") == len(want)

    with pe.open_tier2(backend.url, storage_options=backend.options) as t2:
        assert t2.list_scopes() == ["iot"] and t2.list_streams("iot") == ["s"]
        ti = t2.stream_info("iot", "s")
        assert ti.tail == info.tail and ti.head == info.head and ti.events == len(want)
        assert {n.segment_id for n in ti.segments} == {s.segment_id for s in info.segments}
        got = [(ev.segment_id, ev.offset, ev.routing_key, ev.event) for ev in t2.read_slice("iot", "s")]
        assert got == from_store
        table = t2.read_slice("iot", "s").to_arrow()
        assert table.column("event").to_pylist() == [e for *_, e in from_store]
        with pytest.raises(StreamNotFoundError):
            t2.stream_info("iot", "nope")
        with pytest.raises(ScopeNotFoundError):
            t2.list_streams("nope")


def test_open_tier2_reads_between_cuts_as_the_store_does(tmp_path, backend):
    with open_store(tmp_path / "data", backend) as store:
        make(store, "s", 2)
        with store.create_writer("iot", "s") as w:
            for i in range(300):
                w.write_event(b"a%04d" % i, routing_key=f"k{i % 4}")
        cut_a = store.stream_info("iot", "s").tail
        with store.create_writer("iot", "s") as w:
            for i in range(300):
                w.write_event(b"b%04d" % i, routing_key=f"k{i % 4}")
        cut_b = store.stream_info("iot", "s").tail
        with store.create_writer("iot", "s") as w:
            w.write_event(b"after")
        store.flush_tier2(timeout=120)
        want = [ev.event for ev in store.read_slice("iot", "s", start=cut_a, end=cut_b)]
    assert len(want) == 300 and all(e.startswith(b"b") for e in want)
    t2 = pe.open_tier2(backend.url, storage_options=backend.options)
    assert [ev.event for ev in t2.read_slice("iot", "s", start=cut_a, end=cut_b)] == want
    assert t2.read_slice("iot", "s", start=cut_a, end=cut_b).to_arrow().num_rows == 300
    sid, off = cut_a.positions[0]
    inside = pe.StreamCut.of("iot", "s", {**cut_a.as_dict(), sid: off + 1})
    with pytest.raises(InvalidStreamCutError, match="not at an event"):
        t2.read_slice("iot", "s", start=inside)
    past = pe.StreamCut.of("iot", "s", {s: o + 10**6 for s, o in cut_b.positions})
    with pytest.raises(InvalidStreamCutError):
        t2.read_slice("iot", "s", end=past)
    with pytest.raises(InvalidStreamCutError, match="not of iot/s"):
        t2.read_slice("iot", "s", start=pe.StreamCut.of("iot", "other", {0: 0}))


def test_scaled_stream_and_large_events_round_trip(tmp_path, backend):
    big = bytes(range(256)) * (36 * 1024)  # 9 MiB: a large event, one whole row
    with open_store(tmp_path / "data", backend) as store:
        make(store, "s", 1)
        with store.create_writer("iot", "s") as w:
            for i in range(200):
                w.write_event(b"before-%d" % i, routing_key=f"k{i % 9}")
            w.write_event(big, routing_key="big")
        seg0 = store.stream_info("iot", "s").segments[0].segment_id
        store.scale_stream("iot", "s", [seg0], [(0.0, 0.5), (0.5, 1.0)])
        with store.create_writer("iot", "s") as w:
            for i in range(200):
                w.write_event(b"after-%d" % i, routing_key=f"k{i % 9}")
        store.flush_tier2(timeout=120)
        from_store = [(ev.segment_id, ev.offset, ev.event) for ev in store.read_slice("iot", "s")]
    assert sum(e == big for *_, e in from_store) == 1 and len(from_store) == 401
    assert sorted(from_store) == [(s, o, e) for s, o, _, e in plain_events(backend, "iot", "s")]
    t2 = pe.open_tier2(backend.url, storage_options=backend.options)
    info = t2.stream_info("iot", "s")
    sealed = [n for n in info.segments if n.sealed]
    assert [n.segment_id for n in sealed] == [seg0] and len(sealed[0].successors) == 2
    assert [(ev.segment_id, ev.offset, ev.event) for ev in t2.read_slice("iot", "s")] == from_store


def test_byte_streams_tier_and_read_back_through_bytestream(tmp_path, backend):
    data = bytes(i * 7 % 251 for i in range(3 * MiB + 12345))
    with open_store(tmp_path / "data", backend) as store:
        store.create_scope("iot")
        with store.create_byte_stream("iot", "raw") as bs:
            for at in range(0, len(data), 100_000):
                bs.write(data[at : at + 100_000])
            bs.flush()
        store.flush_tier2(timeout=120)
        assert store.tiering_status().local_bytes < 2 * MiB  # read back from tier 2 below
        with store.create_byte_stream("iot", "raw") as bs:
            bs.seek(1_000_000)
            assert bs.read(5000) == data[1_000_000:1_005_000]
            bs.seek(0)
            assert bs.read() == data
    t2 = pe.open_tier2(backend.url, storage_options=backend.options)
    assert t2.stream_info("iot", "raw").kind == "bytes"
    with pytest.raises(StreamKindError):
        t2.read_slice("iot", "raw")
    fs, root = backend.fs()
    t = ds.dataset(f"{root}/scope=iot/stream=raw", filesystem=fs, format="parquet",
                   partitioning="hive").to_table().sort_by("offset")
    assert b"".join(t.column("event").to_pylist()) == data  # plain readers get the bytes too


def test_a_tier2_root_with_nothing_in_it_lists_nothing(backend):
    t2 = pe.open_tier2(backend.url, storage_options=backend.options)
    assert t2.list_scopes() == []
    with pytest.raises(StreamNotFoundError):
        t2.read_slice("iot", "s")
    t2.close()
    t2.close()
    with pytest.raises(pe.errors.StoreClosedError):
        t2.list_scopes()


def test_truncation_reaches_tier2_plain_readers_see_exactly_what_is_left(tmp_path, backend):
    with open_store(tmp_path / "data", backend, file_bytes=64 << 10, tier2_delete_grace=0) as store:
        make(store, "s", 2)
        evs = [b"t%05d" % i + b"q" * 200 for i in range(3000)]
        with store.create_writer("iot", "s") as w:
            for i, ev in enumerate(evs):
                w.write_event(ev, routing_key=f"k{i % 6}")
                if i % 100 == 99:
                    w.flush()  # sections of 100 events: cuts inside files are possible
        store.flush_tier2(timeout=120)
        files_before = store.tiering_status().files
        # a cut in the middle of the stream: some files wholly before it, one straddling it
        all_events = list(store.read_slice("iot", "s"))
        by_seg: dict[int, list] = {}
        for ev in all_events:
            by_seg.setdefault(ev.segment_id, []).append(ev)
        cut = pe.StreamCut.of("iot", "s", {sid: lst[len(lst) // 2 + 7].offset
                                           for sid, lst in by_seg.items()})
        store.truncate_stream("iot", "s", cut)
        store.flush_tier2(timeout=120)
        left = [(ev.segment_id, ev.offset, ev.routing_key, ev.event) for ev in store.read_slice("iot", "s")]
        assert store.tiering_status().files < files_before
    keep = {sid: off for sid, off in cut.positions}
    want = sorted((ev.segment_id, ev.offset, ev.routing_key, ev.event) for ev in all_events
                  if ev.offset >= keep[ev.segment_id])
    assert sorted(left) == want and len(want) < len(all_events)
    assert plain_events(backend, "iot", "s") == want  # no truncated event in any file
    assert duck_count(backend, "iot", "s") == len(want)
    t2 = pe.open_tier2(backend.url, storage_options=backend.options)
    assert t2.stream_info("iot", "s").head == cut
    assert sorted((e.segment_id, e.offset, e.routing_key, e.event) for e in t2.read_slice("iot", "s")) == want
    with pytest.raises(pe.errors.TruncatedDataError):
        t2.read_slice("iot", "s", start=pe.StreamCut.of("iot", "s", {sid: 0 for sid in keep}))


def test_a_byte_stream_truncated_inside_a_chunk_keeps_exactly_the_bytes_after(tmp_path, backend):
    data = bytes(i * 13 % 251 for i in range(600_000))
    with open_store(tmp_path / "data", backend, tier2_delete_grace=0) as store:
        store.create_scope("iot")
        with store.create_byte_stream("iot", "raw") as bs:
            for at in range(0, len(data), 50_000):
                bs.write(data[at : at + 50_000])
            bs.flush()
            store.flush_tier2(timeout=120)
            bs.truncate_before(123_457)  # inside a 50 000-byte chunk
            store.flush_tier2(timeout=120)
            bs.seek(123_457)
            assert bs.read() == data[123_457:]
    fs, root = backend.fs()
    t = ds.dataset(f"{root}/scope=iot/stream=raw", filesystem=fs, format="parquet",
                   partitioning="hive").to_table().sort_by("offset")
    assert t.column("offset").to_pylist()[0] == 123_457
    assert b"".join(t.column("event").to_pylist()) == data[123_457:]


def test_files_left_out_by_a_truncation_stay_for_the_grace(tmp_path, backend):
    with open_store(tmp_path / "data", backend, file_bytes=4096, tier2_delete_grace=3600) as store:
        make(store, "s")
        with store.create_writer("iot", "s") as w:
            for i in range(400):
                w.write_event(b"g%04d" % i + b"z" * 100)
                if i % 40 == 39:
                    w.flush()
        store.flush_tier2(timeout=120)
        tail = store.stream_info("iot", "s").tail
        store.truncate_stream("iot", "s", tail)
        store.flush_tier2(timeout=120)
        assert store.tiering_status().files == 0
    assert len(plain_events(backend, "iot", "s")) == 400  # still there: a reader may be on them
    t2 = pe.open_tier2(backend.url, storage_options=backend.options)
    assert list(t2.read_slice("iot", "s")) == [] and t2.stream_info("iot", "s").files == 0


def test_a_time_lookup_in_tier2_alone_equals_the_stores(tmp_path, backend):
    """``pe.open_tier2(url).get_stream_cut_at(t)`` gives the store's cut for every mark, across
    a scaling, from the manifest and the files alone."""
    def mark():
        t = time.time_ns()
        while time.time_ns() <= t + 1000:
            pass
        return t + 1

    marks, cuts = [], []
    with open_store(tmp_path / "data", backend, file_bytes=64 << 10) as store:
        make(store, "s", 2)
        for rnd in range(4):
            marks.append(mark())
            if rnd == 2:
                first = min(sid for sid, _ in store.stream_info("iot", "s").tail.positions)
                store.scale_stream("iot", "s", [first], [(0.0, 0.2), (0.2, 0.5)])
            with store.create_writer("iot", "s") as w:
                for i in range(600):
                    w.write_event(b"r%d-%04d-" % (rnd, i) + b"p" * 300, routing_key=f"k{i % 9}")
        store.flush_tier2(timeout=120)
        assert store.tiering_status().untiered_bytes == 0
        cuts = [store.get_stream_cut_at("iot", "s", t / 1e9) for t in marks]
        counts = [len(list(store.read_slice("iot", "s", start=c))) for c in cuts]
    assert counts == [2400, 1800, 1200, 600]
    with pe.open_tier2(backend.url, backend.options) as t2:
        assert [t2.get_stream_cut_at("iot", "s", t / 1e9) for t in marks] == cuts
        assert [t2.read_slice("iot", "s", start=c).to_arrow().num_rows for c in cuts] == counts
