"""Child process of the power-cut tests: run one workload on a store until killed (SIGKILL, or
LazyFS dying under it), logging every acknowledgement.

Usage: python pc_child.py STORE_DIR ACK_LOG WORKLOAD SEED

STORE_DIR is inside the LazyFS mount; ACK_LOG is on the real disk (outside the mount) and gets
one ``os.write`` on an O_APPEND descriptor per acknowledgement (the line formats are documented
in ``pc_common.AckLog``), so acknowledgements survive the cut. Uses the public API only. The
store uses durability "fsync" (the default). Workloads (pc_common.WORKLOADS):

- ``writes``: three writer threads, ``write_event``/``write_events`` with routing keys, flush;
- ``scaling``: two writer threads while a third thread splits and merges segments;
- ``txn``: transactions of TXN_EVENTS events, committed (4 in 5) or aborted;
- ``truncate``: two writer threads while a thread truncates at a reader's position (1 MiB
  journal files: truncation deletes them);
- ``large``: 9-17 MiB events (over the 8 MiB record limit) between small ones;
- ``bytes``: two byte streams, writes of 1 B to 9 MiB (over 4 MiB: staged + MERGE), flush;
- ``createdelete``: scopes and streams created, written and deleted in a loop while a writer
  writes a long-lived stream.

Writers are paced (WRITER_RATE, BYTES_RATE, LARGE_RATE: averages, bursts stay) so that the store,
which every check reads whole, grows by a bounded amount per cut. Each run logs
``ready WORKLOAD SEED`` once the store is open. If a thread fails it logs
``error ...`` and the process exits with status 3.
"""

from __future__ import annotations

import json
import os
import random
import sys
import threading
import time
import traceback
from collections.abc import Callable
from typing import Any

import pravega_embedded as pe
from pravega_embedded.errors import InvalidStreamCutError, TruncatedDataError

from pc_common import (
    ACK_TAGS,
    BYTE_STREAMS,
    GROUP,
    CD_PREFIX,
    MiB,
    SCOPE,
    STREAM,
    TXN_EVENTS,
    TXN_STREAM,
    NOT_DURABLE,
    durability,
    is_large,
    key_of,
    large_key,
    large_payload,
    payload,
    store_options,
    stream_bytes,
    txn_key,
    txn_payload,
)

WRITER_RATE = 4 * MiB  # bytes/s per event writer
BYTES_RATE = 8 * MiB  # bytes/s per byte stream
LARGE_RATE = 32 * MiB  # bytes/s of the large-event writer


class AckLog:
    """The O_APPEND log on the real disk; one os.write per line. Unless the store's durability
    is "fsync", acknowledgement lines get the NOT_DURABLE prefix (pc_common.AckLog)."""

    def __init__(self, path: str) -> None:
        self.fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self.durable = durability() == "fsync"

    def __call__(self, line: str) -> None:
        if not self.durable and line.split(" ", 1)[0] in ACK_TAGS:
            line = NOT_DURABLE + line
        os.write(self.fd, (line.replace("\n", " ") + "\n").encode())


def guarded(log: AckLog, fn: Callable[..., None], *args: Any) -> None:
    """Run ``fn``; if it raises, log ``error ...`` and end the process with status 3."""
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001
        log(f"error {threading.current_thread().name}: {type(exc).__name__}: {exc}")
        traceback.print_exc()  # to the run's stderr file, which a failing test shows
        sys.stderr.flush()
        os._exit(3)


def run_threads(log: AckLog, targets: list[tuple[Callable[..., None], tuple[Any, ...]]]) -> None:
    threads = [threading.Thread(target=guarded, args=(log, fn, *args), daemon=True, name=fn.__name__)
               for fn, args in targets]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


def event_stream(store: pe.Store, name: str, segments: int) -> None:
    store.create_stream(SCOPE, name, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)),
                        exist_ok=True)


# ------------------------------------------------------------------------ writers
def write_some(w: pe.EventStreamWriter, wid: str, seq: int, n: int, rnd: random.Random) -> tuple[int, int]:
    """Write events seq .. seq+n-1 (some as atomic batches of one key); return the next seq and
    the bytes written."""
    end, nbytes = seq + n, 0
    while seq < end:
        key = key_of(wid, seq)
        if rnd.random() < 0.3:
            run = min(GROUP - seq % GROUP, rnd.choice([2, 10, GROUP]))
            evs = [payload(wid, s) for s in range(seq, seq + run)]
            got = w.write_events(evs, routing_key=key)
            assert got == seq + run - 1, (got, seq + run - 1)
        else:
            evs = [payload(wid, seq)]
            got = w.write_event(evs[0], routing_key=key)
            assert got == seq, (got, seq)
        seq += len(evs)
        nbytes += sum(map(len, evs))
    return seq, nbytes


class Pacer:
    """Keeps a writer under ``rate`` bytes/s on average (bursts stay as they are), so that the
    store, which every check reads whole, grows by a bounded amount per cut. The environment
    variable PC_RATE_FACTOR multiplies the rate; 0 turns pacing off (the writers then keep the
    journal busy: un-fsynced data is nearly always in flight)."""

    def __init__(self, rate: float) -> None:
        self.rate = rate * float(os.environ.get("PC_RATE_FACTOR", "1"))
        self.t0, self.done = time.monotonic(), 0

    def add(self, nbytes: int) -> None:
        if self.rate <= 0:
            return
        self.done += nbytes
        ahead = self.done / self.rate - (time.monotonic() - self.t0)
        if ahead > 0:
            time.sleep(ahead)


def writer(store: pe.Store, log: AckLog, wid: str, seed: int, rate: float = WRITER_RATE) -> None:
    """Write events of writer ``wid`` to pc/s, flushing after each burst and logging
    ``A wid durable``, at most ``rate`` bytes/s on average."""
    rnd = random.Random(seed)
    w = store.create_writer(SCOPE, STREAM, writer_id=wid, linger=0.0005)
    seq = w.last_sequence + 1
    pacer = Pacer(rate)
    while True:
        seq, nbytes = write_some(w, wid, seq, rnd.choice([1, 5, 50, 400]), rnd)
        durable = w.flush()
        assert durable == seq - 1, (durable, seq - 1)
        log(f"A {wid} {durable}")
        pacer.add(nbytes)


def run_writes(store: pe.Store, log: AckLog, seed: int) -> None:
    event_stream(store, STREAM, 3)
    log(f"ready writes {seed}")
    run_threads(log, [(writer, (store, log, f"w{i}", seed * 10 + i)) for i in range(3)])


# ------------------------------------------------------------------------ scaling
def _split(lo: float, hi: float, k: int) -> list[tuple[float, float]]:
    width = (hi - lo) / k
    bounds = [lo + i * width for i in range(k)] + [hi]
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


def scaler(store: pe.Store, log: AckLog, seed: int) -> None:
    """Split and merge pc/s in a loop: ``scaling EPOCH`` before, ``scaled EPOCH`` after."""
    rnd = random.Random(seed)
    step = 0
    while True:
        info = store.stream_info(SCOPE, STREAM)
        cur = sorted(info.current_segments, key=lambda s: s.key_low)
        epoch = info.epoch + 1
        if (step % 2 == 0 and len(cur) < 6) or len(cur) == 1:
            s = rnd.choice(cur)
            seal, ranges = [s.segment_id], _split(s.key_low, s.key_high, rnd.choice([2, 3]))
        else:
            i = rnd.randrange(len(cur) - 1)
            a, b = cur[i], cur[i + 1]
            seal, ranges = [a.segment_id, b.segment_id], [(a.key_low, b.key_high)]
        log(f"scaling {epoch}")
        store.scale_stream(SCOPE, STREAM, seal=seal, new_ranges=ranges)
        log(f"scaled {epoch}")
        step += 1
        time.sleep(rnd.choice([0.0, 0.001, 0.01, 0.05]))


def run_scaling(store: pe.Store, log: AckLog, seed: int) -> None:
    event_stream(store, STREAM, 1)
    log(f"ready scaling {seed}")
    run_threads(log, [(writer, (store, log, "w0", seed * 10)), (writer, (store, log, "w1", seed * 10 + 1)),
                      (scaler, (store, log, seed * 10 + 7))])


# ------------------------------------------------------------------------ transactions
def run_txn(store: pe.Store, log: AckLog, seed: int) -> None:
    event_stream(store, TXN_STREAM, 2)
    tw = store.create_transactional_writer(SCOPE, TXN_STREAM, writer_id=f"tx-{seed}")
    rnd = random.Random(seed)
    log(f"ready txn {seed}")
    for i in range(10**9):
        tag = f"x{seed}-{i}"
        txn = tw.begin_txn(lease=3600)
        log(f"begin {tag} {txn.txn_id}")
        for j in range(TXN_EVENTS):
            txn.write_event(txn_payload(tag, j), routing_key=txn_key(j))
            if j == TXN_EVENTS // 2 and rnd.random() < 0.3:
                txn.flush()
        if rnd.random() < 0.2:
            log(f"aborting {tag}")
            txn.abort()
            log(f"aborted {tag}")
        else:
            log(f"committing {tag}")
            txn.commit()
            log(f"committed {tag}")


# ------------------------------------------------------------------------ truncation
def truncator(store: pe.Store, log: AckLog, seed: int) -> None:
    """Now and then read part of pc/s from its head and truncate at the reader's position:
    ``TB n {writer: {key: max seq read}}`` before truncate_stream, ``TA n`` after it."""
    rnd = random.Random(seed)
    for n in range(10**9):
        time.sleep(rnd.uniform(0.02, 0.2))
        info = store.stream_info(SCOPE, STREAM)
        budget = info.length * rnd.uniform(0.1, 0.9)
        seen: dict[str, dict[str, int]] = {}
        got = 0
        try:
            with store.create_reader(SCOPE, STREAM, end=info.tail) as r:
                while got < budget:
                    ev = r.read_next_event(0.5)
                    if ev is None:
                        break
                    got += len(ev.event)
                    wid, seq = ev.event.split(b":", 2)[:2]
                    keys = seen.setdefault(wid.decode(), {})
                    key = ev.routing_key
                    keys[key] = max(keys.get(key, -1), int(seq))
                cut = r.position()
        except TruncatedDataError:
            continue
        log(f"TB {n} {json.dumps(seen, separators=(',', ':'))}")
        try:
            store.truncate_stream(SCOPE, STREAM, cut)
        except InvalidStreamCutError:
            continue
        log(f"TA {n}")


def run_truncate(store: pe.Store, log: AckLog, seed: int) -> None:
    event_stream(store, STREAM, 4)
    log(f"ready truncate {seed}")
    run_threads(log, [(writer, (store, log, "w0", seed * 10)),
                      (writer, (store, log, "w1", seed * 10 + 1)),
                      (truncator, (store, log, seed * 10 + 7))])


# ------------------------------------------------------------------------ large events
def run_large(store: pe.Store, log: AckLog, seed: int) -> None:
    event_stream(store, STREAM, 2)
    w = store.create_writer(SCOPE, STREAM, writer_id="w")
    seq = w.last_sequence + 1
    log(f"ready large {seed}")

    def loop() -> None:
        nonlocal seq
        pacer = Pacer(LARGE_RATE)
        while True:
            ev = large_payload(seq)
            got = w.write_event(ev, routing_key=large_key(seq))
            assert got == seq, (got, seq)
            pacer.add(len(ev))
            del ev
            if is_large(seq):
                durable = w.flush()
                assert durable == seq, (durable, seq)
                log(f"A w {durable}")
            seq += 1

    run_threads(log, [(loop, ())])


# ------------------------------------------------------------------------ byte streams
def byte_writer(store: pe.Store, log: AckLog, name: str, seed: int) -> None:
    """Append to byte stream ``name`` the bytes its offsets call for (pc_common.stream_bytes);
    after each flush log ``B name offset``."""
    rnd = random.Random(seed)
    bs = store.create_byte_stream(SCOPE, name)
    pos = bs.tail_offset()
    pacer = Pacer(BYTES_RATE)
    while True:
        start = pos
        for _ in range(rnd.choice([1, 3, 10])):
            r = rnd.random()
            size = (rnd.randint(1, 100) if r < 0.4 else rnd.randint(1000, 64 << 10) if r < 0.97
                    else rnd.randint(4 * MiB + 1, 9 * MiB))
            assert bs.write(stream_bytes(name, pos, pos + size)) == size
            pos += size
        bs.flush()
        log(f"B {name} {pos}")
        pacer.add(pos - start)


def run_bytes(store: pe.Store, log: AckLog, seed: int) -> None:
    log(f"ready bytes {seed}")
    run_threads(log, [(byte_writer, (store, log, name, seed * 10 + i)) for i, name in enumerate(BYTE_STREAMS)])


# ------------------------------------------------------------------------ create / delete
def creator(store: pe.Store, log: AckLog, seed: int) -> None:
    """Create scope cd<seed>x<i> with stream x holding 5 events, then (mostly) delete both."""
    rnd = random.Random(seed)
    for i in range(10**9):
        name = f"{CD_PREFIX}{seed}x{i}"
        log(f"CB {name}")
        store.create_scope(name)
        store.create_stream(name, "x", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(rnd.randint(1, 3))))
        with store.create_writer(name, "x", writer_id=name) as w:
            w.write_events([payload(name, s) for s in range(5)], routing_key=key_of(name, 0))
            w.flush()
        log(f"C {name}")
        if rnd.random() < 0.7:
            log(f"DB {name}")
            store.delete_stream(name, "x")
            store.delete_scope(name)
            log(f"D {name}")
        time.sleep(rnd.choice([0.0, 0.005, 0.02]))


def run_createdelete(store: pe.Store, log: AckLog, seed: int) -> None:
    event_stream(store, STREAM, 2)
    log(f"ready createdelete {seed}")
    run_threads(log, [(writer, (store, log, "w0", seed * 10)), (creator, (store, log, seed * 10 + 7))])


RUNNERS: dict[str, Callable[[pe.Store, AckLog, int], None]] = {
    "writes": run_writes, "scaling": run_scaling, "txn": run_txn, "truncate": run_truncate,
    "large": run_large, "bytes": run_bytes, "createdelete": run_createdelete,
}


def main() -> None:
    store_dir, ack_path, workload, seed = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    log = AckLog(ack_path)
    try:
        store = pe.open(store_dir, **store_options())
        store.create_scope(SCOPE, exist_ok=True)
        RUNNERS[workload](store, log, seed)
    except BaseException as exc:  # noqa: BLE001
        log(f"error main: {type(exc).__name__}: {exc}")
        traceback.print_exc()
        sys.stderr.flush()
        os._exit(3)


if __name__ == "__main__":
    main()
