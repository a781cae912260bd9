"""The store tiers by itself: a sealed segment, a segment whose data reached the file size and
one whose oldest data reached the file age go to tier 2 without being asked; ``flush_tier2``
puts everything durable there; plain readers (DuckDB, pyarrow) see exactly the acknowledged
events once; a deleted stream's tier-2 data goes with it; tier 2 failing is retried, shown in
``tiering_status`` and drained with nothing lost or duplicated once it works again."""

from __future__ import annotations

import os
import time
from pathlib import Path

import duckdb
import pyarrow.dataset as ds
import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError, InvalidConfigurationError, TieringTimeoutError
from pravega_embedded.tiering.layout import parse_file_name
from pravega_embedded.tiering.manifest import latest_manifest
from pravega_embedded.tiering.target import Tier2Target

MiB = 1 << 20


def wait_until(pred, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while True:
        got = pred()
        if got:
            return got
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def events_in(root: Path, scope: str, stream: str) -> list[bytes]:
    glob = f"{root}/scope={scope}/stream={stream}/**/*.parquet"
    return [r[0] for r in duckdb.sql(
        f"SELECT event FROM read_parquet('{glob}', hive_partitioning=1) ORDER BY segment, \"offset\""
    ).fetchall()]


def write(store, stream: str, events: list[bytes], key=lambda i: f"k{i % 7}", *,
          each: bool = False) -> None:
    """Write ``events``; ``each``: flush after each (one section per event)."""
    with store.create_writer("iot", stream) as w:
        for i, ev in enumerate(events):
            w.write_event(ev, routing_key=key(i))
            if each:
                w.flush()


def make(store, stream: str, n: int = 1) -> None:
    store.create_scope("iot", exist_ok=True)
    store.create_stream("iot", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(n)))


def test_flush_tier2_puts_every_acknowledged_event_in_the_default_folder_once(tmp_path):
    path = tmp_path / "data"
    want = [b"ev-%05d" % i for i in range(3000)]
    with pe.open(path) as store:
        make(store, "sensors", 3)
        before = store.tiering_status()
        assert before.state == "ok" and before.tiered_bytes == 0 and before.files == 0
        write(store, "sensors", want)
        pending = store.tiering_status()
        assert pending.untiered_bytes > 0
        store.flush_tier2()
        st = store.tiering_status()
        info = store.stream_info("iot", "sensors")
    root = path / "tier2"
    assert sorted(events_in(root, "iot", "sensors")) == want
    assert st.untiered_bytes == 0 and st.lag_seconds == 0.0 and st.last_error is None
    assert st.tiered_bytes == sum(s.length for s in info.segments) == pending.untiered_bytes
    assert st.files == 3 and st.file_bytes == sum(
        p.stat().st_size for p in root.rglob("*.parquet"))
    table = ds.dataset(str(root), partitioning="hive").to_table()
    assert table.num_rows == len(want)
    assert "<b>Tier 2</b>" in st._repr_html_()


def test_sealed_segments_and_aged_data_tier_by_themselves(tmp_path):
    with pe.open(tmp_path / "data", tier2_file_age=0.3) as store:
        make(store, "a", 2)
        write(store, "a", [b"x%d" % i for i in range(200)])
        info = store.stream_info("iot", "a")
        # no flush: the data's age closes its files
        wait_until(lambda: store.tiering_status().untiered_bytes == 0, 60, "aged data tiered")
        assert store.tiering_status().tiered_bytes == sum(s.length for s in info.segments)
    with pe.open(tmp_path / "data2") as store:  # the default age (minutes): only the seal
        make(store, "b", 2)
        write(store, "b", [b"y%d" % i for i in range(200)])
        first = store.stream_info("iot", "b").segments[0]
        store.scale_stream("iot", "b", [first.segment_id], [(first.key_low, first.key_high)])
        wait_until(lambda: store.tiering_status().tiered_bytes == first.length, 60,
                   "the sealed segment tiered")
        time.sleep(0.2)  # the open segment is not tiered meanwhile (it is neither full nor old)
        st = store.tiering_status()
        assert st.tiered_bytes == first.length and st.untiered_bytes > 0


def test_files_close_at_their_size_on_event_boundaries_and_a_large_event_stays_whole(tmp_path):
    big = os.urandom(9 << 20)  # a large event (over 8 MiB), larger than a file
    want = [os.urandom(100 + i % 900) for i in range(400)] + [big] + [b"after-%d" % i for i in range(50)]
    with pe.open(tmp_path / "data", durability="none", tier2_file_bytes=16 << 10) as store:
        make(store, "s")
        write(store, "s", want, key=lambda i: "k", each=True)  # one key: in order
        size = store.stream_info("iot", "s").segments[0].length
        wait_until(lambda: store.tiering_status().untiered_bytes < 16 << 10, 60, "full files tiered")
        store.flush_tier2()
    root = tmp_path / "data" / "tier2"
    assert events_in(root, "iot", "s") == want
    ranges = sorted(parse_file_name(p.name) for p in root.rglob("*.parquet"))
    assert ranges[0][0] == 0 and ranges[-1][1] == size
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:])), "gaps or overlaps"
    over = [r for r in ranges if r[1] - r[0] > 16 << 10]
    assert len(over) == 1 and over[0][1] - over[0][0] > len(big), "only the large event's file is over"


def test_byte_streams_and_transactions_tier_only_committed_bytes(tmp_path):
    with pe.open(tmp_path / "data", durability="none") as store:
        store.create_scope("iot")
        bs = store.create_byte_stream("iot", "blob")
        data = os.urandom(300_000)
        bs.write(data)
        bs.flush()
        make(store, "t")
        tw = store.create_transactional_writer("iot", "t")
        committed, aborted, open_ = tw.begin_txn(), tw.begin_txn(), tw.begin_txn()
        for txn, tag in ((committed, b"c"), (aborted, b"a"), (open_, b"o")):
            for i in range(50):
                txn.write_event(tag + b"%d" % i, routing_key="k")
        committed.commit()
        aborted.abort()
        store.flush_tier2()
        root = tmp_path / "data" / "tier2"
        assert b"".join(events_in(root, "iot", "blob")) == data
        assert sorted(events_in(root, "iot", "t")) == sorted(b"c%d" % i for i in range(50))
        open_.abort()


def test_a_deleted_streams_tier2_data_goes_and_a_recreated_stream_starts_clean(tmp_path):
    root = tmp_path / "data" / "tier2"
    with pe.open(tmp_path / "data", durability="none") as store:
        make(store, "s", 2)
        write(store, "s", [b"old-%d" % i for i in range(300)])
        store.flush_tier2()
        assert len(events_in(root, "iot", "s")) == 300
        store.delete_stream("iot", "s")
        make(store, "s", 1)
        write(store, "s", [b"new-%d" % i for i in range(10)], key=lambda i: "k")
        store.flush_tier2()
        assert events_in(root, "iot", "s") == [b"new-%d" % i for i in range(10)]
        m = latest_manifest(Tier2Target(str(root)), "iot", "s")
        assert m is not None and m.version == 1 and len(m.files) == 1
        store.delete_stream("iot", "s")
        wait_until(lambda: not (root / "scope=iot" / "stream=s").exists(), 60, "the folder deleted")
        assert store.tiering_status().pending_deletions == 0


def test_deletion_pending_at_a_crash_is_done_at_the_next_open(tmp_path):
    root = tmp_path / "data" / "tier2"
    with pe.open(tmp_path / "data", durability="none") as store:
        make(store, "s")
        write(store, "s", [b"e%d" % i for i in range(20)], key=lambda i: "k")
        store.flush_tier2()
    with pe.open(tmp_path / "data", durability="none", tier2=False) as store:
        store.delete_stream("iot", "s")  # not tiering: the deletion waits in LMDB
    assert (root / "scope=iot" / "stream=s").exists()
    with pe.open(tmp_path / "data", durability="none") as store:
        make(store, "s")
        write(store, "s", [b"again"])
        store.flush_tier2()
        assert events_in(root, "iot", "s") == [b"again"]


def test_tier2_failing_is_retried_shown_and_drained_without_loss_or_duplicates(tmp_path):
    root = tmp_path / "data" / "tier2"
    root.mkdir(parents=True)
    blocker = root / "scope=iot"
    blocker.write_bytes(b"not a folder")  # every copy of scope iot fails until it goes
    want = [b"v%d" % i for i in range(500)]
    with pe.open(tmp_path / "data", durability="none", tier2_file_age=0.1) as store:
        make(store, "s", 2)
        write(store, "s", want)
        with pytest.raises(TieringTimeoutError, match="not everything is in tier 2"):
            store.flush_tier2(timeout=1.0)
        st = wait_until(lambda: (s := store.tiering_status()).state == "retrying" and s, 60,
                        "the tierer retrying")
        assert st.failures >= 1 and "tier-2" in st.last_error and st.untiered_bytes > 0
        write(store, "s", [b"more"])  # ingest goes on meanwhile
        blocker.unlink()
        st = wait_until(lambda: (s := store.tiering_status()).untiered_bytes == 0
                        and s.state == "ok" and s, 120, "the backlog drained")
        assert st.last_error is None and st.failures == 0
    assert sorted(events_in(root, "iot", "s")) == sorted(want + [b"more"])


def test_tiering_off_and_bad_options(tmp_path):
    with pe.open(tmp_path / "off", durability="none", tier2=False) as store:
        with pytest.raises(InvalidConfigurationError, match="tier2=False"):
            store.tiering_status()
        with pytest.raises(InvalidConfigurationError):
            store.flush_tier2()
    assert not (tmp_path / "off" / "tier2").exists()
    for bad in ({"tier2": 5}, {"tier2_file_bytes": 10}, {"tier2_file_age": 0},
                {"tier2_options": ["x"]}, {"tier2": "nosuchproto://x"}):
        with pytest.raises(InvalidConfigurationError):
            pe.open(tmp_path / "bad", durability="none", **bad)
    with pe.open(tmp_path / "bad", durability="none") as store:  # the failed opens let go of it
        assert store.tiering_status().state == "ok"


def test_a_chosen_folder_and_memory_target(tmp_path):
    import uuid

    mem = f"memory://pe-test-tierer-{uuid.uuid4().hex[:12]}"  # fsspec's memory is per process
    lake = tmp_path / "lake"
    with pe.open(tmp_path / "data", durability="none", tier2=lake) as store:
        make(store, "s")
        write(store, "s", [b"a", b"b"], key=lambda i: "k")
        store.flush_tier2()
    assert events_in(lake, "iot", "s") == [b"a", b"b"]
    assert not (tmp_path / "data" / "tier2").exists()
    with pe.open(tmp_path / "data2", durability="none", tier2=mem) as store:
        make(store, "s")
        write(store, "s", [b"m"])
        store.flush_tier2()
        st = store.tiering_status()
        assert st.files == 1 and st.target == mem
    m = latest_manifest(Tier2Target(mem), "iot", "s")
    assert m is not None and m.files[0].events == 1


def test_a_manifest_whose_publication_failed_is_published_by_the_next_round(tmp_path, monkeypatch):
    from pravega_embedded.errors import StorageError
    from pravega_embedded.tiering import copier

    real = copier.publish_manifest
    failures = []

    def flaky(target, m):
        if not failures:
            failures.append(m.version)
            raise StorageError(5, "tier 2 refused the manifest (test)")
        return real(target, m)

    monkeypatch.setattr(copier, "publish_manifest", flaky)
    root = tmp_path / "data" / "tier2"
    with pe.open(tmp_path / "data", durability="none") as store:
        make(store, "s")
        write(store, "s", [b"e%d" % i for i in range(50)], key=lambda i: "k")
        store.flush_tier2(timeout=60)
        assert failures == [1]
        m = latest_manifest(Tier2Target(str(root)), "iot", "s")
        assert m is not None and m.version == 1 and m.files[0].events == 50
        assert store._engine.meta.manifest_versions("iot/s") == (1, 1)


def test_a_stream_that_cannot_be_tiered_does_not_hold_up_the_others(tmp_path):
    """Copies of scope ``bad`` fail (its tier-2 folder name is taken by a file) while scope
    ``iot`` keeps going to tier 2 by itself; the status says which stream fails; once the
    obstacle goes, the failing stream drains too, with nothing lost or duplicated."""
    root = tmp_path / "data" / "tier2"
    root.mkdir(parents=True)
    blocker = root / "scope=bad"
    blocker.write_bytes(b"not a folder")
    with pe.open(tmp_path / "data", durability="none", tier2_file_age=0.1) as store:
        for scope in ("bad", "iot"):
            store.create_scope(scope)
            store.create_stream(scope, "s")
        bad_events = [b"b%d" % i for i in range(300)]
        with store.create_writer("bad", "s") as w:
            for ev in bad_events:
                w.write_event(ev)
        st = wait_until(lambda: (s := store.tiering_status()).failures >= 3 and s, 120,
                        "the bad stream failing again and again")
        assert st.state == "retrying" and st.last_error.startswith("bad/s segment 0:"), st
        # the good stream is tiered meanwhile, batch after batch, without a flush_tier2
        good = []
        for batch in range(3):
            evs = [b"g%d-%d" % (batch, i) for i in range(200)]
            write(store, "s", evs)
            good += evs
            wait_until(lambda: list(root.glob("scope=iot/**/*.parquet"))
                       and len(events_in(root, "iot", "s")) == len(good), 120,
                       f"batch {batch} of the good stream in tier 2")
        assert store.tiering_status().state == "retrying"
        assert not list((root).glob("scope=bad/**/*.parquet")) and blocker.is_file()
        blocker.unlink()
        st = wait_until(lambda: (s := store.tiering_status()).untiered_bytes == 0
                        and s.state == "ok" and s, 120, "the bad stream drained")
        assert st.last_error is None and st.failures == 0
    assert sorted(events_in(root, "iot", "s")) == sorted(good)
    assert sorted(events_in(root, "bad", "s")) == sorted(bad_events)


def test_two_stores_cannot_share_a_tier2_root(tmp_path):
    """The first store to tier to a root owns it (``_pravega_embedded_store.json``); a second
    store pointed at it is refused before it writes or deletes anything there (it would
    overwrite and, deleting a stream of the same name, delete the first store's data), and says
    so in flush_tier2 and in its status; the owner goes on, and reopens, as before."""
    from pravega_embedded.tiering.layout import OWNER_NAME

    root = tmp_path / "shared"
    with pe.open(tmp_path / "a", durability="none", tier2=str(root)) as a:
        make(a, "s")
        write(a, "s", [b"a%d" % i for i in range(100)])
        a.flush_tier2()
        owner = (root / OWNER_NAME).read_bytes()
        with pe.open(tmp_path / "b", durability="none", tier2=str(root), tier2_file_age=0.1) as b:
            make(b, "s")
            write(b, "s", [b"b%d" % i for i in range(100)])
            b.delete_stream("iot", "s")
            make(b, "s")
            with pytest.raises(InvalidConfigurationError, match="belongs to another store"):
                b.flush_tier2()
            st = wait_until(lambda: (s := b.tiering_status()).last_error and s, 60, "b's status")
            assert st.state == "retrying" and "belongs to another store" in st.last_error
        assert sorted(events_in(root, "iot", "s")) == sorted(b"a%d" % i for i in range(100))
        write(a, "s", [b"more"])
        a.flush_tier2()
    assert (root / OWNER_NAME).read_bytes() == owner
    with pe.open(tmp_path / "a", durability="none", tier2=str(root)) as a:
        a.flush_tier2()
    assert len(events_in(root, "iot", "s")) == 101
    (root / OWNER_NAME).write_bytes(b"{not json")
    with pe.open(tmp_path / "a", durability="none", tier2=str(root)) as a:
        with pytest.raises(CorruptDataError, match="owner file .* is damaged"):
            a.flush_tier2()


@pytest.mark.skipif(not __import__("sys").platform.startswith("linux"), reason="per-thread nice is Linux's")
def test_background_copies_run_below_the_writers_priority_and_flush_does_not(tmp_path, monkeypatch):
    """Background tiering must not take the CPU from ingest on a busy machine: a background
    round's copies (journal reads, Parquet encoding) run in a copy thread at nice 10, and the
    encoder threads it starts inherit it; the tiering thread itself (which may start pyarrow's
    shared pools, whose threads would keep its nice for the whole process) and a
    flush_tier2's copies stay at the caller's priority."""
    import threading

    from pravega_embedded.tiering import parquetfile

    seen = []
    real = parquetfile.write_segment_file

    def spy(*a, **k):
        tid = threading.get_native_id()
        seen.append((threading.current_thread().name, os.getpriority(os.PRIO_PROCESS, tid)))
        return real(*a, **k)
    monkeypatch.setattr("pravega_embedded.tiering.copier.write_segment_file", spy)
    before = os.getpriority(os.PRIO_PROCESS, threading.get_native_id())
    with pe.open(tmp_path / "data", durability="none", tier2_file_age=0.1) as store:
        make(store, "s")
        write(store, "s", [b"x%d" % i for i in range(100)])
        wait_until(lambda: store.tiering_status().untiered_bytes == 0, 60, "the data tiered")
        (tier_tid,) = [t.native_id for t in threading.enumerate() if t.name == "pe-tiering"]
        assert os.getpriority(os.PRIO_PROCESS, tier_tid) == before
        assert seen and all(n.startswith("pe-tier-copy") and p == max(before, 10) for n, p in seen), seen
    seen.clear()
    with pe.open(tmp_path / "data", durability="none") as store:
        write(store, "s", [b"y%d" % i for i in range(100)])
        store.flush_tier2()
    assert seen == [(threading.current_thread().name, before)], seen
    assert os.getpriority(os.PRIO_PROCESS, threading.get_native_id()) == before


def test_a_long_backoff_ends_within_a_second_once_writers_wait_for_the_budget(tmp_path):
    """A segment whose copies failed for a long time may have a backoff of 30 s; once writers
    wait for the local budget it is tried again within about a second (RETRY_BLOCKED_S), so
    ingest resumes as soon as tier 2 is back instead of failing with LocalBudgetError."""
    from pravega_embedded.tiering import tierer as tr

    MiB = 1 << 20
    root = tmp_path / "data" / "tier2"
    root.mkdir(parents=True)
    blocker = root / "scope=iot"
    blocker.write_bytes(b"not a folder")
    with pe.open(tmp_path / "data", durability="none", roll_bytes=MiB, local_budget=4 * MiB,
                 local_budget_timeout=60) as store:
        make(store, "s")
        tierer = store._tierer()
        write(store, "s", [b"x" * 1000] * 2500)  # past half the budget: due at once
        wait_until(lambda: tierer._failing, 60, "a failed copy")
        for f in tierer._failing.values():  # as after six failures in a row, long ago
            f.failures, f.since, f.retry_at = 6, time.monotonic() - 100, time.monotonic() + 3600
        blocker.unlink()
        t = time.monotonic()
        write(store, "s", [b"y" * 1000] * 12_000)  # 12 MB: waits for the budget, then goes on
        assert time.monotonic() - t < 30, "the writer waited for the whole backoff"
        store.flush_tier2()  # what is left is under half the budget: not due by itself yet
        st = store.tiering_status()
        assert st.untiered_bytes == 0 and st.state == "ok" and st.last_error is None, st
        assert tr.RETRY_BLOCKED_S <= 1.0


def test_flush_tier2_leaves_the_journal_files_it_freed_to_the_tiering_thread_or_close(tmp_path, monkeypatch):
    """Deleting journal files that were written and synced waits in the kernel (ext4 here:
    about 4 ms per 16 MiB file), which is no part of putting data in tier 2: flush_tier2
    returns once tier 2 and the manifests hold everything, and the tiering thread deletes the
    journal files that freed, at once; a close that comes first deletes them itself. Either
    way they go, and every event reads back."""
    import threading

    from pravega_embedded import engine as engine_mod
    from pravega_embedded.tiering import tierer as tierer_mod

    who: list[str] = []
    real = engine_mod.Engine.reclaim

    def spy(self):
        who.append(threading.current_thread().name)
        return real(self)
    monkeypatch.setattr(engine_mod.Engine, "reclaim", spy)
    path = tmp_path / "data"
    files = lambda: sorted((path / "journal").glob("*.pej"))  # noqa: E731
    want = [b"%06d-" % i + b"x" * 1000 for i in range(5000)]
    opts = dict(durability="none", roll_bytes=MiB, tier2_file_age=3600.0)
    with pe.open(path, **opts) as store:
        make(store, "s")
        write(store, "s", want[:2500])
        before = len(files())
        store.flush_tier2()
        assert threading.current_thread().name not in who  # the caller deleted nothing
        wait_until(lambda: len(files()) <= 2, 60, "the tiering thread deleting the freed files")
        assert before > 2 and who and set(who) == {"pe-tiering"}, (before, who)
        assert sorted(ev.event for ev in store.read_slice("iot", "s")) == want[:2500]
    who.clear()
    monkeypatch.setattr(tierer_mod.Tierer, "_loop", lambda self: None)  # no tiering thread at work
    with pe.open(path, **opts) as store:
        write(store, "s", want[2500:])
        before = len(files())
        store.flush_tier2()
        assert len(files()) == before and not who  # still there: only the thread or close deletes
    assert len(files()) < before and who == [threading.current_thread().name]
    with pe.open(path, **opts) as store:
        assert sorted(ev.event for ev in store.read_slice("iot", "s")) == want


def test_the_tiering_thread_deletes_a_flushs_files_before_copying_and_a_backing_off_one_leaves_them_to_the_flush(
        tmp_path, monkeypatch):
    """The files a flush freed do not wait behind the thread's own copies (under a local budget
    writers wait for them), nor behind a backoff after failures (up to 30 s): the thread's next
    round deletes them before anything else, and while it backs off the flush deletes them
    itself. The thread's loop is replaced, so each round here is run by the test."""
    import threading

    from pravega_embedded import engine as engine_mod
    from pravega_embedded.tiering import copier as copier_mod
    from pravega_embedded.tiering import tierer as tierer_mod

    log: list[tuple[str, str]] = []
    real_reclaim, real_copy = engine_mod.Engine.reclaim, copier_mod.Copier.copy

    def reclaim(self):
        log.append(("reclaim", threading.current_thread().name))
        return real_reclaim(self)

    def copy(self, *a, **k):
        log.append(("copy", threading.current_thread().name))
        return real_copy(self, *a, **k)
    monkeypatch.setattr(engine_mod.Engine, "reclaim", reclaim)
    monkeypatch.setattr(copier_mod.Copier, "copy", copy)
    monkeypatch.setattr(tierer_mod.Tierer, "_loop", lambda self: None)
    path = tmp_path / "data"
    files = lambda: len(list((path / "journal").glob("*.pej")))  # noqa: E731
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_bytes=MiB) as store:
        tierer = store._core.tiering
        make(store, "s")
        write(store, "s", [b"a" * 1000] * 2500)
        store.flush_tier2()  # three passes: it deletes between them, the last pass's files not
        assert log[-1] == ("copy", threading.current_thread().name), log
        write(store, "s", [b"b" * 1000] * 2500)  # due for the thread: more than a file
        log.clear()
        tierer._round(None)  # the thread's next round
        assert log[0][0] == "reclaim" and any(kind == "copy" for kind, _ in log[1:]), log
        write(store, "s", [b"c" * 1000] * 2500)
        before = files()
        tierer._failures = 3  # backing off
        log.clear()
        store.flush_tier2()
        assert log[-1] == ("reclaim", threading.current_thread().name) and files() < before, log
        assert len([ev for ev in store.read_slice("iot", "s")]) == 7500


def test_files_a_flush_freed_before_the_process_died_are_deleted_by_the_next_opens_first_round(tmp_path):
    """The flag that the tiering thread owes a deletion lives in memory: a process that dies
    right after flush_tier2 (before the thread or a close deleted the files) leaves them, and
    the first round of the next open deletes them, though it has nothing to copy."""
    import subprocess
    import sys
    import textwrap

    path = tmp_path / "data"
    child = textwrap.dedent(f"""
        import os
        import pravega_embedded as pe
        from pravega_embedded.tiering import tierer
        tierer.Tierer._loop = lambda self: None  # no thread deletes anything
        store = pe.open({str(path)!r}, durability="none", roll_bytes=1 << 20, tier2_file_age=3600.0)
        store.create_scope("iot")
        store.create_stream("iot", "s")
        with store.create_writer("iot", "s") as w:
            for i in range(3000):
                w.write_event(b"%06d-" % i + b"x" * 1000)
        store.flush_tier2()
        os._exit(0)  # no close
    """)
    subprocess.run([sys.executable, "-c", child], check=True, timeout=120,
                   cwd=Path(__file__).resolve().parents[2])
    files = lambda: len(list((path / "journal").glob("*.pej")))  # noqa: E731
    left = files()
    assert left > 2  # the flush deleted nothing
    with pe.open(path, durability="none", roll_bytes=MiB, tier2_file_age=3600.0) as store:
        wait_until(lambda: files() <= 2, 60, "the first round deleting what the dead process left")
        assert store.tiering_status().untiered_bytes == 0
        assert sorted(ev.event for ev in store.read_slice("iot", "s")) == [
            b"%06d-" % i + b"x" * 1000 for i in range(3000)]


def test_the_first_round_takes_no_checkpoint_of_its_own(tmp_path, monkeypatch):
    """An idle store's applied position moves on its checkpoint interval alone: the tiering
    thread's first round deletes what a crash left (all before the open's checkpoint) without
    a checkpoint, even when writes came before it (the recovery of tier 2 is held back here
    until they did; the tests that snapshot an un-checkpointed journal rely on this)."""
    import threading

    from pravega_embedded import engine as engine_mod
    from pravega_embedded.tiering import copier as copier_mod

    go, reclaimed = threading.Event(), threading.Event()
    real_recover, real_reclaim = copier_mod.Copier.recover, engine_mod.Engine.reclaim

    def held(self):
        go.wait(30)
        real_recover(self)

    def reclaim(self):
        try:
            return real_reclaim(self)
        finally:
            reclaimed.set()
    monkeypatch.setattr(copier_mod.Copier, "recover", held)
    monkeypatch.setattr(engine_mod.Engine, "reclaim", reclaim)
    with pe.open(tmp_path / "data", durability="os", checkpoint_interval=3600) as store:
        meta = store._engine.meta  # the applied position is read from LMDB (tests only)
        make(store, "s")
        applied = meta.applied_pos()
        try:
            write(store, "s", [b"e%d" % i for i in range(50)], key=lambda i: "k")
        finally:
            go.set()
        assert reclaimed.wait(30)  # the first round deleted what a crash could have left
        assert meta.applied_pos() == applied
