"""Edges found in review: a seal or a writer's close while appends wait for the local budget
(neither may hang for the budget's timeout nor drop the writer's batch), cold reads after a
truncation rewrote and deleted the file they had looked up, a deleted stream's scheduled
tier-2 deletions, and a manifest naming segments it does not list."""

from __future__ import annotations

import json
import threading
import time

import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError
from pravega_embedded.tiering.manifest import Manifest

MiB = 1 << 20


def blocked_store(tmp_path):
    blocker = tmp_path / "blocker"
    blocker.write_bytes(b"a file where tier 2's folder should be")
    store = pe.open(tmp_path / "data", tier2=str(blocker / "t2"), roll_bytes=MiB,
                    local_budget=4 * MiB, local_budget_timeout=3600)
    store.create_scope("iot")
    store.create_stream("iot", "s")
    return store


def fill_to_the_budget(store, w) -> int:
    """Write until the budget holds appends back (seen from another thread); returns how many
    write calls returned."""
    n = [0]

    def ingest() -> None:
        try:
            while True:
                w.write_event(b"%08d" % n[0] + b"b" * 992)
                n[0] += 1
        except pe.errors.PravegaEmbeddedError:
            pass

    t = threading.Thread(target=ingest, daemon=True)
    t.start()
    deadline = time.monotonic() + 60
    while store.tiering_status().state != "blocked":
        assert time.monotonic() < deadline and t.is_alive()
        time.sleep(0.01)
    return t, n


def test_a_seal_while_appends_wait_for_the_budget_neither_hangs_nor_drops(tmp_path):
    store = blocked_store(tmp_path)
    w = store.create_writer("iot", "s", batch_bytes=64 << 10)
    t, n = fill_to_the_budget(store, w)
    t0 = time.monotonic()
    store.seal_stream("iot", "s")  # before the fix: held for the budget's hour under the lock
    assert time.monotonic() - t0 < 60
    t.join(60)
    assert not t.is_alive()
    got = [int(ev.event[:8]) for ev in store.read_slice("iot", "s")]
    assert got == list(range(len(got))) and len(got) >= n[0]  # every returned write is in
    store.close()


def test_a_writer_closed_while_the_budget_is_full_keeps_its_batch(tmp_path):
    store = blocked_store(tmp_path)
    w = store.create_writer("iot", "s", batch_bytes=64 << 10)
    t, n = fill_to_the_budget(store, w)
    w2 = store.create_writer("iot", "s", writer_id="second")
    w2.write_event(b"last words")
    w2.close()  # before the fix: LocalBudgetError after the timeout, and the batch was lost
    assert b"last words" in [ev.event for ev in store.read_slice("iot", "s")]
    store.close()
    t.join(60)


def test_cold_reads_follow_a_truncation_that_rewrote_their_file(tmp_path):
    evs = [b"c%06d" % i + b"x" * 993 for i in range(5000)]
    with pe.open(tmp_path / "data", roll_bytes=MiB, tier2_file_bytes=8 * MiB,
                 tier2_delete_grace=0) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s")
        with store.create_writer("iot", "s") as w:
            for i, ev in enumerate(evs):
                w.write_event(ev)
                if i % 50 == 49:
                    w.flush()
        store.flush_tier2(timeout=60)
        store.reclaim()
        assert store.tiering_status().local_bytes < 2 * MiB  # reads below come from tier 2
        all_ = list(store.read_slice("iot", "s"))  # the cold reader looks the file up
        assert [ev.event for ev in all_] == evs
        cut = pe.StreamCut.of("iot", "s", {all_[0].segment_id: all_[2000].offset})
        store.truncate_stream("iot", "s", cut)
        store.flush_tier2(timeout=60)  # the file is rewritten from the cut; the old one deleted
        assert [ev.event for ev in store.read_slice("iot", "s")] == evs[2000:]


def test_a_deleted_streams_scheduled_deletions_go_with_it(tmp_path):
    with pe.open(tmp_path / "data", tier2_file_bytes=4096, tier2_delete_grace=3600) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s")
        with store.create_writer("iot", "s") as w:
            for i in range(300):
                w.write_event(b"d%04d" % i + b"y" * 100)
        store.flush_tier2(timeout=60)
        store.truncate_stream("iot", "s", store.stream_info("iot", "s").tail)
        store.flush_tier2(timeout=60)
        meta = store._engine.meta  # the LMDB rows are the thing under test
        assert meta.tier2_graced_count() > 0
        store.delete_stream("iot", "s")
        assert meta.tier2_graced_count() == 0


def test_a_manifest_naming_unlisted_segments_is_corrupt_data():
    doc = {"format": 1, "scope": "iot", "stream": "s", "version": 1, "created_us": 0, "head": [],
           "files": [], "segments": [
               {"segment": 1, "key_low": 0.0, "key_high": 1.0, "sealed": False,
                "predecessors": [7], "successors": []}]}
    with pytest.raises(CorruptDataError, match="predecessor or successor"):
        Manifest.parse(json.dumps(doc).encode(), "m.json")
    doc["segments"][0]["predecessors"] = []
    doc["segments"][0]["successors"] = [0]
    with pytest.raises(CorruptDataError, match="predecessor or successor"):
        Manifest.parse(json.dumps(doc).encode(), "m.json")
