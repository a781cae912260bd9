"""Exactly-once copying with transactions, through crashes.

Stream A holds 10,000 events (50 routing keys, per-key sequence numbers; A is scaled in the
middle of the writing, so resume cuts span two epochs, and then sealed). The copier
(txn_copier_child.py; its docstring explains the approach: each batch of 500 is one
transaction whose last event is a marker holding A's StreamCut after the batch) runs in a child
process that is SIGKILLed three times mid-run (after a random number of its commits, at a
random moment) and restarted until it finishes. Checked after every kill: B (markers aside)
holds exactly the events of A up to the newest marker's cut, in per-key order, no duplicates,
the markers numbered 1..k once each. At the end: B's events == A's events as sets and counts,
per-key order kept, and the last marker's cut is A's end.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

from txn_copier_child import BATCH, MARK, SCOPE, A, B
from txn_helpers import assert_exactly_once, assert_key_order, payload

import pravega_embedded as pe

CHILD = Path(__file__).with_name("txn_copier_child.py")
EVENTS, KEYS = 10_000, 50
KILLS = 3
DELAY = 0.03
SEED = int(os.environ.get("PE_TXN_COPIER_SEED", "99"))


def log_lines(path: Path) -> list[list[str]]:
    return [line.split() for line in path.read_text().splitlines() if line] if path.exists() else []


def committed_in_run(path: Path, run_start: int) -> int:
    return sum(1 for parts in log_lines(path)[run_start:] if parts[0] == "committed")


def fill_a(store_dir: Path) -> None:
    with pe.open(store_dir) as store:
        store.create_scope(SCOPE)
        store.create_stream(SCOPE, A, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        store.create_stream(SCOPE, B, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        with store.create_writer(SCOPE, A, writer_id="source") as w:
            for i in range(EVENTS):
                if i == EVENTS // 2:
                    w.flush()
                    cur = store.stream_info(SCOPE, A).current_segments
                    s = cur[0]
                    mid = (s.key_low + s.key_high) / 2
                    store.scale_stream(SCOPE, A, seal=[s.segment_id], new_ranges=[(s.key_low, mid), (mid, s.key_high)])
                k = f"key-{i % KEYS}"
                w.write_event(payload("in", k, i // KEYS, 64), routing_key=k)
        store.seal_stream(SCOPE, A)


def check_b(store_dir: Path, *, final: bool) -> int:
    """Check B against A; return the number of committed batches."""
    with pe.open(store_dir) as store:
        out, markers = [], []
        tail = store.stream_info(SCOPE, B).tail
        with store.create_reader(SCOPE, B, end=tail) as r:
            for ev in r:
                (markers if ev.routing_key == MARK else out).append(ev)
        batches = [int(ev.event.split(b" ")[0]) for ev in markers]
        assert sorted(batches) == list(range(1, len(batches) + 1)), f"markers: {sorted(batches)}"
        assert_exactly_once(out)
        assert_key_order(out)  # per key: 0, 1, 2, ... in B's read order
        if markers:
            last = max(markers, key=lambda ev: int(ev.event.split(b" ")[0]))
            cut = pe.StreamCut.from_text(last.event.decode().split(" ", 1)[1])
            expected = [ev.event for ev in store.read_slice(SCOPE, A, end=cut)]
        else:
            expected = []
        assert Counter(ev.event for ev in out) == Counter(expected), (
            f"B holds {len(out)} events, A up to the last marker {len(expected)}")
        assert len(out) == BATCH * len(markers)
        if final:
            a_events = [ev.event for ev in store.read_slice(SCOPE, A)]
            assert len(a_events) == EVENTS
            assert Counter(ev.event for ev in out) == Counter(a_events)
            assert {ev.event for ev in out} == set(a_events)
            assert list(store.read_slice(SCOPE, A, start=cut)) == [], "the last marker is not A's end"
            with store.create_reader(SCOPE, A, start=cut) as r:
                assert r.read_next_event(0.1) is None
        return len(markers)


def test_copier_exactly_once_through_three_kills(tmp_path):
    store_dir, log = tmp_path / "store", tmp_path / "copier.log"
    fill_a(store_dir)
    rnd = random.Random(SEED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHILD.parent)] + sys.path))
    runs = 0
    done = False
    progress = []
    killed_at = []  # the last log line of each killed run
    while not done:
        assert runs <= KILLS + 3, "the copier never finished"
        run_start = len(log_lines(log))
        proc = subprocess.Popen([sys.executable, str(CHILD), str(store_dir), str(log), str(DELAY)], env=env)
        runs += 1
        try:
            if runs <= KILLS:
                target = rnd.randint(2, 4)
                deadline = time.monotonic() + 60
                while committed_in_run(log, run_start) < target:
                    assert proc.poll() is None, f"copier exited ({proc.returncode}): {log.read_text()[-500:]}"
                    assert time.monotonic() < deadline, "the copier made no progress"
                    time.sleep(0.002)
                time.sleep(rnd.uniform(0, 2.5 * DELAY))
                assert proc.poll() is None, "the copier ended before the kill"
                proc.send_signal(signal.SIGKILL)
                proc.wait()
                killed_at.append(" ".join(log_lines(log)[-1]))
            else:
                assert proc.wait(120) == 0, log.read_text()[-500:]
                done = True
        finally:
            if proc.poll() is None:
                proc.send_signal(signal.SIGKILL)
                proc.wait()
        errors = [parts for parts in log_lines(log) if parts[0] == "error"]
        assert not errors, errors
        progress.append(check_b(store_dir, final=done))
    lines = log_lines(log)
    starts = [int(parts[1]) for parts in lines if parts[0] == "start"]
    assert len(starts) == KILLS + 1, starts
    assert starts[0] == 0 and starts[1:] == progress[:-1], (starts, progress)  # resumed at the last marker
    assert progress[-1] == EVENTS // BATCH
    assert lines[-1] == ["done", str(EVENTS // BATCH)]
    print(f"runs {runs}, resumed at batches {starts}, committed after each run {progress}, "
          f"killed after {killed_at}")
