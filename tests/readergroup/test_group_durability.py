"""Group state survives: clean reopen resumes exactly; after SIGKILL a reader id resumes from its
last checkpoint, replaying exactly the events after it, and the state is always consistent."""

from __future__ import annotations

import json
import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import pytest
from rg_helpers import cfg, drain, events, write

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))


def test_clean_reopen_keeps_groups_and_resumes_exactly(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        written = write(store, "iot", "s", 600)
        g = store.create_reader_group("g", cfg("iot/s", max_outstanding_checkpoints=7))
        r1, r2 = g.create_reader("r1"), g.create_reader("r2")
        first = []
        for _ in range(100):
            first += [r1.read_next_event(0), r2.read_next_event(0)]
        fut = g.initiate_checkpoint("cp")
        first += events(drain([r1, r2], idle_rounds=1))
        cp = fut.result(timeout=1)
        for _ in range(50):
            first.append(r1.read_next_event(0))
        # the store closes r1 and r2: they leave at their exact positions
    with pe.open(path) as store:
        assert store.list_reader_groups() == ["g"]
        g = store.get_reader_group("g")
        assert g.config.max_outstanding_checkpoints == 7
        assert g.last_checkpoint() == cp
        assert g.online_readers() == []
        rest = events(drain([g.create_reader("r1")]))
    got = [e.event for e in first + rest if e is not None and not e.is_checkpoint]
    assert Counter(got) == Counter(written)


CHILD = textwrap.dedent("""
    import json, os, sys, threading, time
    import pravega_embedded as pe
    path, seed = sys.argv[1], int(sys.argv[2])
    store = pe.open(path)
    g = store.get_reader_group("g")
    out = open(sys.argv[3], "a", buffering=1)
    def run(rid):
        r = g.create_reader(rid)
        n = 0
        while True:
            n += 1
            if n % 5 == 0:
                time.sleep(0.001)  # a slow consumer: kills land mid-stream
            ev = r.read_next_event(timeout=0.05)
            if ev is None or ev.is_read_completed:
                continue
            if ev.is_checkpoint:
                out.write(json.dumps({"marker": ev.checkpoint_name, "reader": rid}) + "\\n")
                continue
            out.write(json.dumps({"reader": rid, "sid": ev.segment_id, "off": ev.offset}) + "\\n")
    for rid in ("r1", "r2"):
        threading.Thread(target=run, args=(rid,), daemon=True).start()
    n = 0
    while True:  # user checkpoints as fast as the group answers them; parent SIGKILLs us
        try:
            g.initiate_checkpoint(f"c{seed}-{n}").result(timeout=5)
            print("checkpoint", n, flush=True)
        except Exception as exc:
            print("checkpoint failed", exc, flush=True)
        n += 1
        time.sleep(0.002)
""")


def group_positions(g):
    """Where the group stands per segment in the persisted state: recorded offsets of the
    readers listed, unassigned and completed offsets. Each segment is in exactly one place."""
    s = g._gs.state
    places = [dict(r["segments"]) for r in s["readers"].values()]
    places += [s["unassigned"], s["completed"]]
    pos = {}
    for p in places:
        for k, off in p.items():
            assert k not in pos, f"segment {k} is in two places"
            pos[k] = off
    return pos


def wait_for_a_read(log: Path, child: subprocess.Popen, timeout: float = 60.0) -> None:
    """Until the child's log records an event read (an "off" line); the cap only bounds a hang."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and child.poll() is None:
        if log.exists() and '"off"' in log.read_text():
            return
        time.sleep(0.02)


@pytest.mark.slow
def test_sigkill_during_reads_and_checkpoints_then_resume_from_the_last_checkpoint(tmp_path):
    """10 kills at random moments. After each: the state is consistent (every segment in one
    place), at or after the last completed checkpoint, and re-creating the reader ids resumes
    exactly there: they read precisely the events after it, once."""
    path = tmp_path / "store"
    with pe.open(path) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
        write(store, "iot", "s", 20000)
        store.seal_stream("iot", "s")
        store.create_reader_group("g", cfg("iot/s", automatic_checkpoint_interval=0.02))
    rng = random.Random(7)
    reads = []
    for it in range(10):
        log = tmp_path / f"log{it}.jsonl"
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(it), str(log)],
                                 env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        wait_for_a_read(log, child)  # so the kill lands mid-read however slow the machine is
        time.sleep(rng.uniform(0, 0.6))
        child.send_signal(signal.SIGKILL)
        out, err = child.communicate(timeout=30)
        assert "Traceback" not in err, err
        with pe.open(path) as store:
            g = store.get_reader_group("g")
            pos = group_positions(g)
            cut = g.get_stream_cuts()[("iot", "s")].as_dict()
            for k, off in pos.items():
                sid = int(k.rsplit("/", 1)[1])
                assert off >= cut[sid], "the state never goes behind the last checkpoint"
            start = pe.StreamCut.of("iot", "s", {int(k.rsplit("/", 1)[1]): off for k, off in pos.items()})
            expected = Counter((e.segment_id, e.offset) for e in store.read_slice("iot", "s", start=start))
            # the crashed process's readers are still listed; their ids resume their segments
            assert set(g.online_readers()) <= {"r1", "r2"}
            if it % 3 == 2:  # now and then read everything through and check it
                readers = [g.create_reader(rid) for rid in ("r1", "r2")]
                got = Counter((e.segment_id, e.offset) for e in events(drain(readers)))
                assert got == expected, "resume reads exactly the events after the saved positions"
                for r in readers:
                    r.close()
                g.reset(cfg("iot/s", automatic_checkpoint_interval=0.02))  # read it again next time
        reads.append(sum("off" in json.loads(x) for x in log.read_text().splitlines()) if log.exists() else 0)
    # kills landed while the readers were reading (the test exercised the protocol)
    assert sum(n > 0 for n in reads) >= 8, reads


def test_sigkill_then_resume_replays_exactly_the_events_after_the_checkpoint(tmp_path):
    path = tmp_path / "store"
    with pe.open(path) as store:
        store.create_scope("iot")
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        written = write(store, "iot", "s", 500)
        store.create_reader_group("g", cfg("iot/s"))
    script = textwrap.dedent("""
        import os, sys
        import pravega_embedded as pe
        store = pe.open(sys.argv[1])
        g = store.get_reader_group("g")
        r = g.create_reader("r1")
        for _ in range(100):
            r.read_next_event(0)
        fut = g.initiate_checkpoint("cp")
        while not r.read_next_event(0).is_checkpoint:
            pass
        ev = r.read_next_event(0)  # records the checkpoint
        fut.result(timeout=5)
        print(ev.segment_id, ev.offset, flush=True)
        for _ in range(150):
            r.read_next_event(0)  # read on past the checkpoint, then die
        os.kill(os.getpid(), 9)
    """)
    out = subprocess.run([sys.executable, "-c", script, str(path)], env=ENV, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == -9, out.stderr
    with pe.open(path) as store:
        g = store.get_reader_group("g")
        assert g.online_readers() == ["r1"]
        cp = g.last_checkpoint()
        assert cp.name == "cp"
        after = [e.event for e in store.read_slice("iot", "s", start=cp.stream_cut("iot", "s"))]
        r = g.create_reader("r1")  # resumes at its last checkpoint
        got = [e.event for e in events(drain([r]))]
        assert Counter(got) == Counter(after)
        assert 0 < len(got) < len(written)
        # the same from a different reader after reader_offline(r1, None)
        r.close()
        g.reset(cp)
        g2 = store.get_reader_group("g")
        assert Counter(e.event for e in events(drain([g2.create_reader("other")]))) == Counter(after)
