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
