"""Real processes on one store: clients in other processes write and read through the owner;
when the owner dies, clients get ConnectionLostError, the next open becomes the owner, and a
writer re-created with its writer_id resumes exactly once."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))

OWNER = textwrap.dedent("""
    import sys
    import pravega_embedded as pe
    store = pe.open(sys.argv[1], tier2=False)
    assert isinstance(store, pe.Store)
    store.create_scope("a", exist_ok=True)
    store.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)), exist_ok=True)
    print("READY", flush=True)
    sys.stdin.readline()
    store.close()
""")

WRITER = textwrap.dedent("""
    import sys
    import pravega_embedded as pe
    path, wid, n = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = pe.open(path)
    assert isinstance(store, pe.RemoteStore), store
    with store.create_writer("a", "s", writer_id=wid) as w:
        for i in range(n):
            w.write_event(f"{wid}:{i}".encode(), routing_key=f"{wid}-k{i % 4}")
        w.flush()
    store.close()
    print("DONE", flush=True)
""")


def _start_owner(path):
    child = subprocess.Popen([sys.executable, "-c", OWNER, str(path)], env=ENV, stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    line = child.stdout.readline().strip()
    assert line == "READY", child.stderr.read()
    return child


def _read_all(store):
    out = []
    with store.create_reader("a", "s") as r:
        while (ev := r.read_next_event(timeout=0)) is not None:
            out.append(ev)
    return out


def test_owner_killed_clients_get_a_clear_error_and_the_next_open_takes_over(tmp_path):
    path = tmp_path / "store"
    child = _start_owner(path)
    try:
        client = pe.open(path)
        assert isinstance(client, pe.RemoteStore) and client.owner_pid == child.pid
        w = client.create_writer("a", "s", writer_id="gw")
        for i in range(1000):
            w.write_event(b"%d" % i, routing_key=f"k{i % 7}")
        assert w.flush() == 999  # acknowledged: durable in the owner
        for i in range(1000, 1100):  # buffered or sent, never acknowledged
            w.write_event(b"%d" % i, routing_key=f"k{i % 7}")
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        with pytest.raises(errors.ConnectionLostError, match="owner of store"):
            for i in range(1100, 1200):
                w.write_event(b"%d" % i, routing_key=f"k{i % 7}")
            w.flush()
        with pytest.raises(errors.ConnectionLostError):
            client.list_scopes()
        client.close()  # a dead connection closes quietly
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    with pe.open(path, tier2=False) as store:  # the owner is gone: this process owns it now
        assert isinstance(store, pe.Store)
        w = store.create_writer("a", "s", writer_id="gw")
        resumed = w.last_sequence
        assert 999 <= resumed < 1200  # nothing acknowledged is lost
        for i in range(990, 1200):  # the application resends what it cannot know was written
            w.write_event(b"%d" % i, routing_key=f"k{i % 7}", sequence=i)
        w.close()
        got = [int(ev.event) for ev in _read_all(store)]
    assert sorted(got) == list(range(1200)), "every event exactly once"


def test_writer_processes_and_a_reader_share_the_owner(tmp_path):
    path = tmp_path / "store"
    with pe.open(path, tier2=False) as owner:
        owner.create_scope("a")
        owner.create_stream("a", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        procs = [subprocess.Popen([sys.executable, "-c", WRITER, str(path), f"w{k}", "3000"], env=ENV,
                                  stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for k in range(4)]
        reader = owner.create_reader("a", "s")
        got = []
        try:
            for p in procs:
                out, err = p.communicate(timeout=300)
                assert p.returncode == 0 and "DONE" in out, err
        finally:
            for p in procs:
                if p.poll() is None:
                    p.kill()
        while (ev := reader.read_next_event(timeout=0)) is not None:
            got.append(ev)
        reader.close()
    seen = {}
    for ev in got:
        wid, i = ev.event.decode().split(":")
        seen.setdefault(ev.routing_key, []).append(int(i))
    assert sum(map(len, seen.values())) == 12000
    assert all(v == sorted(v) and len(v) == len(set(v)) for v in seen.values()), "per-key order"


def test_a_client_process_reads_what_the_owner_writes(tmp_path):
    path = tmp_path / "store"
    script = textwrap.dedent("""
        import sys
        import pravega_embedded as pe
        store = pe.open(sys.argv[1])
        n = 0
        with store.create_reader("a", "s") as r:
            while n < 2500 and (ev := r.read_next_event(timeout=60)) is not None:
                assert int(ev.event) == n
                n += 1
            print("READ", n, r.position().to_text(), flush=True)  # inside a batch it holds
        store.close()
    """)
    with pe.open(path, tier2=False) as owner:
        owner.create_scope("a")
        owner.create_stream("a", "s")
        p = subprocess.Popen([sys.executable, "-c", script, str(path)], env=ENV,
                             stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        try:
            with owner.create_writer("a", "s") as w:
                for i in range(5000):
                    w.write_event(b"%d" % i, routing_key="k")
            out, err = p.communicate(timeout=300)
        finally:
            if p.poll() is None:
                p.kill()
        assert p.returncode == 0, err
        assert out.startswith("READ 2500 "), out + err
        cut = pe.StreamCut.from_text(out.split()[2])
        with owner.create_reader("a", "s", start=cut) as r:  # just after the last event returned
            rest = []
            while (ev := r.read_next_event(timeout=0)) is not None:
                rest.append(int(ev.event))
        assert rest == list(range(2500, 5000))


def test_owner_sigkilled_again_and_again_nothing_acknowledged_lost_nothing_twice(tmp_path):
    """>= 10 owners killed mid-write: each time the client's calls raise ConnectionLostError, a
    new owner takes over, and the re-created writer resumes from its last durable sequence: the
    stream holds 0..n-1 exactly once, including every acknowledged event."""
    import random
    import threading

    path = tmp_path / "store"
    rnd = random.Random(1234)
    acked = -1
    kills = 0
    while kills < 10:
        child = _start_owner(path)
        try:
            with pe.open(path) as client:
                assert isinstance(client, pe.RemoteStore)
                w = client.create_writer("a", "s", writer_id="gw")
                assert w.last_sequence >= acked  # nothing acknowledged is lost
                seq = w.last_sequence + 1
                started = threading.Event()
                killer = threading.Thread(target=lambda: (started.wait(60), time.sleep(rnd.random() * 0.05),
                                                          child.send_signal(signal.SIGKILL)))
                killer.start()
                try:
                    while True:
                        w.write_event(b"%d" % seq, routing_key=f"k{seq % 5}", sequence=seq)
                        seq += 1
                        started.set()
                        if seq % 100 == 0:
                            acked = w.flush()
                except errors.ConnectionLostError:
                    kills += 1
                finally:
                    started.set()
                    killer.join()
        finally:
            if child.poll() is None:
                child.kill()
            child.wait()
    with pe.open(path, tier2=False) as store:
        assert isinstance(store, pe.Store)
        w = store.create_writer("a", "s", writer_id="gw")
        last = w.last_sequence
        w.close()
        assert last >= acked
        got = sorted(int(ev.event) for ev in _read_all(store))
    assert got == list(range(last + 1)), "every event once, none lost, none twice"
