"""Per-key order and exactly-once delivery across many scalings, end to end.

Two writer threads write ``key:seq`` events over 200 routing keys (each key written by one
writer, its seq counting 0, 1, 2, ...) while the main thread scales the stream in different
shapes and readers read concurrently: a reader group of 3 reader threads, or standalone
readers. Each delivery is recorded under one global lock, so for every key the recorded seqs
must be exactly 0, 1, 2, ... (every acknowledged event once, in write order). A key is read by
one reader at a time (a reader hands a segment on only inside its own read call), so the global
delivery order of one key's events is the order the group delivered them in.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter, defaultdict

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

SCOPE, STREAM = "sc", "x"
KEYS = [f"key{i:03d}" for i in range(200)]
DEADLINE = 60.0  # a safety net for hung threads, never reached when things work


def parse(ev: bytes) -> tuple[str, int]:
    k, n = ev.decode().split(":")
    return k, int(n)


class Writers:
    """``n`` writer threads; writer i owns the keys KEYS[i::n]. ``rate`` (events/s over all
    writers) paces them; None writes as fast as the threads get the GIL. After ``stop()``
    every written event is acknowledged (close flushes)."""

    def __init__(self, store, n: int = 2, rate: float | None = None, seed: int = 7) -> None:
        self.store = store
        self.rate = rate
        self.stop_ev = threading.Event()
        self.lock = threading.Lock()
        self.written: Counter[str] = Counter()  # key -> events written (next seq)
        self.acked: Counter[str] = Counter()  # key -> events acknowledged by flush()
        self.total = 0
        self.errors: list[BaseException] = []
        self.threads = [
            threading.Thread(target=self._run, args=(f"w{i}", KEYS[i::n], seed + i, n), daemon=True)
            for i in range(n)
        ]

    def set_rate(self, rate: float | None) -> None:
        self.rate = rate

    def start(self) -> Writers:
        for t in self.threads:
            t.start()
        return self

    def _run(self, wid: str, keys: list[str], seed: int, n: int) -> None:
        rnd = random.Random(seed)
        seqs = dict.fromkeys(keys, 0)
        try:
            with self.store.create_writer(SCOPE, STREAM, writer_id=wid) as w:
                while not self.stop_ev.is_set():
                    t0 = time.monotonic()
                    batch = rnd.choice([1, 5, 20, 50])
                    mine = []
                    for _ in range(batch):
                        k = rnd.choice(keys)
                        w.write_event(f"{k}:{seqs[k]}".encode(), routing_key=k)
                        mine.append(k)
                        seqs[k] += 1
                    with self.lock:
                        self.written.update(mine)
                    w.flush()
                    with self.lock:
                        self.acked.update(mine)
                        self.total += batch
                    if self.rate:
                        pause = batch * n / self.rate - (time.monotonic() - t0)
                        if pause > 0:
                            self.stop_ev.wait(pause)
                    else:
                        time.sleep(0.0005)  # let readers and the scaler in (pacing only)
        except BaseException as exc:  # noqa: BLE001 - reported by stop()
            self.errors.append(exc)

    def wait_for(self, more: int, timeout: float = 20.0) -> None:
        """Wait until ``more`` events more have been acknowledged."""
        goal = self.total + more
        deadline = time.monotonic() + timeout
        while self.total < goal:
            assert not self.errors, self.errors
            assert time.monotonic() < deadline, "writers made no progress"
            time.sleep(0.002)

    def stop(self) -> None:
        self.stop_ev.set()
        for t in self.threads:
            t.join(DEADLINE)
            assert not t.is_alive(), "writer thread hung"
        assert not self.errors, self.errors
        assert self.written == self.acked


class Delivery:
    """The global delivery record: (key, seq) in delivery order, and per reader its events and
    checkpoint markers in its own order."""

    def __init__(self) -> None:
        self.lock = threading.Lock()
        self.order: list[tuple[str, int]] = []
        self.per_reader: dict[str, list] = defaultdict(list)
        self.errors: list[BaseException] = []
        self.completed: list[str] = []

    def event(self, rid: str, ev) -> None:
        item = parse(ev.event)
        with self.lock:
            self.order.append(item)
            self.per_reader[rid].append(item)

    def check(self, acked: Counter) -> None:
        assert not self.errors, self.errors
        got: dict[str, list[int]] = defaultdict(list)
        for k, n in self.order:
            got[k].append(n)
        dupes = {k: [n for n, c in Counter(v).items() if c > 1] for k, v in got.items()}
        dupes = {k: v for k, v in dupes.items() if v}
        assert not dupes, f"events delivered twice: {dict(list(dupes.items())[:5])}"
        missing = {k: c - len(got.get(k, [])) for k, c in acked.items() if len(got.get(k, [])) != c}
        assert not missing, f"acknowledged events not delivered (key: count): {dict(list(missing.items())[:5])}"
        assert set(got) <= set(acked), "delivered events nobody wrote"
        for k, seqs in got.items():
            assert seqs == list(range(acked[k])), (
                f"per-key order broken for {k}: {next((a, b) for a, b in zip(seqs, range(len(seqs))) if a != b)}")


def group_reader_thread(group, rid: str, delivery: Delivery, started: threading.Barrier,
                        timeout: float = DEADLINE) -> threading.Thread:
    def run() -> None:
        deadline = time.monotonic() + timeout
        try:
            with group.create_reader(rid) as r:
                started.wait(10)
                while time.monotonic() < deadline:
                    ev = r.read_next_event(timeout=0.2)
                    if ev is None:
                        continue
                    if ev.is_read_completed:
                        with delivery.lock:
                            delivery.completed.append(rid)
                        return
                    if ev.is_checkpoint:
                        with delivery.lock:
                            delivery.per_reader[rid].append(("cp", ev.checkpoint_name))
                        continue
                    delivery.event(rid, ev)
                raise AssertionError(f"reader {rid} never completed")
        except BaseException as exc:  # noqa: BLE001 - checked by the test
            delivery.errors.append(exc)

    t = threading.Thread(target=run, name=f"reader-{rid}", daemon=True)
    t.start()
    return t


def standalone_reader_thread(store, delivery: Delivery, rid: str, start=None) -> threading.Thread:
    def run() -> None:
        try:
            with store.create_reader(SCOPE, STREAM, start=start) as r:
                for ev in r:  # ends once the sealed stream is read completely
                    delivery.event(rid, ev)
            with delivery.lock:
                delivery.completed.append(rid)
        except BaseException as exc:  # noqa: BLE001
            delivery.errors.append(exc)

    t = threading.Thread(target=run, name=f"reader-{rid}", daemon=True)
    t.start()
    return t


# --------------------------------------------------------------------------- the scaling plan
def _cur(store) -> list[tuple[int, float, float]]:
    return [(s.segment_id, s.key_low, s.key_high) for s in store.stream_info(SCOPE, STREAM).current_segments]


def _split(seg, k):
    _, lo, hi = seg
    w = (hi - lo) / k
    bounds = [lo + i * w for i in range(k)] + [hi]
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


def _widest(cur, skip=()):
    return max((s for s in cur if s[0] not in skip), key=lambda s: s[2] - s[1])


def step_split_2(store, cur):
    s = _widest(cur)
    store.scale_stream(SCOPE, STREAM, seal=[s[0]], new_ranges=_split(s, 2))


def step_split_3(store, cur):
    s = _widest(cur)
    store.scale_stream(SCOPE, STREAM, seal=[s[0]], new_ranges=_split(s, 3))


def step_merge_2(store, cur):
    i = len(cur) // 2 - 1
    a, b = cur[i], cur[i + 1]
    store.scale_stream(SCOPE, STREAM, seal=[a[0], b[0]], new_ranges=[(a[1], b[2])])


def step_split_two_apart(store, cur):
    a, b = cur[0], cur[2]  # not adjacent
    store.scale_stream(SCOPE, STREAM, seal=[b[0], a[0]], new_ranges=_split(a, 2) + _split(b, 2))


def step_merge_3_and_split(store, cur):
    m = cur[:3]
    last = cur[-1]
    store.scale_stream(SCOPE, STREAM, seal=[x[0] for x in m] + [last[0]],
                       new_ranges=[(m[0][1], m[2][2])] + _split(last, 2))


def step_merge_all(store, cur):
    store.scale_stream(SCOPE, STREAM, seal=[x[0] for x in cur], new_ranges=[(0.0, 1.0)])


def step_rescale_4(store, cur):
    store.update_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))


PLAN = [step_split_2, step_split_3, step_merge_2, step_split_two_apart, step_merge_3_and_split,
        step_merge_all, step_rescale_4]


def run_plan(store, writers: Writers, between=None) -> None:
    for i, step in enumerate(PLAN):
        writers.wait_for(1000)
        epoch = store.stream_info(SCOPE, STREAM).epoch
        step(store, _cur(store))
        assert store.stream_info(SCOPE, STREAM).epoch == epoch + 1
        if between is not None:
            between(i)
    writers.wait_for(400)


def make_store_and_stream(**opts):
    store = pe.open_temporary(**opts)
    store.create_scope(SCOPE)
    return store


def assert_history_shape(store) -> None:
    i = store.stream_info(SCOPE, STREAM)
    assert i.epoch == len(PLAN)
    assert [e.segment_count for e in i.history] == [1, 2, 4, 3, 5, 4, 1, 4]


# --------------------------------------------------------------------------- the tests
@pytest.mark.parametrize("durability", ["none", "fsync"])
@pytest.mark.parametrize("readers_join", ["at-start", "after-3-scalings"])
def test_reader_group_of_three_keeps_per_key_order_across_seven_scalings(readers_join, durability):
    """Readers at the tail the whole time, or joining late and catching up through a backlog
    of four epochs while the scalings go on; with "fsync" readers see only synced data."""
    store = make_store_and_stream(durability=durability)
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        group = store.create_reader_group(
            "g", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)], automatic_checkpoint_interval=None))
        delivery = Delivery()
        started = threading.Barrier(4)
        readers = []

        def start_readers() -> None:
            readers.extend(group_reader_thread(group, f"r{i}", delivery, started) for i in range(3))
            started.wait(10)

        if readers_join == "at-start":
            start_readers()
        writers = Writers(store).start()
        checkpoints = {}

        def between(i: int) -> None:
            if i == 2 and not readers:
                start_readers()
            if i in (3, 5):  # checkpoints in the middle of it all, in different epochs
                cp = group.initiate_checkpoint(f"cp-{i}").result(timeout=30)
                checkpoints[cp.name] = cp.stream_cut(SCOPE, STREAM)

        run_plan(store, writers, between)
        writers.stop()
        store.seal_stream(SCOPE, STREAM)
        for t in readers:
            t.join(DEADLINE)
            assert not t.is_alive(), "reader thread hung"
        delivery.check(writers.acked)
        assert sorted(delivery.completed) == ["r0", "r1", "r2"]
        assert_history_shape(store)
        # every reader took part
        assert all(any(isinstance(x[1], int) for x in delivery.per_reader[f"r{i}"]) for i in range(3))
        # each checkpoint's cut splits the events exactly as the markers did: what the readers
        # delivered before their marker is the slice head -> cut, the rest is cut -> tail
        tail = store.stream_info(SCOPE, STREAM).tail
        for name, cut in checkpoints.items():
            before, after = Counter(), Counter()
            for items in delivery.per_reader.values():
                seen = False
                for x in items:
                    if x == ("cp", name):
                        seen = True
                    elif isinstance(x[1], int):
                        (after if seen else before)[x] += 1
            assert sum(before.values()) and sum(after.values())
            assert Counter(parse(e.event) for e in store.read_slice(SCOPE, STREAM, end=cut)) == before, name
            assert Counter(parse(e.event) for e in store.read_slice(SCOPE, STREAM, start=cut, end=tail)) == after, name
    finally:
        store.close()


@pytest.mark.parametrize("durability", ["none", "fsync"])
def test_standalone_readers_keep_per_key_order_across_seven_scalings(durability):
    store = make_store_and_stream(durability=durability)
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        delivery = Delivery()
        late = Delivery()
        first = standalone_reader_thread(store, delivery, "from-head")
        writers = Writers(store).start()
        started = []

        def between(i: int) -> None:
            if i == 0:  # a cut of epoch 1, used as the start of a reader created two epochs later
                started.append(store.stream_info(SCOPE, STREAM).tail)
            if i == 2:
                started.append(standalone_reader_thread(store, late, "late", start=started[0]))

        run_plan(store, writers, between)
        writers.stop()
        store.seal_stream(SCOPE, STREAM)
        for t in (first, started[1]):
            t.join(DEADLINE)
            assert not t.is_alive(), "reader thread hung"
        delivery.check(writers.acked)
        assert_history_shape(store)
        # the late reader read exactly the events after its start cut, each key in order
        assert not late.errors, late.errors
        before = Counter(parse(e.event) for e in store.read_slice(SCOPE, STREAM, end=started[0]))
        assert Counter(late.order) == Counter(delivery.order) - before
        late_per_key = defaultdict(list)
        for k, n in late.order:
            late_per_key[k].append(n)
        for k, c in writers.acked.items():
            assert late_per_key.get(k, []) == [n for n in range(c) if (k, n) not in before], k
    finally:
        store.close()


def test_a_reader_blocked_at_the_tail_follows_a_split_and_a_merge():
    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        got: list = []
        with store.create_reader(SCOPE, STREAM) as r:
            assert r.read_next_event(timeout=0) is None
            a, b = store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
            with store.create_writer(SCOPE, STREAM, writer_id="w") as w:
                for n in range(50):
                    w.write_event(f"k{n % 5}:{n}".encode(), routing_key=f"k{n % 5}")
                w.flush()
                t = threading.Thread(target=lambda: got.extend(
                    r.read_next_event(timeout=10) for _ in range(60)))
                t.start()
                store.scale_stream(SCOPE, STREAM, seal=[a, b], new_ranges=[(0.0, 1.0)])
                for n in range(50, 60):
                    w.write_event(f"k{n % 5}:{n}".encode(), routing_key=f"k{n % 5}")
                w.flush()
                t.join(DEADLINE)
                assert not t.is_alive()
        evs = [e.event.decode() for e in got if e is not None]
        assert len(evs) == 60
        per_key = defaultdict(list)
        for e in evs:
            k, n = e.split(":")
            per_key[k].append(int(n))
        assert all(v == sorted(v) and len(v) == 12 for v in per_key.values())
    finally:
        store.close()


def test_auto_scaler_drives_five_scalings_while_a_group_reads():
    # fast time constants: target 100 events/s per segment, 1000 events/s offered
    store = make_store_and_stream(scale_windows=(0.2, 0.4, 0.8, 1.6), scale_cooldown=0.3,
                                  maintenance_interval=0.05)
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(
            scaling=pe.ScalingPolicy.by_event_rate(target_rate=100, scale_factor=2, min_segments=1)))
        group = store.create_reader_group(
            "g", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)], automatic_checkpoint_interval=None))
        delivery = Delivery()
        started = threading.Barrier(4)
        # the readers outlive both phases' caps (2 x 120 s) plus the drain
        readers = [group_reader_thread(group, f"r{i}", delivery, started, timeout=300) for i in range(3)]
        started.wait(10)
        writers = Writers(store, rate=1000.0).start()
        watcher = store.watch_segments(SCOPE, STREAM, initial=False)
        changes = []
        deadline = time.monotonic() + 120  # each phase's cap only bounds a hang on a loaded machine
        # the load: splits until at least 3 scalings happened
        while len(changes) < 3:
            assert time.monotonic() < deadline, f"the auto-scaler scaled {len(changes)} times in 120 s"
            c = watcher.get(timeout=0.5)
            if c is not None:
                changes.append(c)
        # a lull: cold segments merge; wait for at least 2 merges (5 scalings in all)
        writers.set_rate(20.0)
        lull_deadline = time.monotonic() + 120
        while sum(1 for c in changes if c.delta < 0) < 2 or len(changes) < 5:
            assert time.monotonic() < lull_deadline, (
                f"no merges after the lull: {[c.delta for c in changes]}")
            c = watcher.get(timeout=0.5)
            if c is not None:
                changes.append(c)
        watcher.close()
        writers.stop()
        store.seal_stream(SCOPE, STREAM)
        for t in readers:
            t.join(DEADLINE)
            assert not t.is_alive(), "reader thread hung"
        delivery.check(writers.acked)
        info = store.stream_info(SCOPE, STREAM)
        assert info.epoch >= 5
        assert any(c.delta > 0 for c in changes) and any(c.delta < 0 for c in changes)
        assert all(e.segment_count >= 1 for e in info.history)
    finally:
        store.close()


def test_writes_racing_scalings_are_never_lost_or_reordered_within_a_batch():
    """write_events (one atomic batch per key) racing many scalings: each batch stays
    contiguous and in order in the successor owning its key."""
    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        stop = threading.Event()
        errs: list[BaseException] = []
        sent: list[list[bytes]] = []

        def write() -> None:
            try:
                with store.create_writer(SCOPE, STREAM, writer_id="b", linger=0.01) as w:
                    n = 0
                    while not stop.is_set():
                        k = KEYS[n % 50]
                        batch = [f"{k}:{n}:{i}".encode() for i in range(10)]
                        w.write_events(batch, routing_key=k)
                        sent.append(batch)
                        n += 1
                        if n % 20 == 0:
                            w.flush()
            except BaseException as exc:  # noqa: BLE001
                errs.append(exc)

        t = threading.Thread(target=write, daemon=True)
        t.start()
        rnd = random.Random(3)
        for _ in range(30):
            cur = _cur(store)
            if len(cur) < 6 and (len(cur) == 1 or rnd.random() < 0.6):
                s = rnd.choice(cur)
                store.scale_stream(SCOPE, STREAM, seal=[s[0]], new_ranges=_split(s, rnd.choice([2, 3])))
            else:
                i = rnd.randrange(len(cur) - 1)
                a, b = cur[i], cur[i + 1]
                store.scale_stream(SCOPE, STREAM, seal=[a[0], b[0]], new_ranges=[(a[1], b[2])])
            n0 = len(sent)
            while len(sent) < n0 + 5 and not errs:
                time.sleep(0.001)
        stop.set()
        t.join(DEADLINE)
        assert not errs, errs
        store.seal_stream(SCOPE, STREAM)
        assert store.stream_info(SCOPE, STREAM).epoch == 30
        got = list(store.create_reader(SCOPE, STREAM))
        assert len(got) == sum(map(len, sent))
        assert len({e.event for e in got}) == len(got), "an event was read twice"
        by_seg = defaultdict(list)
        where = {}
        for e in got:
            where[e.event] = (e.segment_id, len(by_seg[e.segment_id]))
            by_seg[e.segment_id].append(e.event)
        # each batch is contiguous and in order within one segment
        for batch in sent:
            sid, i = where[batch[0]]
            assert by_seg[sid][i : i + 10] == batch
    finally:
        store.close()


def test_group_reader_with_an_end_cut_in_an_old_epoch_stops_there():
    """A group bounded by an epoch-0 end cut reads exactly up to it, even after scalings."""
    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        with store.create_writer(SCOPE, STREAM, writer_id="w") as w:
            first = []
            for n in range(300):
                k = KEYS[n % 30]
                w.write_event(f"{k}:{n}".encode(), routing_key=k)
                first.append((k, n))
            w.flush()
            end = store.stream_info(SCOPE, STREAM).tail
            store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
            for n in range(300, 600):
                k = KEYS[n % 30]
                w.write_event(f"{k}:{n}".encode(), routing_key=k)
            w.flush()
        group = store.create_reader_group(
            "g", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)], end=[end], automatic_checkpoint_interval=None))
        rs = [group.create_reader(f"r{i}") for i in range(2)]
        got = []
        done = set()
        deadline = time.monotonic() + 60  # ends when both readers complete; the cap bounds a hang
        while len(done) < 2 and time.monotonic() < deadline:
            for r in rs:
                if r.reader_id in done:
                    continue
                ev = r.read_next_event(timeout=0)
                if ev is not None and ev.is_read_completed:
                    done.add(r.reader_id)
                elif ev is not None and not ev.is_checkpoint:
                    got.append(parse(ev.event))
        assert len(done) == 2
        assert Counter(got) == Counter(first)
    finally:
        store.close()


def test_scale_errors_under_load_do_not_disturb_readers_or_writers():
    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        delivery = Delivery()
        reader = standalone_reader_thread(store, delivery, "r")
        writers = Writers(store).start()
        for _ in range(20):
            writers.wait_for(50)
            with pytest.raises(errors.InvalidConfigurationError):
                store.scale_stream(SCOPE, STREAM, seal=[0, 1], new_ranges=[(0.0, 1.0)])  # min 2
            with pytest.raises(errors.InvalidConfigurationError):
                store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.3)])
        writers.stop()
        store.seal_stream(SCOPE, STREAM)
        reader.join(DEADLINE)
        delivery.check(writers.acked)
        assert store.stream_info(SCOPE, STREAM).epoch == 0
    finally:
        store.close()


def _drain_group(group, n_readers: int, prefix: str, limit: int | None = None) -> list[tuple[str, int]]:
    """Read with ``n_readers`` readers round-robin (one thread) until read completed (or
    ``limit`` events); returns (key, seq) in delivery order."""
    rs = [group.create_reader(f"{prefix}{i}") for i in range(n_readers)]
    got: list[tuple[str, int]] = []
    done: set[str] = set()
    deadline = time.monotonic() + DEADLINE
    while len(done) < n_readers and (limit is None or len(got) < limit):
        assert time.monotonic() < deadline, "group never completed"
        for r in rs:
            if r.reader_id in done:
                continue
            ev = r.read_next_event(timeout=0)
            if ev is None or ev.is_checkpoint:
                continue
            if ev.is_read_completed:
                done.add(r.reader_id)
            else:
                got.append(parse(ev.event))
    for r in rs:
        r.close()
    return got


def _in_key_order(got: list[tuple[str, int]]) -> bool:
    last: dict[str, int] = {}
    for k, n in got:
        if n <= last.get(k, -1):
            return False
        last[k] = n
    return True


def test_groups_from_old_cuts_and_a_reset_to_an_old_checkpoint():
    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        w = store.create_writer(SCOPE, STREAM, writer_id="w")
        seqs: Counter[str] = Counter()
        batches = []

        def write(n: int) -> list[tuple[str, int]]:
            out = []
            for i in range(n):
                k = KEYS[(len(batches) * 7 + i) % 40]
                w.write_event(f"{k}:{seqs[k]}".encode(), routing_key=k)
                out.append((k, seqs[k]))
                seqs[k] += 1
            w.flush()
            batches.append(out)
            return out

        a = write(200)
        cut0 = store.stream_info(SCOPE, STREAM).tail
        write(200)
        # a group read from the head, checkpointed half way, still in epoch 0
        g = store.create_reader_group("g", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)],
                                                                automatic_checkpoint_interval=None))
        r = g.create_reader("r")
        head_part = []
        while len(head_part) < 300:
            ev = r.read_next_event(timeout=1)
            assert ev is not None
            if not ev.is_checkpoint:
                head_part.append(parse(ev.event))
        fut = g.initiate_checkpoint("half")
        ev = r.read_next_event(timeout=1)
        assert ev.is_checkpoint
        r.read_next_event(timeout=0)  # answers the checkpoint
        cp = fut.result(timeout=10)
        r.close()
        # three scalings with writes in between
        write(200)
        store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(0.0, 0.1), (0.1, 0.5)])
        write(200)
        cur = [s.segment_id for s in store.stream_info(SCOPE, STREAM).current_segments]
        store.scale_stream(SCOPE, STREAM, seal=[cur[1], cur[2]], new_ranges=[(0.1, 1.0)])
        write(200)
        cur = [s.segment_id for s in store.stream_info(SCOPE, STREAM).current_segments]
        store.update_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
        write(200)
        w.close()
        store.seal_stream(SCOPE, STREAM)
        everything = [x for b in batches for x in b]
        # a group starting at the epoch-0 cut reads exactly what came after it
        g0 = store.create_reader_group("from-cut0", pe.ReaderGroupConfig(
            streams=[(SCOPE, STREAM)], start=[cut0], automatic_checkpoint_interval=None))
        got = _drain_group(g0, 3, "a")
        assert Counter(got) == Counter(everything) - Counter(a)
        assert _in_key_order(got)
        # the old group reset to its epoch-0 checkpoint reads exactly the events after it
        g.reset(cp)
        got = _drain_group(g, 2, "b")
        assert Counter(got) == Counter(everything) - Counter(head_part)
        assert _in_key_order(got)
        # a fresh group's unread bytes are every byte of every epoch, and 0 once read
        g2 = store.create_reader_group("fresh", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)],
                                                                    automatic_checkpoint_interval=None))
        assert g2.unread_bytes() == sum(s.length for s in store.stream_info(SCOPE, STREAM).segments)
        got = _drain_group(g2, 2, "c")
        assert Counter(got) == Counter(everything) and _in_key_order(got)
        assert g2.unread_bytes() == 0
    finally:
        store.close()


def test_readers_leaving_and_joining_during_scalings_keep_exactly_once():
    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        group = store.create_reader_group(
            "g", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)], automatic_checkpoint_interval=None))
        delivery = Delivery()
        leave = {f"r{i}": threading.Event() for i in range(5)}

        def reader(rid: str) -> threading.Thread:
            def run() -> None:
                try:
                    with group.create_reader(rid) as r:
                        while not leave[rid].is_set():
                            ev = r.read_next_event(timeout=0.05)
                            if ev is None or ev.is_checkpoint:
                                continue
                            if ev.is_read_completed:
                                with delivery.lock:
                                    delivery.completed.append(rid)
                                return
                            delivery.event(rid, ev)
                except BaseException as exc:  # noqa: BLE001
                    delivery.errors.append(exc)

            t = threading.Thread(target=run, daemon=True)
            t.start()
            return t

        threads = {rid: reader(rid) for rid in ("r0", "r1", "r2")}
        writers = Writers(store).start()

        def between(i: int) -> None:
            if i == 1:  # r1 leaves (closes: its segments are released at its exact position)
                leave["r1"].set()
                threads["r1"].join(DEADLINE)
            if i == 3:
                threads["r3"] = reader("r3")
            if i == 4:
                leave["r0"].set()
                threads["r0"].join(DEADLINE)
                threads["r4"] = reader("r4")

        run_plan(store, writers, between)
        writers.stop()
        store.seal_stream(SCOPE, STREAM)
        for t in threads.values():
            t.join(DEADLINE)
            assert not t.is_alive()
        delivery.check(writers.acked)
        assert sorted(delivery.completed) == ["r2", "r3", "r4"]
    finally:
        store.close()


def test_group_state_survives_reopen_across_scalings(tmp_path):
    """A group that read part of epoch 0 and closed its reader goes on after the store is
    reopened and scaled: exactly the unread events, each key in order; its epoch-0
    checkpoint cut still bounds a slice."""
    path = tmp_path / "store"
    seqs: Counter[str] = Counter()

    def write(store, n: int, wid: str) -> list[tuple[str, int]]:
        out = []
        with store.create_writer(SCOPE, STREAM, writer_id=wid) as w:
            for i in range(n):
                k = KEYS[i % 50]
                w.write_event(f"{k}:{seqs[k]}".encode(), routing_key=k)
                out.append((k, seqs[k]))
                seqs[k] += 1
        return out

    with pe.open(path) as store:
        store.create_scope(SCOPE)
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        a = write(store, 400, "w1")
        g = store.create_reader_group("g", pe.ReaderGroupConfig(streams=[(SCOPE, STREAM)],
                                                                automatic_checkpoint_interval=None))
        r = g.create_reader("r0")
        first: list[tuple[str, int]] = []

        def read(k: int) -> None:
            while k:
                ev = r.read_next_event(timeout=1)
                assert ev is not None
                if not ev.is_checkpoint:
                    first.append(parse(ev.event))
                    k -= 1

        read(150)
        fut = g.initiate_checkpoint("c1")
        assert r.read_next_event(timeout=1).is_checkpoint
        read(50)  # answers the checkpoint on the way
        cut = fut.result(timeout=10).stream_cut(SCOPE, STREAM)
        r.close()
    with pe.open(path) as store:
        store.scale_stream(SCOPE, STREAM, seal=[1], new_ranges=[(0.5, 0.7), (0.7, 1.0)])
        b = write(store, 300, "w2")
        cur = [s.segment_id for s in store.stream_info(SCOPE, STREAM).current_segments]
        store.scale_stream(SCOPE, STREAM, seal=cur[:2], new_ranges=[(0.0, 0.7)])
        c = write(store, 300, "w3")
        store.seal_stream(SCOPE, STREAM)
    with pe.open(path) as store:
        g = store.get_reader_group("g")
        assert g.get_stream_cuts()[(SCOPE, STREAM)] == cut
        assert Counter(parse(e.event) for e in store.read_slice(SCOPE, STREAM, end=cut)) == Counter(first[:150])
        rest = _drain_group(g, 2, "r")
        assert Counter(first) + Counter(rest) == Counter(a + b + c)
        assert _in_key_order(first + rest)


# --------------------------------------------------------------------------- a scale seen half-way
class _PauseOnSuccessors:
    """Pause the scaling thread the first time segment ``sid`` is given successors, until
    ``resume`` is set: whatever readers do in that moment sees the scale as far as the store
    has published it. (Hooks the ``succs`` slot of Segment; values are stored unchanged.)"""

    def __init__(self, sid: int) -> None:
        from pravega_embedded.segment import Segment
        self.slot = Segment.__dict__["succs"]
        self.sid = sid
        self.paused = threading.Event()
        self.resume = threading.Event()
        self.seen: list[tuple[int, ...]] = []

    def __get__(self, obj, cls=None):
        return self if obj is None else self.slot.__get__(obj, cls)

    def __set__(self, obj, value) -> None:
        self.slot.__set__(obj, value)
        if value and obj.segment_id == self.sid and not self.paused.is_set():
            self.seen.append(tuple(value))
            self.paused.set()
            self.resume.wait(10)


@pytest.mark.parametrize("kind", ["group", "standalone"])
def test_a_reader_at_the_end_of_a_segment_while_it_is_split_reads_every_successor(kind, monkeypatch):
    """A reader that finishes a segment at the very moment a scale is publishing that
    segment's successors must still read every successor (here: a split into 8)."""
    from pravega_embedded.segment import Segment

    store = make_store_and_stream()
    try:
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)))
        w = store.create_writer(SCOPE, STREAM, writer_id="w")
        written = []
        for n in range(20):
            w.write_event(f"k{n}:0".encode(), routing_key=f"k{n}")
            written.append(f"k{n}:0")
        w.flush()
        if kind == "group":
            group = store.create_reader_group("g", pe.ReaderGroupConfig(
                streams=[(SCOPE, STREAM)], automatic_checkpoint_interval=None))
            r = group.create_reader("r")
        else:
            r = store.create_reader(SCOPE, STREAM)
        got = []
        while len(got) < 20:
            ev = r.read_next_event(timeout=1)
            assert ev is not None
            if not ev.is_checkpoint:
                got.append(ev.event.decode())
        hook = _PauseOnSuccessors(0)
        monkeypatch.setattr(Segment, "succs", hook)
        errs: list[BaseException] = []

        def scale() -> None:
            try:
                store.scale_stream(SCOPE, STREAM, seal=[0], new_ranges=[(i / 8, (i + 1) / 8) for i in range(8)])
            except BaseException as exc:  # noqa: BLE001
                errs.append(exc)

        scaler = threading.Thread(target=scale, daemon=True)
        scaler.start()
        try:
            assert hook.paused.wait(10), "the scale never published successors"
            # the reader looks at the stream now (in a helper thread, in case it blocks)
            looker = threading.Thread(target=lambda: [r.read_next_event(timeout=0) for _ in range(5)], daemon=True)
            looker.start()
            looker.join(5)
        finally:
            hook.resume.set()
            scaler.join(10)
        monkeypatch.undo()
        assert not errs, errs
        assert not looker.is_alive(), "the reader blocked on the scale"
        # events for every successor, then the end of the stream
        for n in range(20, 420):
            w.write_event(f"k{n % 200}:1".encode() if n < 220 else f"k{n}:0".encode(),
                          routing_key=f"k{n % 200}" if n < 220 else f"k{n}")
            written.append(f"k{n % 200}:1" if n < 220 else f"k{n}:0")
        w.close()
        store.seal_stream(SCOPE, STREAM)
        deadline = time.monotonic() + 60  # ends once everything is read; the cap bounds a hang
        while time.monotonic() < deadline:
            ev = r.read_next_event(timeout=0.05)
            if ev is None:
                if kind == "standalone" and store.stream_info(SCOPE, STREAM).sealed and len(got) >= 420:
                    break
                continue
            if ev.is_read_completed:
                break
            if not ev.is_checkpoint:
                got.append(ev.event.decode())
        held = group.segment_distribution() if kind == "group" else None
        missing = Counter(written) - Counter(got)
        assert not missing, (
            f"{sum(missing.values())} events never read; the scale published successors "
            f"{hook.seen[0]} first; group segments now {held}")
        assert Counter(got) == Counter(written)
    finally:
        store.close()
