"""Reader threads join, leave and are put offline at random while writers run.

Checked at the end, for every event written: it was delivered exactly once, plus once more for
each delivery that ``reader_offline(reader, None)`` revoked (the offline reader's deliveries at
or after its last checkpointed offsets, which the group must read again); per routing key, the
deliveries that stand are in write order.
"""

from __future__ import annotations

import itertools
import random
import threading
import time
from collections import defaultdict

import pytest
from rg_helpers import cfg

import pravega_embedded as pe
from pravega_embedded import errors

SEGMENTS = 6
WRITERS = 2
PER_WRITER = 6000
KEYS = 12


class ReaderThread(threading.Thread):
    sessions = itertools.count()

    def __init__(self, group, rid, log, counter):
        super().__init__(name=f"reader-{rid}", daemon=True)
        self.reader = group.create_reader(rid)
        self.rid = rid
        self.session = next(self.sessions)
        self.log, self.counter = log, counter
        self.leave = threading.Event()
        self.pause, self.paused, self.resume = threading.Event(), threading.Event(), threading.Event()
        self.completed = self.offlined = False
        self.error = None

    def run(self):
        r = self.reader
        try:
            while not self.leave.is_set():
                if self.pause.is_set():
                    self.paused.set()
                    self.resume.wait()
                    self.pause.clear()
                ev = r.read_next_event(timeout=0.02)
                if ev is None or ev.is_checkpoint:
                    continue
                if ev.is_read_completed:
                    self.completed = True
                    return
                self.log.append((next(self.counter), self.session, ev.event, ev.segment_id, ev.offset))
            r.close()
        except errors.ReaderNotInGroupError:
            self.offlined = True
        except BaseException as exc:  # noqa: BLE001
            self.error = exc


def writer(store, wid):
    with store.create_writer("iot", "s", writer_id=f"w{wid}") as w:
        for i in range(PER_WRITER):
            w.write_event(f"w{wid}:{i}".encode(), routing_key=f"w{wid}-k{i % KEYS}")
            if i % 100 == 0:
                time.sleep(0.03)  # a steady trickle, so readers join and leave mid-stream
        w.flush()


@pytest.mark.slow
@pytest.mark.parametrize("seed", [1, 2, 3])
def test_random_joins_leaves_and_offline_readers_while_writers_run(tmp_path, seed):
    rng = random.Random(seed)
    store = pe.open(tmp_path / "store")  # real fdatasync, group commit
    try:
        store.create_scope("iot")
        store.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(SEGMENTS)))
        g = store.create_reader_group("g", cfg("iot/s", automatic_checkpoint_interval=0.05,
                                               max_outstanding_checkpoints=5))
        log: list = []
        counter = itertools.count()
        windows: dict[int, dict[int, int]] = {}  # offlined reader session -> {segment: offset}
        ids = itertools.count()
        live: dict[str, ReaderThread] = {}

        def join():
            rid = f"r{next(ids) % 7}"  # ids come back after leaving: sessions must not mix
            if rid in live:
                return
            t = live[rid] = ReaderThread(g, rid, log, counter)
            t.start()

        for _ in range(3):
            join()
        writers = [threading.Thread(target=writer, args=(store, i)) for i in range(WRITERS)]
        for w in writers:
            w.start()
        actions: dict[str, int] = defaultdict(int)
        while any(w.is_alive() for w in writers):
            time.sleep(rng.uniform(0.005, 0.03))
            action = rng.choice(["join", "join", "leave", "offline", "checkpoint", "none"])
            alive = [t for t in live.values() if t.is_alive()]
            if action == "join" or not alive:
                join()
            elif action == "leave" and len(alive) > 1:
                t = rng.choice(alive)
                t.leave.set()
                t.join(120)
                assert not t.is_alive(), f"{t.rid} did not leave"  # its id is free only once it is gone
                del live[t.rid]
            elif action == "offline" and len(alive) > 1:
                t = rng.choice(alive)
                t.pause.set()
                if not t.paused.wait(60):
                    continue
                segs = g._gs.state["readers"][t.rid]["segments"]  # quiescent: exact window
                windows[t.session] = {int(k.rsplit("/", 1)[1]): off for k, off in segs.items()}
                g.reader_offline(t.rid)
                t.resume.set()
                t.join(120)
                assert not t.is_alive(), f"{t.rid} did not stop after it was put offline"
                assert t.offlined, "a reader put offline raises ReaderNotInGroupError"
                del live[t.rid]
            elif action == "checkpoint":
                try:
                    g.initiate_checkpoint(f"cp-{next(ids)}")
                except errors.MaxCheckpointsExceededError:
                    pass
            actions[action] += 1
        for w in writers:
            w.join()
        store.seal_stream("iot", "s")
        if sum(t.is_alive() for t in live.values()) < 2:
            join()
        for t in list(live.values()):
            t.join(60)
            assert not t.is_alive(), f"{t.rid} did not complete"
            assert t.error is None, t.error
            assert t.completed
        assert g.unread_bytes() == 0
        assert actions["offline"] + actions["leave"] > 0
    finally:
        store.close()

    # ---------------------------------------------------------------- verification
    by_event = defaultdict(list)
    for idx, session, ev, sid, off in log:
        by_event[ev].append((idx, session, sid, off))
    written = {f"w{w}:{i}".encode() for w in range(WRITERS) for i in range(PER_WRITER)}
    assert set(by_event) == written, "every event delivered, nothing else"

    def revoked(d):  # delivered by a session put offline, at or after its checkpointed offset
        _, session, sid, off = d
        win = windows.get(session)
        return win is not None and sid in win and off >= win[sid]

    standing = {}
    redelivered = 0
    for ev, ds in by_event.items():
        ds.sort()
        # exactly the revoked deliveries are repeated: each is followed by another delivery,
        # and the last delivery of every event stands
        assert [revoked(d) for d in ds] == [True] * (len(ds) - 1) + [False], (ev, ds, windows)
        redelivered += len(ds) - 1
        standing[ev] = ds[-1][0]
    # per routing key, the standing deliveries are in write order
    for w in range(WRITERS):
        for k in range(KEYS):
            idxs = [standing[f"w{w}:{i}".encode()] for i in range(k, PER_WRITER, KEYS)]
            assert idxs == sorted(idxs), f"key w{w}-k{k} out of order"
    print(f"seed {seed}: actions {dict(actions)}, {len(log)} deliveries, {redelivered} re-deliveries")
