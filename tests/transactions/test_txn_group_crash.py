"""A group commit (``commit_transactions``) survives a crash right after it returned, before any
checkpoint passed its MERGE: at the next open every transaction of the group is COMMITTED (not
left OPEN to expire later), every event is visible once, and the mark is there, so committing
the batch again is a no-op."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pravega_embedded as pe

CHILD = textwrap.dedent("""
    import os, signal, sys
    import pravega_embedded as pe
    store = pe.open(sys.argv[1], durability="fsync", tier2=False)
    store.create_scope("g")
    store.create_stream("g", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    store._engine.checkpoints.run = lambda: 0  # no checkpoint passes the MERGE: replay must
    tw = store.create_transactional_writer("g", "s", writer_id="sink")
    txns = []
    for tag in "abc":
        t = tw.begin_txn()
        t.write_events([f"{tag}|{i}".encode() for i in range(50)], routing_key=tag)
        txns.append(t)
    assert tw.commit_transactions(txns, mark=3)
    print(" ".join(str(t.txn_id) for t in txns), flush=True)
    os.kill(os.getpid(), signal.SIGKILL)
""")


def test_a_crash_after_a_group_commit_leaves_every_transaction_committed(tmp_path):
    path = tmp_path / "store"
    proc = subprocess.run([sys.executable, "-c", CHILD, str(path)], capture_output=True, text=True,
                          env=dict(os.environ), timeout=120)
    assert proc.returncode == -9, proc.stderr
    ids = proc.stdout.split()
    assert len(ids) == 3
    with pe.open(path, tier2=False) as store:
        tw = store.create_transactional_writer("g", "s", writer_id="sink")
        assert [tw.get_txn(i).status() for i in ids] == [pe.TxnStatus.COMMITTED] * 3
        got = [ev.event.decode() for ev in store.read_slice("g", "s")]
        assert sorted(got) == sorted(f"{t}|{i}" for t in "abc" for i in range(50))
        assert tw.last_mark() == 3
        again = tw.begin_txn()
        again.write_event(b"a|0", routing_key="a")
        assert tw.commit_transactions([again], mark=3) is False
        assert len(list(store.read_slice("g", "s"))) == 150
