"""Every section of every segment knows when the record that put it there was appended (its
write time: tier 2's ``write_time`` column, and time lookups), for events, byte-stream writes
small and large, transactions (the commit's time) and large events; the time survives a
checkpoint and reopen (LMDB) and a crash before the checkpoint (replayed from the journal)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pravega_embedded as pe

WORKLOAD = textwrap.dedent("""
    import json, os, sys, time
    import pravega_embedded as pe
    s = pe.open(sys.argv[1], checkpoint_interval=3600)
    marks = {}
    def mark(name):
        marks[name] = time.time_ns()
        time.sleep(0.002)
    s.create_scope("t", exist_ok=True)
    s.create_stream("t", "ev", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
    mark("start")
    w = s.create_writer("t", "ev", writer_id="w")
    for i in range(50):
        w.write_event(b"e%d" % i, routing_key="k%d" % (i % 3))
    w.flush()
    mark("events")
    tx = s.create_transactional_writer("t", "ev", writer_id="tx").begin_txn()
    for i in range(5):
        tx.write_event(b"t%d" % i, routing_key="k%d" % i)
    mark("staged")
    tx.commit()
    mark("committed")
    w.write_event(b"L" * (9 << 20), routing_key="k1")  # a large event: chunks and a MERGE
    w.flush()
    mark("large")
    b = s.create_byte_stream("t", "bytes")
    b.write(b"x" * 1000)  # one BYTES record
    b.flush()
    mark("small-bytes")
    b.write(os.urandom(5 << 20))  # staged pieces and a MERGE
    b.flush()
    mark("big-bytes")
    if sys.argv[2] == "checkpoint":
        s.checkpoint()
    print(json.dumps(marks), flush=True)
    os._exit(0)  # a crash: no close, no last checkpoint
""")


def _entries(store: pe.Store, scope: str, stream: str) -> list[tuple[int, int, int]]:
    """(segment id, start offset, write time) of every section, from the store's index."""
    e = store._engine
    out = []
    st = e.streams[f"{scope}/{stream}"]
    for seg in st.segments.values():
        mem = {x.start: x.write_ns for x in seg.sections.entries}
        disk = {start: w for start, _pos, _n, _ev, w in e.meta.index_entries(seg.uid)}
        for start in sorted(set(mem) | set(disk)):
            out.append((seg.segment_id, start, mem.get(start, disk.get(start))))
    return out


def _run(path: Path, mode: str) -> dict[str, int]:
    out = subprocess.run([sys.executable, "-c", WORKLOAD, str(path), mode], capture_output=True,
                         text=True, timeout=300, cwd=Path(__file__).resolve().parents[2])
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout)


def _check(store: pe.Store, m: dict[str, int]) -> None:
    ev = _entries(store, "t", "ev")
    assert ev and all(m["start"] <= w <= m["large"] for _, _, w in ev), ev
    # the transaction's sections carry its commit's time, not the time they were staged
    times = sorted(w for _, _, w in ev)
    in_commit = [w for w in times if m["staged"] <= w <= m["committed"]]
    assert in_commit, "no section written at the commit"
    assert not [w for w in times if m["events"] <= w < m["staged"]], "staged data is not in a segment"
    assert [w for w in times if m["committed"] < w <= m["large"]], "the large event's sections"
    by = _entries(store, "t", "bytes")
    small = [w for _, start, w in by if start == 0]
    assert len(small) == 1 and m["large"] <= small[0] <= m["small-bytes"]
    big = [w for _, start, w in by if start > 0]
    assert big and all(m["small-bytes"] <= w <= m["big-bytes"] for w in big)


def test_write_times_come_back_from_the_journal_after_a_crash(tmp_path):
    marks = _run(tmp_path / "s", "crash")
    with pe.open(tmp_path / "s") as store:
        assert store.recovered_records > 0
        _check(store, marks)
        store.checkpoint()
    with pe.open(tmp_path / "s") as store:  # and from LMDB after that checkpoint
        assert store.recovered_records == 0
        _check(store, marks)


def test_write_times_come_back_from_the_metadata_after_a_checkpoint(tmp_path):
    marks = _run(tmp_path / "s", "checkpoint")
    with pe.open(tmp_path / "s") as store:
        assert store.recovered_records == 0
        _check(store, marks)


def test_sections_appended_now_carry_now(tmp_path):
    with pe.open(tmp_path / "s", durability="none") as store:
        store.create_scope("t")
        store.create_stream("t", "ev")
        t0 = time.time_ns()
        with store.create_writer("t", "ev") as w:
            w.write_event(b"x")
        t1 = time.time_ns()
        (w_ns,) = [w for _, _, w in _entries(store, "t", "ev")]
        assert t0 <= w_ns <= t1
    assert os.path.isdir(tmp_path / "s")
