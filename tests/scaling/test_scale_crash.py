"""Crash test: SIGKILL a process that writes and scales, then recover and verify.

The child (scale_crash_child.py, durability "fsync") writes with two writer threads and scales
the stream in a loop (splits and merges, alternating). The parent kills it with SIGKILL at
seeded random moments, reopens the store and checks after every kill:

- the stream is in one consistent epoch: the current segments' key ranges partition [0, 1)
  exactly, every segment not current is sealed and its successors cover its key range, the
  graph's predecessor and successor links agree, the history's epochs count 0, 1, 2, ...
  (each a partition of [0, 1), the last one the current segments), and no acknowledged scale
  is lost (the epoch is at least the last ``scaled`` one logged, at most the last ``scaling``);
- every acknowledged event is present exactly once, undamaged, and each writer's events are a
  gap-free prefix of its sequence numbers (a write is atomic even when it raced a scale);
- per-key order holds when read with a reader (and a slice reads the same events);
- a re-created writer resumes at the last durable sequence; the next child run keeps writing
  and scaling from the recovered state, and so does the parent at the end.
"""

from __future__ import annotations

import itertools
import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from scale_crash_child import SCOPE, STREAM, key_of, payload

import pravega_embedded as pe

CHILD = Path(__file__).with_name("scale_crash_child.py")
ITERATIONS = int(os.environ.get("PE_SCALE_CRASH_ITERATIONS", "12"))
SEED = int(os.environ.get("PE_SCALE_CRASH_SEED", "4321"))


class Log:
    """What the children acknowledged: per writer the highest durable sequence, the last
    scale that returned, the last scale begun."""

    def __init__(self, path: Path) -> None:
        self.acked: dict[str, int] = {}
        self.scaled = 0
        self.scaling = 0
        self.ready: set[int] = set()
        self.errors: list[str] = []
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            parts = line.split()
            if len(parts) != 2:
                if parts and parts[0] == "error":
                    self.errors.append(line)
                continue
            what, n = parts[0], parts[1]
            if what == "error":
                self.errors.append(line)
            elif what == "ready":
                self.ready.add(int(n))
            elif what == "scaled":
                self.scaled = max(self.scaled, int(n))
            elif what == "scaling":
                self.scaling = max(self.scaling, int(n))
            else:
                self.acked[what] = max(self.acked.get(what, -1), int(n))


def assert_partition(ranges, what: str) -> None:
    ranges = sorted(ranges)
    assert ranges and ranges[0][0] == 0.0 and ranges[-1][1] == 1.0, f"{what}: {ranges}"
    for (_, h), (lo, _) in itertools.pairwise(ranges):
        assert h == lo, f"{what}: gap or overlap at {h} / {lo} in {ranges}"


def check_topology(info: pe.StreamInfo, log: Log) -> None:
    by_id = {s.segment_id: s for s in info.segments}
    cur = info.current_segments
    assert_partition([(s.key_low, s.key_high) for s in cur], "current segments")
    assert not info.sealed
    for s in cur:
        assert not s.sealed, f"current segment {s.segment_id:#x} is sealed"
    for s in info.segments:
        for p in s.predecessors:
            assert p in by_id and s.segment_id in by_id[p].successors, "pred/succ links disagree"
        for t in s.successors:
            assert t in by_id and s.segment_id in by_id[t].predecessors, "succ/pred links disagree"
        if s in cur:
            continue
        # scaled away (the stream itself is never sealed here): sealed, successors cover it
        assert s.sealed and s.successors, f"segment {s.segment_id:#x} neither current nor scaled away"
        succ = sorted((by_id[t] for t in s.successors), key=lambda x: x.key_low)
        assert succ[0].key_low <= s.key_low and s.key_high <= succ[-1].key_high
        assert all(a.key_high == b.key_low for a, b in itertools.pairwise(succ)), "successors leave a gap"
        assert len({t.segment_id >> 32 for t in succ}) == 1, "successors of one scale are one epoch"
    hist = info.history
    assert [e.epoch for e in hist] == list(range(len(hist)))
    assert [e.time_ns for e in hist] == sorted(e.time_ns for e in hist)
    for e in hist:
        assert_partition([(r.key_low, r.key_high) for r in e.segments], f"epoch {e.epoch}")
    assert [r.segment_id for r in hist[-1].segments] == [s.segment_id for s in cur]
    assert info.epoch == hist[-1].epoch
    assert len(cur) >= info.config.scaling.min_segments, "the policy and the segments disagree"
    assert log.scaled <= info.epoch <= log.scaling, (
        f"recovered epoch {info.epoch}; acknowledged scales reached {log.scaled}, begun {log.scaling}")


def verify(store_dir: Path, log: Log) -> dict[str, int]:
    """Open the store after a kill and check everything; return each writer's last seq."""
    with pe.open(store_dir) as store:
        info = store.stream_info(SCOPE, STREAM)
        check_topology(info, log)
        by_id = {s.segment_id: s for s in info.segments}
        seqs: dict[str, list[int]] = {}
        last_of_key: dict[str, int] = {}
        read = []
        with store.create_reader(SCOPE, STREAM, end=info.tail) as r:
            for ev in r:
                wid, seq_s, key, _ = ev.event.split(b":", 3)
                wid_s, seq, key_s = wid.decode(), int(seq_s), key.decode()
                assert ev.event == payload(wid_s, seq, key_s), "damaged or partial event"
                assert key_s == ev.routing_key and key_s.startswith(f"{wid_s}-"), "a key of another writer"
                seg = by_id[ev.segment_id]
                assert seg.key_low <= _point(key_s) < seg.key_high, "event in a segment not owning its key"
                assert seq > last_of_key.get(key_s, -1), f"per-key order broken for {key_s}"
                last_of_key[key_s] = seq
                seqs.setdefault(wid_s, []).append(seq)
                read.append(ev.event)
        assert Counter(e.event for e in store.read_slice(SCOPE, STREAM)) == Counter(read)
        last = {}
        for wid, s in seqs.items():
            s.sort()
            assert s == list(range(len(s))), f"{wid}: duplicates or a gap"
            last[wid] = s[-1]
        for wid, a in log.acked.items():
            assert last.get(wid, -1) >= a, f"{wid}: acknowledged {a} but only {last.get(wid, -1)} survived"
        for wid in ("w0", "w1"):
            with store.create_writer(SCOPE, STREAM, writer_id=wid) as w:
                assert w.last_sequence == last.get(wid, -1)
        return last


def _point(key: str) -> float:
    from pravega_embedded.routing import key_point
    return key_point(key)


def test_sigkill_while_writing_and_scaling(tmp_path):
    store_dir, ack_log = tmp_path / "store", tmp_path / "acks"
    rnd = random.Random(SEED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHILD.parent)] + sys.path))
    mid_scale = 0
    for it in range(ITERATIONS):
        scaled_before = Log(ack_log).scaled
        proc = subprocess.Popen([sys.executable, str(CHILD), str(store_dir), str(ack_log), str(it)], env=env)
        try:
            deadline = time.monotonic() + 60
            while it not in Log(ack_log).ready:
                assert proc.poll() is None, f"child {it} exited with {proc.returncode}: {Log(ack_log).errors}"
                assert time.monotonic() < deadline, "child never got ready"
                time.sleep(0.01)
            # every run scales at least once, however slow the machine (checked after the loop)
            deadline = time.monotonic() + 60
            while Log(ack_log).scaled <= scaled_before:
                assert proc.poll() is None, f"child {it} exited with {proc.returncode}: {Log(ack_log).errors}"
                assert time.monotonic() < deadline, f"child {it} acknowledged no scale in 60 s"
                time.sleep(0.01)
            time.sleep(rnd.uniform(0.05, 0.6))  # a random moment to kill at
            assert proc.poll() is None, f"child {it} died by itself ({proc.returncode}): {Log(ack_log).errors}"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        log = Log(ack_log)
        assert not log.errors, log.errors
        mid_scale += log.scaling > log.scaled
        verify(store_dir, log)
    log = Log(ack_log)
    assert sum(log.acked.values()) > 0, "nothing was acknowledged: the test exercised nothing"
    assert log.scaled >= ITERATIONS, f"only {log.scaled} scales in {ITERATIONS} runs"
    print(f"{ITERATIONS} kills, {mid_scale} during a scale; {log.scaled} scales, acked {log.acked}")
    # after the last kill, this process writes and scales on
    with pe.open(store_dir) as store:
        store.update_stream(SCOPE, STREAM, pe.StreamConfiguration(
            scaling=pe.ScalingPolicy.by_event_rate(1e12, min_segments=1)))
        info = store.stream_info(SCOPE, STREAM)
        cur = info.current_segments
        a = cur[0]
        store.scale_stream(SCOPE, STREAM, seal=[a.segment_id],
                           new_ranges=[(a.key_low, (a.key_low + a.key_high) / 2), ((a.key_low + a.key_high) / 2, a.key_high)])
        for wid in ("w0", "w1"):
            with store.create_writer(SCOPE, STREAM, writer_id=wid) as w:
                seq = w.last_sequence + 1
                for s in range(seq, seq + 200):
                    w.write_event(payload(wid, s, key_of(wid, s)), routing_key=key_of(wid, s))
                log.acked[wid] = w.flush()
        cur = store.stream_info(SCOPE, STREAM).current_segments
        store.scale_stream(SCOPE, STREAM, seal=[cur[0].segment_id, cur[1].segment_id],
                           new_ranges=[(cur[0].key_low, cur[1].key_high)])
        log.scaled = log.scaling = store.stream_info(SCOPE, STREAM).epoch
    last = verify(store_dir, log)
    assert last == log.acked
