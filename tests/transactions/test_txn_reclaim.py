"""Disk reclaim and transactions: the journal file holding an open transaction's staged events
is kept while everything around it is truncated and reclaimed (also across a reopen and a
scaling that makes the commit copy them); the transaction then commits every event. Once the
transaction is aborted instead, that file is given back.
"""

from __future__ import annotations

import pytest
from txn_helpers import assert_key_order, make_stream, payload, slice_events, tags

import pravega_embedded as pe

SCOPE, STREAM, FILLER = "rc", "s", "p"


def truncate_filler(store: pe.Store) -> None:
    store.truncate_stream(SCOPE, FILLER, store.stream_info(SCOPE, FILLER).tail)
    store.checkpoint()
    store.reclaim()


@pytest.mark.parametrize("end", ["commit", "abort"])
def test_staged_events_survive_reclaim_until_the_transaction_ends(store_path, end):
    with pe.open(store_path, durability="none", roll_bytes=1 << 20) as store:
        make_stream(store, SCOPE, STREAM, 2)
        make_stream(store, SCOPE, FILLER, 1)
        txn = store.create_transactional_writer(SCOPE, STREAM).begin_txn()
        for i in range(2000):
            txn.write_event(payload("txn", f"k{i % 7}", i // 7, 100), routing_key=f"k{i % 7}")
        txn.flush()
        store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
        first = store._engine.journal.files()[0]
        with store.create_writer(SCOPE, FILLER) as w:
            for _ in range(40_000):
                w.write_event(b"f" * 150)
        assert len(store._engine.journal.files()) > 4
        truncate_filler(store)
        files = store._engine.journal.files()
        assert first in files and len(files) <= 3, files  # the filler's files went, the staged data's stayed
        tid = txn.txn_id
    with pe.open(store_path, durability="none", roll_bytes=1 << 20) as store:
        truncate_filler(store)
        assert first in store._engine.journal.files()
        txn = store.create_transactional_writer(SCOPE, STREAM).get_txn(tid)
        if end == "commit":
            txn.commit()
            events = slice_events(store, SCOPE, STREAM)
            assert tags(events) == {"txn": 2000}
            assert_key_order(events)
            truncate_filler(store)
            assert first in store._engine.journal.files()  # now the stream's data
        else:
            txn.abort()
            with store.create_writer(SCOPE, FILLER) as w:  # move the write position on
                for _ in range(10_000):
                    w.write_event(b"f" * 150)
            truncate_filler(store)
            assert first not in store._engine.journal.files(), "an aborted transaction's file was kept"
            assert slice_events(store, SCOPE, STREAM) == []
    with pe.open(store_path, durability="none") as store:
        assert tags(slice_events(store, SCOPE, STREAM)) == ({"txn": 2000} if end == "commit" else {})
