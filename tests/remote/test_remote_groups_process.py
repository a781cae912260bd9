"""Reader groups across real processes: 4 writer processes and 3 reader processes of one group
over a stream that scales while the owner is SIGKILLed again and again; readers of client
processes that are SIGKILLed give their segments back; their transactions abort at their lease.

Exactly once across owner kills is Pravega's recipe: a reader keeps what it read since the last
checkpoint marker and saves it when the next marker comes; after a crash the group is reset to
its last completed checkpoint, and what was saved for later checkpoints is dropped."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pravega_embedded as pe
from pravega_embedded import errors

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
WRITERS, READERS, PER_WRITER = 4, 3, 4000

OWNER = textwrap.dedent("""
    import sys
    import pravega_embedded as pe
    store = pe.open(sys.argv[1], tier2=False, reader_timeout=float(sys.argv[2]))
    assert isinstance(store, pe.Store)
    print("READY", flush=True)
    sys.stdin.readline()
    store.close()
""")

WRITER = textwrap.dedent("""
    import sys, time
    import pravega_embedded as pe
    from pravega_embedded import errors
    path, wid, total = sys.argv[1], sys.argv[2], int(sys.argv[3])
    try:
        store = pe.open(path)
        w = store.create_writer("a", "s", writer_id=wid)
        seq = w.last_sequence + 1
        while seq < total:
            w.write_event(f"{wid}:{seq}".encode(), routing_key=f"{wid}-k{seq % 4}", sequence=seq)
            seq += 1
            if seq % 100 == 0:
                w.flush()
                time.sleep(0.01)
        w.flush()
        store.close()
    except errors.ConnectionLostError:
        pass
""")

READER = textwrap.dedent("""
    import os, sys
    import pravega_embedded as pe
    from pravega_embedded import errors
    path, rid, out = sys.argv[1], sys.argv[2], sys.argv[3]
    buf = []

    def save(name):
        tmp = os.path.join(out, "." + rid)
        with open(tmp, "w") as f:
            f.write("\\n".join(buf))
            f.flush()
            os.fsync(f.fileno())
        os.rename(tmp, os.path.join(out, f"{name}.{rid}"))
        buf.clear()

    try:
        store = pe.open(path)
        r = store.get_reader_group("g").create_reader(rid)
        print("READY", flush=True)
        while True:
            ev = r.read_next_event(1.0)
            if ev is None:
                continue
            if ev.is_checkpoint:
                save(ev.checkpoint_name)
            elif ev.is_read_completed:
                save("final")
                break
            else:
                buf.append(ev.event.decode())
        r.close()
        store.close()
    except errors.ConnectionLostError:
        pass
""")


def _spawn(script, *args, stdin=False):
    return subprocess.Popen([sys.executable, "-c", script, *map(str, args)], env=ENV, text=True,
                            stdin=subprocess.PIPE if stdin else None, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)


def _owner(path, reader_timeout=30.0):
    child = _spawn(OWNER, path, reader_timeout, stdin=True)
    assert child.stdout.readline().strip() == "READY", child.stderr.read()
    return child


def _finish(procs, timeout=120):
    for p in procs:
        try:
            out, err = p.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            p.kill()
            out, err = p.communicate()
            raise AssertionError(f"a client did not end: {err}")
        assert p.returncode == 0, err


def _split_one(client, rnd):
    """Split a random open segment in two: the stream scales under the readers."""
    open_segs = [s for s in client.stream_info("a", "s").segments if not s.sealed]
    seg = rnd.choice(open_segs)
    mid = (seg.key_low + seg.key_high) / 2
    client.scale_stream("a", "s", [seg.segment_id], [(seg.key_low, mid), (mid, seg.key_high)])


def _recover(path, out):
    """After a crash: reset the group to its last completed checkpoint and drop what readers
    saved for checkpoints after it. Returns that checkpoint's name (None: none yet)."""
    with pe.open(path, tier2=False, exclusive=True) as store:
        g = store.get_reader_group("g")
        cp = g.last_checkpoint()
        done = cp.name if cp is not None else ""
        for f in os.listdir(out):
            if f.split(".")[0] > done:
                os.unlink(os.path.join(out, f))
        if cp is not None:
            g.reset(cp)
        else:
            g.reset(g.config)
        return done


def test_writer_and_group_reader_processes_across_owner_kills(tmp_path):
    path, out = tmp_path / "store", tmp_path / "out"
    out.mkdir()
    rnd = random.Random(77)
    with pe.open(path, tier2=False, exclusive=True) as store:
        store.create_scope("a")
        store.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        store.create_reader_group("g", pe.ReaderGroupConfig(streams=[("a", "s")],
                                                            automatic_checkpoint_interval=None))
    cp_no, kills = 0, 0
    while True:
        final = kills >= 4
        owner = _owner(path)
        try:
            writers = [_spawn(WRITER, path, f"w{i}", PER_WRITER) for i in range(WRITERS)]
            readers = [_spawn(READER, path, f"r{i}", out) for i in range(READERS)]
            for r in readers:
                assert r.stdout.readline().strip() == "READY", r.stderr.read()
            with pe.open(path) as client:
                assert isinstance(client, pe.RemoteStore)
                g = client.get_reader_group("g")
                _split_one(client, rnd)
                if not final:  # checkpoints while they run, then the owner dies mid-run
                    deadline = time.monotonic() + 0.3 + rnd.random() * 0.7
                    while time.monotonic() < deadline:
                        cp_no += 1
                        try:
                            g.initiate_checkpoint(f"cp-{cp_no:04d}")
                        except errors.MaxCheckpointsExceededError:
                            pass  # the readers are behind (a loaded machine): the next one
                        time.sleep(0.1)
                    owner.send_signal(signal.SIGKILL)
                    kills += 1
                else:  # the writers finish; the stream is sealed; the readers read to its end
                    _finish(writers)
                    client.seal_stream("a", "s")
                    _finish(readers)
            if not final:
                _finish(writers + readers)
        finally:
            if owner.poll() is None:
                owner.stdin.write("\n")
                owner.stdin.flush()
            owner.wait(60)
        if final:
            break
        _recover(path, out)
    got = []
    for rid in (f"r{i}" for i in range(READERS)):
        mine = []
        for f in sorted(f for f in os.listdir(out) if f.endswith("." + rid)):
            text = (out / f).read_text()
            mine += text.split("\n") if text else []
        seen = {}
        for e in mine:  # per routing key, in write order within each reader
            wid, seq = e.split(":")
            key = (wid, int(seq) % 4)
            assert seen.get(key, -1) < int(seq), f"{rid} read {e} after {seen.get(key)}"
            seen[key] = int(seq)
        got += mine
    expected = [f"w{i}:{s}" for i in range(WRITERS) for s in range(PER_WRITER)]
    assert len(got) == len(set(got)), "an event was read twice"
    assert sorted(got) == sorted(expected), "an acknowledged event was lost"
    assert kills >= 4


def test_a_killed_client_reader_is_put_offline_and_its_transaction_aborts(tmp_path):
    path = tmp_path / "store"
    owner = _owner(path, reader_timeout=1.0)
    try:
        with pe.open(path) as client:
            client.create_scope("a")
            client.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
            w = client.create_writer("a", "s")
            for i in range(400):
                w.write_event(b"%d" % i, routing_key=f"k{i % 8}")
            w.flush()
            g = client.create_reader_group("g", pe.ReaderGroupConfig(
                streams=[("a", "s")], automatic_checkpoint_interval=None))
            victim = _spawn(textwrap.dedent("""
                import sys, time
                import pravega_embedded as pe
                store = pe.open(sys.argv[1])
                r = store.get_reader_group("g").create_reader("victim")
                tw = store.create_transactional_writer("a", "s", "tw")
                tx = tw.begin_txn(lease=1.0)
                tx.write_event(b"never", "k0")
                tx.flush()
                while r.read_next_event(0.2) is None:
                    pass
                print(tx.txn_id, flush=True)
                time.sleep(600)
            """), path)
            txn_id = victim.stdout.readline().strip()
            assert txn_id, victim.stderr.read()
            assert "victim" in g.online_readers()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            tw = client.create_transactional_writer("a", "s", "tw")
            deadline = time.monotonic() + 60
            while ("victim" in g.online_readers() or tw.get_txn(txn_id).status() == pe.TxnStatus.OPEN) \
                    and time.monotonic() < deadline:
                time.sleep(0.05)
            assert g.online_readers() == []
            assert tw.get_txn(txn_id).status() == pe.TxnStatus.ABORTED
            r = g.create_reader("other")  # every segment is the other reader's, from the start
            got = []
            while (ev := r.read_next_event(0.5)) is not None:
                got.append(int(ev.event))
            assert sorted(got) == list(range(400))
            assert g.segment_distribution().counts == {"other": 4}
            r.close()
    finally:
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(60)


def test_a_client_reader_stays_in_its_group_until_the_timeout(tmp_path):
    """A connection lost is a process that died: the reader stays, and a reader of the same id
    that joins before the timeout resumes its segments (at its last checkpoint)."""
    path = tmp_path / "store"
    owner = _owner(path, reader_timeout=30.0)
    try:
        with pe.open(path) as client:
            client.create_scope("a")
            client.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
            g = client.create_reader_group("g", pe.ReaderGroupConfig(
                streams=[("a", "s")], automatic_checkpoint_interval=None))
            victim = _spawn(textwrap.dedent("""
                import sys, time
                import pravega_embedded as pe
                r = pe.open(sys.argv[1]).get_reader_group("g").create_reader("r")
                print(r.read_next_event(0), flush=True)
                time.sleep(600)
            """), path)
            assert victim.stdout.readline().strip() == "None", victim.stderr.read()
            victim.send_signal(signal.SIGKILL)
            victim.wait()
            assert g.online_readers() == ["r"]
            deadline = time.monotonic() + 60
            while True:  # the same id resumes its segments once the owner saw the connection end
                try:
                    r2 = g.create_reader("r")
                    break
                except errors.ReaderExistsError:
                    assert time.monotonic() < deadline
                    time.sleep(0.05)
            assert g.segment_distribution().counts == {"r": 2}
            r2.close()
            assert g.online_readers() == []
    finally:
        owner.stdin.write("\n")
        owner.stdin.flush()
        owner.wait(60)
