"""Crash test: SIGKILL a process while it writes large events, then recover and verify.

The child (large_crash_child.py, durability "fsync") writes 20-40 MiB events between small
ones and acknowledges each large event after its flush. The parent kills it at seeded random
moments (most land inside a large event's chunks or its MERGE), reopens the store and checks
after every kill:

- every acknowledged event is there, whole and byte-exact; no partial, garbage or duplicate
  event is visible to a reader, a slice (iterated and as Arrow) or fetch_event;
- the writer's events are gap-free by sequence number, in key order per key, and the writer
  resumes at the last durable one;
- chunks of the large event cut short by the kill are never visible, and once the stream is
  truncated past everything read, retention reclaims their journal space;
- the next child run writes on from the recovered state, and so does the parent at the end.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from large_crash_child import (
    SCOPE,
    STREAM,
    WRITER,
    is_large,
    key_of,
    payload,
    seq_of,
    size_of,
)

import pravega_embedded as pe

CHILD = Path(__file__).with_name("large_crash_child.py")
ITERATIONS = int(os.environ.get("PE_LARGE_CRASH_ITERATIONS", "10"))
SEED = int(os.environ.get("PE_LARGE_CRASH_SEED", "2024"))
MiB = 1 << 20
ROLL = 1 << 20  # the children's roll size, so wholly truncated journal files can go
CHUNK_RECORD = 4 * MiB + 64  # the largest record: one chunk and its headers


class Log:
    def __init__(self, path: Path) -> None:
        self.ready: dict[int, int] = {}
        self.acked = -1
        self.begun = -1
        self.errors: list[str] = []
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            parts = line.split()
            if not parts:
                continue
            if parts[0] == "error":
                self.errors.append(line)
            elif parts[0] == "ready" and len(parts) == 3:
                self.ready[int(parts[1])] = int(parts[2])
            elif parts[0] == "ack" and len(parts) == 2:
                self.acked = max(self.acked, int(parts[1]))
            elif parts[0] == "begin" and len(parts) == 2:
                self.begun = max(self.begun, int(parts[1]))


def disk_bytes(path: Path) -> int:
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file())


def verify(store_dir: Path, first: int, acked: int) -> int:
    """Check the events since the last truncation (sequence numbers ``first``..); return the
    last one. Then truncate the stream at its tail and reclaim."""
    expected: dict[int, bytes] = {}

    def want(seq: int) -> bytes:
        if seq not in expected:
            expected[seq] = payload(seq)
        return expected[seq]

    with pe.open(store_dir, roll_bytes=ROLL) as store:
        seqs = []
        last_of_key: dict[str, int] = {}
        with store.create_reader(SCOPE, STREAM, end=store.stream_info(SCOPE, STREAM).tail) as r:
            for ev in r:
                seq = seq_of(ev.event)
                assert len(ev.event) == size_of(seq), f"event {seq}: {len(ev.event)} bytes, a partial event"
                assert ev.event == want(seq), f"event {seq} damaged"
                assert ev.routing_key == key_of(seq)
                if ev.routing_key is not None:
                    assert seq > last_of_key.get(ev.routing_key, -1), f"key order broken at {seq}"
                    last_of_key[ev.routing_key] = seq
                if is_large(seq):
                    assert store.fetch_event(ev.event_pointer).event == ev.event
                seqs.append(seq)
        sl = store.read_slice(SCOPE, STREAM)
        assert sorted(seq_of(e.event) for e in sl) == sorted(seqs)
        table = sl.to_arrow()
        assert sorted(table.column("event").to_pylist()) == sorted(want(s) for s in seqs)
        del table
        seqs.sort()
        assert seqs == list(range(first, first + len(seqs))), f"gaps or duplicates: {seqs}"
        last = seqs[-1] if seqs else first - 1
        assert last >= acked, f"acknowledged {acked} but only {last} survived"
        with store.create_writer(SCOPE, STREAM, writer_id=WRITER) as w:
            assert w.last_sequence == last
        store.truncate_stream(SCOPE, STREAM, store.stream_info(SCOPE, STREAM).tail)
        store.reclaim()
        return last


@pytest.mark.slow
def test_sigkill_while_writing_large_events(tmp_path):
    store_dir, ack_log = tmp_path / "store", tmp_path / "acks"
    rnd = random.Random(SEED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHILD.parent)] + sys.path))
    first, mid_large, events_seen = 0, 0, 0
    peak_disk = 0
    for it in range(ITERATIONS):
        proc = subprocess.Popen([sys.executable, str(CHILD), str(store_dir), str(ack_log), str(it)], env=env)
        try:
            deadline = time.monotonic() + 60
            while it not in Log(ack_log).ready:
                assert proc.poll() is None, f"child {it} exited with {proc.returncode}: {Log(ack_log).errors}"
                assert time.monotonic() < deadline, "child never got ready"
                time.sleep(0.01)
            if it % 2:  # every other run: past its first acknowledgement, whatever the disk speed
                while Log(ack_log).acked < first:
                    assert proc.poll() is None, f"child {it} exited with {proc.returncode}: {Log(ack_log).errors}"
                    assert time.monotonic() < deadline, "child never acknowledged an event"
                    time.sleep(0.005)
            time.sleep(rnd.uniform(0.05, 0.8))
            assert proc.poll() is None, f"child {it} died by itself ({proc.returncode}): {Log(ack_log).errors}"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        log = Log(ack_log)
        assert not log.errors, log.errors
        assert log.ready[it] == first, "the child resumed at the wrong sequence number"
        mid_large += log.begun > log.acked
        peak_disk = max(peak_disk, disk_bytes(store_dir))
        last = verify(store_dir, first, log.acked)
        events_seen += last + 1 - first
        first = last + 1
    log = Log(ack_log)
    assert log.acked >= ITERATIONS // 2, f"only {log.acked + 1} events acknowledged: the test exercised little"
    assert mid_large >= ITERATIONS // 4, f"only {mid_large} of {ITERATIONS} kills inside a large event"
    # the parent writes on: a large event, a small one, then checks them
    with pe.open(store_dir, roll_bytes=ROLL) as store, \
            store.create_writer(SCOPE, STREAM, writer_id=WRITER) as w:
        assert w.last_sequence == first - 1
        for seq in (first, first + 1, first + 2):
            assert w.write_event(payload(seq), routing_key=key_of(seq)) == seq
    last = verify(store_dir, first, first + 2)
    assert last == first + 2
    # crash leftovers (chunks no MERGE references) do not pile up: once everything is truncated
    # only the journal file being written remains (at most one chunk record past the roll size)
    end_disk = disk_bytes(store_dir)
    print(f"{ITERATIONS} kills, {mid_large} inside a large event; {events_seen} events verified "
          f"(acked through {log.acked}); disk peak {peak_disk // MiB} MiB, at the end {end_disk // MiB} MiB")
    journal = disk_bytes(store_dir / "journal")
    assert journal <= 2 * CHUNK_RECORD, (
        f"{journal} journal bytes left after truncating everything: "
        f"{sorted(p.name for p in (store_dir / 'journal').iterdir())}")
