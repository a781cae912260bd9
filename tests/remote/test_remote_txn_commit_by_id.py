"""A client's ``commit_transactions`` given transaction ids (not objects) first sends the events
those transactions still buffer in the client: committing by id never leaves written events
out (they were silently dropped before)."""

from __future__ import annotations

import pravega_embedded as pe


def test_commit_by_id_sends_buffered_events(tmp_path):
    with pe.open(tmp_path / "s", "none") as owner:
        owner.create_scope("a")
        owner.create_stream("a", "s", 2)
        with pe.open(tmp_path / "s") as client:
            assert isinstance(client, pe.RemoteStore)
            tw = client.create_transactional_writer("a", "s", "tw")
            t1, t2 = tw.begin_txn(), tw.begin_txn()
            t1.write_events([b"one-%d" % i for i in range(5)], routing_key="k1")  # buffered here
            t2.write_event(b"two", routing_key="k2")
            again = tw.get_txn(t2.txn_id)  # a second object of t2, with its own buffer
            again.write_event(b"two-again", routing_key="k2")
            assert tw.commit_transactions([t1.txn_id, str(t2.txn_id)]) is True
            tw.close()
        got = sorted(ev.event for ev in owner.read_slice("a", "s"))
        assert got == sorted([b"one-%d" % i for i in range(5)] + [b"two", b"two-again"])
