"""A damaged transaction record in LMDB is refused at open with CorruptDataError (never a
KeyError or a silently dropped transaction), and the store opens again once it is repaired."""

from __future__ import annotations

import json

import pytest

import pravega_embedded as pe
from pravega_embedded.errors import CorruptDataError
from pravega_embedded.metadata import Metadata


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
    meta = Metadata(str(tmp_path / "meta"), sync=True)
    try:
        with meta.env.begin(write=True) as w:
            raw = w.get(tid.hex.encode(), db=meta._txns)
            original = bytes(raw)
            rec = json.loads(raw)
            damage(rec)
            w.put(tid.hex.encode(), json.dumps(rec).encode(), db=meta._txns)
    finally:
        meta.close()
    with pytest.raises(CorruptDataError, match=tid.hex):
        pe.open(tmp_path, durability="none")
    meta = Metadata(str(tmp_path / "meta"), sync=True)
    try:
        with meta.env.begin(write=True) as w:
            w.put(tid.hex.encode(), original, db=meta._txns)
    finally:
        meta.close()
    with pe.open(tmp_path, durability="none") as store:  # repaired: the txn is still there
        txn = store.create_transactional_writer("s", "t").get_txn(tid)
        assert txn.status() is pe.TxnStatus.OPEN
        txn.commit()
        assert [e.event for e in store.read_slice("s", "t")] == [b"staged"]


def test_garbage_json_in_txns_table_is_refused(tmp_path):
    tid = _store_with_open_txn(tmp_path)
    meta = Metadata(str(tmp_path / "meta"), sync=True)
    try:
        with meta.env.begin(write=True) as w:
            w.put(tid.hex.encode(), b"{not json", db=meta._txns)
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
        assert "tw" in store._watermarks._notes.get("s/t", {})
        tw.close()
        assert "tw" not in store._watermarks._notes.get("s/t", {})
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
