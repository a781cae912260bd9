"""A damaged transaction record in LMDB is refused at open with CorruptDataError (never a
KeyError or a silently dropped transaction), and the store opens again once it is repaired."""

from __future__ import annotations

import json

import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError
from pravega_embedded.failstop import FailStop
from pravega_embedded.metadata import Metadata


def _meta(path):
    """The store's LMDB, opened by hand (the store is closed)."""
    return Metadata(str(path / "meta"), sync=True, latch=FailStop(str(path)), create=False)


def _store_with_open_txn(path):
    with pe.open(path, durability="none") as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        txn = store.create_transactional_writer("s", "t").begin_txn()
        txn.write_event(b"staged", routing_key="k")
        txn.flush()
        return txn.txn_id


@pytest.mark.parametrize("damage", [
    lambda rec: rec.pop("staged"),
    lambda rec: rec.update(status="HALF-DONE"),
    lambda rec: rec.update(staged=[1, 2]),
    lambda rec: rec.update(lease="soon"),
])
def test_damaged_txn_record_is_refused(tmp_path, damage):
    tid = _store_with_open_txn(tmp_path)
    meta = _meta(tmp_path)
    try:
        with meta.write() as w:  # a well-formed value (its checksum is right) with bad fields
            original = meta._get(w, b"txns", tid.hex.encode())
            rec = json.loads(original)
            damage(rec)
            meta._put(w, b"txns", tid.hex.encode(), json.dumps(rec).encode())
    finally:
        meta.close()
    with pytest.raises(CorruptDataError, match=tid.hex):
        pe.open(tmp_path, durability="none")
    meta = _meta(tmp_path)
    try:
        with meta.write() as w:
            meta._put(w, b"txns", tid.hex.encode(), original)
    finally:
        meta.close()
    with pe.open(tmp_path, durability="none") as store:  # repaired: the txn is still there
        txn = store.create_transactional_writer("s", "t").get_txn(tid)
        assert txn.status() is pe.TxnStatus.OPEN
        txn.commit()
        assert [e.event for e in store.read_slice("s", "t")] == [b"staged"]


def test_garbage_json_in_txns_table_is_refused(tmp_path):
    tid = _store_with_open_txn(tmp_path)
    for sealed in (True, False):  # garbage with a right checksum, and raw garbage
        meta = _meta(tmp_path)
        try:
            with meta.write() as w:
                if sealed:
                    meta._put(w, b"txns", tid.hex.encode(), b"{not json")
                else:
                    w.put(tid.hex.encode(), b"{not json", db=meta._db[b"txns"])
        finally:
            meta.close()
        with pytest.raises(CorruptDataError):
            pe.open(tmp_path, durability="none")


def test_a_commit_that_dies_before_its_merge_leaves_the_txn_open_in_lmdb(tmp_path, monkeypatch):
    """The commit's drain creates a staging segment (rewriting the txn record) and then dies
    before the MERGE: after reopening, the transaction is OPEN (not stuck in COMMITTING) and
    can be committed, or aborted."""
    import pravega_embedded.transactions as txmod

    with pe.open(tmp_path, durability="none") as store:
        store.create_scope("s")
        store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
        txn = store.create_transactional_writer("s", "t").begin_txn()
        for i in range(40):  # pending (not flushed): the commit's drain creates staging segments
            txn.write_event(b"e%d" % i, routing_key=f"k{i}")

        def dies(*args, **kwargs):
            raise OSError("simulated crash before the MERGE record")

        monkeypatch.setattr(txmod, "merge", dies)
        with pytest.raises(OSError):
            txn.commit()
        assert txn.status() is pe.TxnStatus.OPEN
        tid = txn.txn_id
        monkeypatch.undo()
    with pe.open(tmp_path, durability="none") as store:
        assert list(store.read_slice("s", "t")) == []
        txn = store.create_transactional_writer("s", "t").get_txn(tid)
        assert txn.status() is pe.TxnStatus.OPEN
        txn.commit()
        assert sorted(e.event for e in store.read_slice("s", "t")) == sorted(b"e%d" % i for i in range(40))


def test_status_of_an_expired_txn_is_aborted_without_waiting_for_maintenance(tmp_path):
    import time

    with pe.open(tmp_path, durability="none", maintenance_interval=3600) as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        txn = store.create_transactional_writer("s", "t").begin_txn(lease=0.05)
        txn.write_event(b"x")
        time.sleep(0.1)
        assert txn.status() is pe.TxnStatus.ABORTED
        with pytest.raises(pe.errors.TxnFailedError):
            txn.commit()
        assert list(store.read_slice("s", "t")) == []


def test_closing_a_transactional_writer_drops_its_time_note(tmp_path):
    with pe.open(tmp_path, durability="none", maintenance_interval=3600) as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        tw = store.create_transactional_writer("s", "t", writer_id="tw")
        txn = tw.begin_txn()
        txn.write_event(b"x")
        txn.commit(timestamp=100)
        assert "tw" in store._engine.watermarks._notes.get("s/t", {})
        tw.close()
        assert "tw" not in store._engine.watermarks._notes.get("s/t", {})
        tw.close()  # idempotent


def test_closing_the_store_keeps_a_transactions_unflushed_events(tmp_path):
    with pe.open(tmp_path) as store:
        store.create_scope("s")
        store.create_stream("s", "t", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        txn = store.create_transactional_writer("s", "t").begin_txn()
        for i in range(10):
            txn.write_event(b"e%d" % i, routing_key=f"k{i}")  # pending: never flushed
        tid = txn.txn_id
    with pe.open(tmp_path) as store:
        txn = store.create_transactional_writer("s", "t").get_txn(tid)
        assert txn.status() is pe.TxnStatus.OPEN
        assert list(store.read_slice("s", "t")) == []
        txn.commit()
        assert sorted(e.event for e in store.read_slice("s", "t")) == sorted(b"e%d" % i for i in range(10))


_COMMIT_THEN_DIE = r"""
import os, sys
import pravega_embedded as pe
s = pe.open(sys.argv[1], checkpoint_interval=3600)
s.create_scope("s"); s.create_stream("s", "t")
txn = s.create_transactional_writer("s", "t").begin_txn()
txn.write_event(b"e1", routing_key="k"); txn.write_event(b"e2", routing_key="k")
txn.commit()
print(txn.txn_id.hex, flush=True)
os._exit(0)  # no close: the commit's LMDB side never reached a checkpoint
"""


def test_an_open_that_fails_while_finishing_replayed_commits_loses_no_commit(tmp_path, monkeypatch):
    """Replay meets the MERGE of a commit whose LMDB record still says OPEN. If the open fails
    before the store has recorded the commit, the next open must still see the MERGE (the
    checkpoint must not have moved past it): the transaction is COMMITTED and cannot be
    committed a second time."""
    import subprocess
    import sys
    import uuid

    import pravega_embedded.store as store_mod

    out = subprocess.run([sys.executable, "-c", _COMMIT_THEN_DIE, str(tmp_path)], check=True,
                         capture_output=True, text=True).stdout
    tid = uuid.UUID(out.strip())

    class Dies(store_mod.Transactions):
        def __init__(self, *args, **kwargs):
            raise OSError("simulated crash while finishing replayed commits")

    monkeypatch.setattr(store_mod, "Transactions", Dies)
    with pytest.raises(OSError, match="simulated"):
        pe.open(tmp_path)
    monkeypatch.undo()
    with pe.open(tmp_path) as store:
        txn = store.create_transactional_writer("s", "t").get_txn(tid)
        assert txn.status() is pe.TxnStatus.COMMITTED
        with pytest.raises(pe.errors.TxnFailedError):
            txn.commit()
        assert [e.event for e in store.read_slice("s", "t")] == [b"e1", b"e2"]


def test_a_commit_interrupted_after_its_merge_is_never_applied_twice(tmp_path, monkeypatch):
    with pe.open(tmp_path, durability="none") as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        txn = store.create_transactional_writer("s", "t").begin_txn()
        txn.write_event(b"once", routing_key="k")
        real = store._engine.files.rows_for
        calls = []

        def fails_once(idx):
            if not calls:
                calls.append(1)
                raise RuntimeError("interrupted after the MERGE was appended")
            return real(idx)

        monkeypatch.setattr(store._engine.files, "rows_for", fails_once)
        with pytest.raises(RuntimeError):
            txn.commit()
        monkeypatch.undo()
        assert txn.status() is not pe.TxnStatus.OPEN
        with pytest.raises(pe.errors.TxnFailedError):
            txn.commit()
        assert [e.event for e in store.read_slice("s", "t")] == [b"once"]


def test_write_events_of_many_small_events_with_a_long_key_commits():
    with pe.open_temporary() as store:
        store.create_scope("s")
        store.create_stream("s", "t")
        txn = store.create_transactional_writer("s", "t").begin_txn()
        txn.write_events([b""] * 40_000, routing_key="k" * 4096)  # ~164 MB of framing
        txn.write_event(b"last", routing_key="k" * 4096)
        txn.commit()
        evs = [e.event for e in store.read_slice("s", "t")]
        assert len(evs) == 40_001 and evs[-1] == b"last"


def test_transaction_calls_after_the_store_closed_raise_store_closed(tmp_path):
    store = pe.open(tmp_path, durability="none")
    store.create_scope("s")
    store.create_stream("s", "t")
    txns = [store.create_transactional_writer("s", "t").begin_txn() for _ in range(5)]
    store.close()
    calls = [lambda t: t.commit(), lambda t: t.abort(), lambda t: t.ping(), lambda t: t.flush(),
             lambda t: t.write_event(b"x")]
    for txn, call in zip(txns, calls, strict=True):
        with pytest.raises(pe.errors.StoreClosedError):
            call(txn)
        assert txn.status() is pe.TxnStatus.OPEN


def test_a_reader_never_sees_half_of_a_merged_large_event(monkeypatch):
    """A MERGE adds a large event's sections one by one; a reader that looks at the segment's
    length meanwhile (no lock) must see it before or after the whole event, never a length
    that cuts the event (widened here by a pause after each continuation section)."""
    import os
    import threading
    import time

    from pravega_embedded import segindex

    real = segindex.SectionList.add

    def slow(self, entry, data):
        real(self, entry, data)
        if data is None and entry.n_events == 0 and entry.visible_at != entry.pos + entry.nbytes:
            time.sleep(0.005)  # the reader thread runs while the merge is half applied

    monkeypatch.setattr(segindex.SectionList, "add", slow)
    big = os.urandom(20 << 20)
    errors, got = [], []
    with pe.open_temporary(durability="none") as store:
        store.create_scope("a")
        store.create_stream("a", "b")
        stop = threading.Event()

        def read() -> None:
            r = store.create_reader("a", "b")
            while not stop.is_set() or len(got) < 3:
                try:
                    ev = r.read_next_event(0.01)
                except Exception as exc:  # noqa: BLE001
                    errors.append(exc)
                    return
                if ev is not None:
                    got.append(len(ev.event))

        t = threading.Thread(target=read)
        t.start()
        w = store.create_writer("a", "b", "w")
        for _ in range(3):
            w.write_event(big, routing_key="k")
        w.flush()
        stop.set()
        t.join(120)
        assert not t.is_alive(), "the reader did not get the 3 events in 120 s"
    assert not errors, errors
    assert got == [len(big)] * 3
