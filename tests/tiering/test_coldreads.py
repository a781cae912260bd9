"""Once history is in tier 2 its journal files are deleted, and every way of reading reads it
back from the Parquet files exactly as written: readers, reader groups, slices to Arrow,
``fetch_event``, byte streams, large events; across a reopen too. A store opened without its
tier 2 says where the data is; damaged tier-2 files are CorruptDataError."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pyarrow as pa
import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError

MiB = 1 << 20


def journal_files(path: Path) -> list[Path]:
    return sorted((path / "journal").glob("*.pej"))


def fill(store, n: int = 6000, size: int = 1000, key=lambda i: f"k{i % 5}") -> list[bytes]:
    store.create_scope("iot", exist_ok=True)
    store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    want = [b"%06d-" % i + os.urandom(size) for i in range(n)]
    with store.create_writer("iot", "s") as w:
        for i, ev in enumerate(want):
            w.write_event(ev, routing_key=key(i))
    return want


def read_all(store) -> list[bytes]:
    with store.create_reader("iot", "s") as r:
        out = []
        while (ev := r.read_next_event(timeout=0)) is not None:
            out.append(ev.event)
    return out


def tier_and_reclaim(store, path: Path) -> None:
    before = len(journal_files(path))
    store.flush_tier2()
    store.reclaim()  # now: flush_tier2 leaves the deletion to the tierer's thread
    assert len(journal_files(path)) < before, "no journal file was reclaimed"
    assert len(journal_files(path)) <= 2


def test_reclaimed_history_reads_back_from_tier2_everywhere_and_after_reopen(tmp_path):
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0)
    with pe.open(path, **opts) as store:
        want = fill(store)
        pointers = {}
        with store.create_reader("iot", "s") as r:
            while (ev := r.read_next_event(timeout=0)) is not None:
                pointers[ev.event] = ev.event_pointer
        tier_and_reclaim(store, path)
        loads = store._engine.cold.loads
        got = read_all(store)
        assert sorted(got) == sorted(want) and len(got) == len(want)
        assert store._engine.cold.loads > loads, "nothing was read from tier 2"
        table = store.read_slice("iot", "s").to_arrow()
        assert sorted(table.column("event").to_pylist()) == sorted(want)
        for ev in want[::997]:
            assert store.fetch_event(pointers[ev]).event == ev
    with pe.open(path, **opts) as store:  # the deleted files are not missed at open
        got = read_all(store)
        assert sorted(got) == sorted(want) and len(got) == len(want)
        group = store.create_reader_group("g", [("iot", "s")])
        with group.create_reader("r1") as r:
            seen = []
            while len(seen) < len(want):
                ev = r.read_next_event(timeout=5)
                assert ev is not None, f"the group reader stopped after {len(seen)} events"
                if ev.event is not None:
                    seen.append(ev.event)
        assert sorted(seen) == sorted(want)


def test_per_key_order_is_kept_across_journal_and_tier2(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0) as store:
        fill(store, n=3000)
        tier_and_reclaim(store, path)
        with store.create_writer("iot", "s") as w:  # more, in the journal only
            for i in range(3000, 3500):
                w.write_event(b"%06d-tail" % i, routing_key=f"k{i % 5}")
        got = read_all(store)
    assert len(got) == 3500
    by_key: dict[int, list[int]] = {}
    for ev in got:
        n = int(ev[:6])
        by_key.setdefault(n % 5, []).append(n)
    assert all(v == sorted(v) for v in by_key.values()), "per-key order broken"


def test_byte_streams_and_large_events_read_back_from_tier2(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0) as store:
        store.create_scope("iot")
        data = os.urandom(5 * MiB)
        with store.create_byte_stream("iot", "blob") as bs:
            for i in range(0, len(data), 300_000):
                bs.write(data[i:i + 300_000])
                bs.flush()
        store.create_stream("iot", "big")
        big = [os.urandom(9 * MiB + i) for i in range(2)]
        with store.create_writer("iot", "big") as w:
            for ev in big:
                w.write_event(ev, routing_key="k")
        tier_and_reclaim(store, path)
        with store.create_byte_stream("iot", "blob") as bs:
            assert bs.read() == data
            for at in (0, 1, 299_999, 300_000, 3 * MiB + 17, len(data) - 5):
                bs.seek(at)
                assert bs.read(1000) == data[at:at + 1000]
        with store.create_reader("iot", "big") as r:
            assert [r.read_next_event(timeout=0).event for _ in big] == big


def test_a_store_opened_without_its_tier2_says_where_the_history_is(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0) as store:
        want = fill(store, n=3000)
        tier_and_reclaim(store, path)
    with pe.open(path, durability="none", tier2=False) as store:
        with pytest.raises(CorruptDataError, match="only in tier 2.*tier2=False"):
            read_all(store)
    with pe.open(path, durability="none") as store:
        assert sorted(read_all(store)) == sorted(want)


def test_damaged_tier2_files_are_corrupt_data_errors(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0) as store:
        fill(store, n=3000)
        tier_and_reclaim(store, path)
    victim = sorted((path / "tier2").rglob("*.parquet"))[0]
    raw = bytearray(victim.read_bytes())
    raw[len(raw) // 2: len(raw) // 2 + 64] = b"\xff" * 64
    victim.write_bytes(bytes(raw))
    with pe.open(path, durability="none") as store:
        with pytest.raises(CorruptDataError):
            read_all(store)
    victim.unlink()
    with pe.open(path, durability="none") as store:
        with pytest.raises(CorruptDataError, match="missing"):
            read_all(store)


def _sectioned(store, n: int, per_section: int) -> list:
    """One segment written in sections of ``per_section`` events, then tiered and reclaimed;
    the events as read (with offsets)."""
    store.create_scope("iot")
    store.create_stream("iot", "c")
    with store.create_writer("iot", "c") as w:
        for i in range(n):
            w.write_event(b"%06d-" % i + os.urandom(300), routing_key="k")
            if i % per_section == per_section - 1:
                w.flush()
    with store.create_reader("iot", "c") as r:
        evs = []
        while (ev := r.read_next_event(timeout=0)) is not None:
            evs.append(ev)
    return evs


def test_cuts_into_tiered_history_are_checked_like_cuts_into_the_journal(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0) as store:
        evs = _sectioned(store, 8000, 50)
        before = len(journal_files(path))
        store.flush_tier2()
        assert len(journal_files(path)) < before
        sid = evs[0].segment_id
        for ev in evs[50:-1:650] + evs[77:-1:911]:  # first events of sections, and others
            for bad in (ev.offset + 1, ev.offset + 6, ev.offset + ev.length - 1):
                cut = pe.StreamCut.of("iot", "c", {sid: bad})
                with pytest.raises(pe.errors.InvalidStreamCutError):
                    store.create_reader("iot", "c", start=cut)
                with pytest.raises(pe.errors.InvalidStreamCutError):
                    store.truncate_stream("iot", "c", cut)
            with store.create_reader("iot", "c", start=pe.StreamCut.of("iot", "c", {sid: ev.offset})) as r:
                assert r.read_next_event(timeout=0).event == ev.event


def test_history_from_a_head_inside_a_section_reads_back_after_reclaim(tmp_path):
    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0) as store:
        evs = _sectioned(store, 8000, 50)
        sid = evs[0].segment_id
        head = evs[1025]  # inside a section of 50
        store.truncate_stream("iot", "c", pe.StreamCut.of("iot", "c", {sid: head.offset}))
        before = len(journal_files(path))
        store.flush_tier2()
        assert len(journal_files(path)) < before
        with store.create_reader("iot", "c") as r:
            got = [r.read_next_event(timeout=0).event for _ in range(5)]
        assert got == [e.event for e in evs[1025:1030]]
        assert store.fetch_event(evs[1026].event_pointer).event == evs[1026].event
        cut = pe.StreamCut.of("iot", "c", {sid: evs[1027].offset})
        table = store.read_slice("iot", "c", start=cut).to_arrow()
        assert table.column("event").to_pylist() == [e.event for e in evs[1027:]]


def forged_store(tmp_path, change) -> Path:
    """A store whose history is only in tier 2, with its first data file rewritten (as a
    valid Parquet file of the layout, so only the rows' content is wrong) after ``change(keys,
    events)`` edited its rows' keys and payloads in place."""
    import pyarrow.parquet as pq

    from pravega_embedded.tiering.parquetfile import SegmentRows, write_segment_file
    from pravega_embedded.tiering.target import Tier2Target

    path = tmp_path / "data"
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB) as store:
        fill(store, n=3000)
        tier_and_reclaim(store, path)
    victim = sorted((path / "tier2").rglob("*.parquet"))[0]
    t = pq.read_table(victim)
    keys, events = t.column("routing_key").to_pylist(), t.column("event").to_pylist()
    change(keys, events)
    end = int(victim.stem.split("-")[1])
    rows = SegmentRows.from_lists(t.column("offset").to_pylist(), keys, events,
                                  [int(x.timestamp() * 1e6) for x in t.column("write_time").to_pylist()], end)
    victim.unlink()
    write_segment_file(Tier2Target(str(path / "tier2")), "iot", "s", int(victim.parent.name.split("=")[1]), rows)
    return path


def test_a_forged_file_whose_rows_cannot_be_events_is_corrupt_data(tmp_path):
    def long_key(keys, events):
        keys[0] = "x" * 70_000  # longer than a frame's u16 key length
    path = forged_store(tmp_path, long_key)
    with pe.open(path, durability="none") as store:
        with pytest.raises(CorruptDataError, match="not events of this store|do not cover"):
            read_all(store)
        with pytest.raises(CorruptDataError, match="not events of this store|do not cover"):
            store.read_slice("iot", "s").to_arrow()


def test_rows_of_a_slice_must_cover_its_range_across_row_groups_too():
    """Slices check their rows row group by row group (``_check_covers``, in C): a row group
    must start where the one before it ends."""
    from pravega_embedded.tiering.coldreads import _check_covers
    from pravega_embedded.tiering.parquetfile import rows_table

    def group(first, n):
        offs = [first + i * 11 for i in range(n)]  # 5-byte events without keys: frames of 11
        return rows_table(offs, [None] * n, [b"abcde"] * n, [0] * n)

    good = pa.concat_tables([group(0, 3), group(33, 2)])
    assert _check_covers(good, 0, 55, "t") == 55
    with pytest.raises(CorruptDataError, match="do not cover"):
        _check_covers(pa.concat_tables([group(0, 3), group(34, 2)]), 0, 56, "t")
    with pytest.raises(CorruptDataError, match="do not cover"):
        _check_covers(good, 0, 66, "t")  # ends short of the range
    with pytest.raises(CorruptDataError, match="do not cover"):
        _check_covers(good, 11, 55, "t")  # starts before it


def test_a_sequential_read_from_tier2_reads_the_next_row_group_ahead_once(tmp_path, monkeypatch):
    """A reader going through tiered history finds the next row group loaded (or loading) in the
    background: each group is read from tier 2 once, most of them ahead of the reader, and the
    events come back exactly as written."""
    import threading

    from pravega_embedded.tiering import coldreads, rows

    monkeypatch.setattr(rows, "ROW_GROUP_BYTES", 256 << 10)  # several groups per file
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=4 * MiB, tail_cache_bytes=0)
    loads: list[tuple[str, int]] = []
    real = coldreads.ColdReads._load

    def counted(self, seg, f, offset):
        loads.append((threading.current_thread().name, seg.uid, offset))
        return real(self, seg, f, offset)

    monkeypatch.setattr(coldreads.ColdReads, "_load", counted)
    with pe.open(path, **opts) as store:
        want = fill(store, n=3000)
        tier_and_reclaim(store, path)
    with pe.open(path, **opts) as store:
        assert sorted(read_all(store)) == sorted(want)
    assert len(loads) == len({x[1:] for x in loads}) > 6, "a row group was read from tier 2 twice"
    ahead = [x for x in loads if x[0].startswith("pe-cold-read-ahead")]
    assert len(ahead) >= len(loads) // 2, f"only {len(ahead)} of {len(loads)} loads were ahead"


class _Numbered:
    """A serializer whose values are the events' numbers (``fill``'s ``%06d-`` prefix)."""

    def serialize(self, value: int) -> bytes:
        return b"%06d-" % value

    def deserialize(self, data: bytes) -> int:
        return int(data[:6])


def _events(store, serializer=None) -> list[tuple]:
    """Every event of iot/s as a standalone reader returns it, with its key, segment, offset,
    length and pointer, in segment and offset order."""
    with store.create_reader("iot", "s", serializer=serializer) as r:
        out = []
        while (ev := r.read_next_event(timeout=0)) is not None:
            out.append((ev.event, ev.routing_key, ev.segment_id, ev.offset, ev.next_offset,
                        ev.event_pointer))
    return sorted(out, key=lambda e: (e[2], e[3]))


def test_readers_of_reclaimed_history_make_events_straight_from_the_columns(tmp_path, monkeypatch):
    """Readers, reader groups and iterated slices of history only in tier 2 get their events
    from the row groups' columns (no frames rebuilt): the same events, keys (None for keyless
    ones), offsets, lengths and pointers as the journal gave, with and without a serializer;
    a reader group's positions resume exactly; each file is opened once for a whole read."""
    from pravega_embedded.tiering import coldreads, rows

    monkeypatch.setattr(rows, "ROW_GROUP_BYTES", 256 << 10)  # several groups per file
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=2 * MiB, tail_cache_bytes=0)
    with pe.open(path, **opts) as store:
        fill(store, n=4000, size=700, key=lambda i: None if i % 7 == 0 else f"k{i % 5}-é")
        want, want_text = _events(store), _events(store, serializer=_Numbered())
        tier_and_reclaim(store, path)
    with pe.open(path, **opts) as store:
        opened = []
        real_open = coldreads.OpenedFile.__init__

        def counted(self, target, scope, stream, f):
            opened.append(f.name)
            real_open(self, target, scope, stream, f)

        monkeypatch.setattr(coldreads.OpenedFile, "__init__", counted)
        monkeypatch.setattr(coldreads, "frames_of", lambda *a: pytest.fail("tiered rows were re-framed"))
        assert _events(store) == want
        assert len(opened) == len(set(opened)) >= 2, "a file was opened twice in one read"
        assert None in {e[1] for e in want} and store._engine.cold.loads > 8
        assert _events(store, serializer=_Numbered()) == want_text
        assert sorted(ev.event for ev in store.read_slice("iot", "s")) == sorted(e[0] for e in want)
        group = store.create_reader_group("g", [("iot", "s")])
        seen = []
        with group.create_reader("r1") as r:
            while len(seen) < len(want) // 2:
                ev = r.read_next_event(timeout=5)
                assert ev is not None
                if ev.event is not None:
                    seen.append((ev.event, ev.routing_key, ev.segment_id, ev.offset))
        # r1 left the group at its exact position: r2 goes on from there, nothing twice
        with group.create_reader("r2") as r2:
            while len(seen) < len(want):
                ev = r2.read_next_event(timeout=5)
                assert ev is not None, f"the group stopped after {len(seen)} events"
                if ev.event is not None:
                    seen.append((ev.event, ev.routing_key, ev.segment_id, ev.offset))
        assert sorted(seen, key=lambda e: (e[2], e[3])) == [e[:4] for e in want]


def tiered_in_row_groups(tmp_path, monkeypatch) -> tuple[Path, dict]:
    """A store whose 3000 events are only in tier 2, in files of several 256 KiB row groups:
    (its path, the options to open it with)."""
    from pravega_embedded.tiering import rows

    monkeypatch.setattr(rows, "ROW_GROUP_BYTES", 256 << 10)
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=4 * MiB, tail_cache_bytes=0)
    with pe.open(path, **opts) as store:
        fill(store, n=3000)
        tier_and_reclaim(store, path)
    return path, opts


def test_the_first_read_of_tiered_history_starts_loading_the_next_two_row_groups(tmp_path, monkeypatch):
    from pravega_embedded.tiering import coldreads

    path, opts = tiered_in_row_groups(tmp_path, monkeypatch)
    with pe.open(path, **opts) as store:
        cold = store._engine.cold
        with store.create_reader("iot", "s") as r:
            assert r.read_next_event(timeout=0) is not None
            deadline = time.monotonic() + 30
            while cold.loads < 1 + coldreads.AHEAD and time.monotonic() < deadline:
                time.sleep(0.01)
            assert cold.loads == 1 + coldreads.AHEAD  # that group, and the next two; no more
            time.sleep(0.2)
            assert cold.loads == 1 + coldreads.AHEAD


def test_a_failed_read_of_an_open_tier2_file_is_a_storage_error_and_the_next_read_reopens_it(
        tmp_path, monkeypatch):
    import errno

    import pyarrow.parquet as pq

    from pravega_embedded.errors import StorageError

    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0)
    with pe.open(path, **opts) as store:
        want = fill(store, n=3000)
        tier_and_reclaim(store, path)
    with pe.open(path, **opts) as store:
        real = pq.ParquetFile.read_row_group
        failures = []

        def failing_once(self, *a, **k):
            if not failures:
                failures.append(1)
                raise OSError(errno.EIO, "Input/output error")
            return real(self, *a, **k)

        monkeypatch.setattr(pq.ParquetFile, "read_row_group", failing_once)
        with pytest.raises(StorageError, match="Input/output error"):
            read_all(store)
        assert sorted(read_all(store)) == sorted(want)


def test_reads_of_cached_history_open_no_tier2_file_whatever_the_number_of_segments(tmp_path, monkeypatch):
    """A reader going round more segments than files are kept open reads what is cached
    without opening a tier-2 file (the read-ahead plans from the layouts of files already
    opened)."""
    from pravega_embedded.tiering import coldreads

    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0)
    with pe.open(path, **opts) as store:
        store.create_scope("iot")
        n_segs = coldreads.OPENED + 8
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n_segs)))
        with store.create_writer("iot", "s") as w:
            for i in range(n_segs * 150):
                w.write_event(b"%06d-" % i + os.urandom(2000), routing_key=f"k{i}")
        tier_and_reclaim(store, path)
    with pe.open(path, **opts) as store:
        want = read_all(store)  # every row group is cached now (a few MiB in all)
        opened = []
        real = coldreads.OpenedFile.__init__

        def counted(self, *a):
            opened.append(a[-1].name)
            real(self, *a)

        monkeypatch.setattr(coldreads.OpenedFile, "__init__", counted)
        loads = store._engine.cold.loads
        assert read_all(store) == want and len(want) == n_segs * 150
        assert opened == [] and store._engine.cold.loads == loads


def test_deleting_a_stream_closes_its_open_tier2_files(tmp_path):
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0)

    def held() -> list[str]:
        fds = Path("/proc/self/fd")
        out = []
        for fd in fds.iterdir():
            try:
                target = os.readlink(fd)
            except OSError:
                continue
            if "/scope=iot/stream=s/" in target:
                out.append(target)
        return out

    with pe.open(path, **opts) as store:
        fill(store, n=3000)
        tier_and_reclaim(store, path)
        read_all(store)
        assert held(), "the reads kept no tier-2 file open"
        store.delete_stream("iot", "s")
        store.flush_tier2()  # its round deletes the stream's tier-2 folder
        assert not (path / "tier2" / "scope=iot" / "stream=s").exists()
        assert held() == []


def test_multi_row_group_reads_work_in_a_forked_child(tmp_path, monkeypatch):
    import multiprocessing

    from pravega_embedded.tiering.manifest import latest_manifest
    from pravega_embedded.tiering.parquetfile import read_segment_file
    from pravega_embedded.tiering.target import Tier2Target

    path, _ = tiered_in_row_groups(tmp_path, monkeypatch)
    target = Tier2Target(str(path / "tier2"))
    m = latest_manifest(target, "iot", "s")
    f = max(m.files, key=lambda f: f.end - f.first)
    assert read_segment_file(target, "iot", "s", f).num_rows == f.events  # the pool is started

    def child(q):
        q.put(read_segment_file(target, "iot", "s", f).num_rows)

    ctx = multiprocessing.get_context("fork")
    q = ctx.Queue()
    p = ctx.Process(target=child, args=(q,))
    p.start()
    p.join(120)
    if p.is_alive():
        p.kill()
        pytest.fail("a multi-row-group read hung in a forked child")
    assert p.exitcode == 0 and q.get(timeout=5) == f.events


def test_read_ahead_goes_on_once_the_cache_is_full(tmp_path, monkeypatch):
    """A sequential read longer than the cache keeps reading ahead: older chunks make room."""
    import threading

    from pravega_embedded.tiering import coldreads, rows

    monkeypatch.setattr(rows, "ROW_GROUP_BYTES", 256 << 10)
    monkeypatch.setattr(coldreads.ColdReads.__init__, "__defaults__", (2 * MiB,))  # cache_bytes
    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=4 * MiB, tail_cache_bytes=0)
    loads: list[str] = []
    real = coldreads.ColdReads._load

    def counted(self, seg, f, offset):
        loads.append(threading.current_thread().name)
        return real(self, seg, f, offset)

    with pe.open(path, **opts) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s")  # one segment: one long sequential read
        want = [b"%06d-" % i + os.urandom(1000) for i in range(12_000)]
        with store.create_writer("iot", "s") as w:
            for ev in want:
                w.write_event(ev)
        tier_and_reclaim(store, path)
    monkeypatch.setattr(coldreads.ColdReads, "_load", counted)
    with pe.open(path, **opts) as store:
        assert store._engine.cold.cache_bytes == 2 * MiB
        assert read_all(store) == want
    half = loads[len(loads) // 2:]
    assert len(loads) > 20 and sum(n.startswith("pe-cold-read-ahead") for n in half) >= len(half) // 2


def test_slices_of_reclaimed_history_to_arrow_come_straight_from_the_parquet_columns(tmp_path, monkeypatch):
    """``read_slice().to_arrow()`` of history only in tier 2 reads each file's range in bulk
    (no frames rebuilt, no row-group cache) and returns exactly the table the journal gave:
    same events, keys (None for keyless events), segments and offsets, from any cut to any
    cut, ranges crossing files."""
    from pravega_embedded.tiering import coldreads

    path = tmp_path / "data"
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_bytes=MiB, tail_cache_bytes=0)
    with pe.open(path, **opts) as store:
        fill(store, n=5000, key=lambda i: None if i % 7 == 0 else f"k{i % 5}")
        whole = store.read_slice("iot", "s").to_arrow()
        offs: dict[int, list[int]] = {}
        for sid, off in zip(whole.column("segment_id").to_pylist(), whole.column("offset").to_pylist()):
            offs.setdefault(sid, []).append(off)
        assert len(offs) == 2
        cuts = [None] + [pe.StreamCut.of("iot", "s", {sid: o[int(len(o) * q)] for sid, o in offs.items()})
                         for q in (0.0005, 0.24, 0.67)]
        expect = {}
        for a in range(len(cuts)):
            for b in range(a + 1, len(cuts)):
                expect[(a, b)] = store.read_slice("iot", "s", start=cuts[a], end=cuts[b]).to_arrow()
        tier_and_reclaim(store, path)
        # (checking a cut's offset reads its row group through the cache: before the patch)
        slices = {k: store.read_slice("iot", "s", start=cuts[k[0]], end=cuts[k[1]]) for k in expect}
        whole_slice = store.read_slice("iot", "s")
        monkeypatch.setattr(coldreads, "frames_of", lambda t: pytest.fail("tiered rows were re-framed"))
        loads = store._engine.cold.loads
        got = whole_slice.to_arrow()
        assert got.equals(whole), "to_arrow from tier 2 differs from the journal's"
        assert store._engine.cold.loads > loads, "nothing was read from tier 2"
        assert None in got.column("routing_key").to_pylist()
        for k, table in expect.items():
            assert slices[k].to_arrow().equals(table), k


def test_a_forged_file_with_a_gap_between_rows_is_corrupt_data_for_slices_and_readers(tmp_path):
    def gap(keys, events):
        events[5] = events[5][:-1]  # one byte short: the next row no longer starts where it ends
    path = forged_store(tmp_path, gap)
    with pe.open(path, durability="none") as store:
        with pytest.raises(CorruptDataError, match="do not cover"):
            store.read_slice("iot", "s").to_arrow()
        with pytest.raises(CorruptDataError, match="do not cover"):
            read_all(store)  # the reader's path: rows checked in C (pe_rows_check)
