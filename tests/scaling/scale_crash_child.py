"""Child process of test_scale_crash.py: write and scale until killed, logging what was
acknowledged.

Usage: python scale_crash_child.py STORE_DIR ACK_LOG SEED

Opens the store (durability "fsync"), creates scope ``crash`` / stream ``s`` (fixed(1), so
manual merges may go down to one segment) if missing, writes ``ready <SEED>`` to ACK_LOG, then
runs until SIGKILLed:

- two writer threads (ids w0, w1) resume at their last durable sequence and write events whose
  payload encodes (writer, sequence, key) plus a checkable pattern; each key belongs to one
  writer, so per-key order is sequence order. After each flush: ``<wid> <durable seq>``.
- one scaler thread scales the stream in a loop, alternating splits and merges (some scales
  split one segment and merge two others at once; about one in ten is a rescale into equal
  ranges by update_stream, with a rate policy whose min_segments is one above the count, after
  which min_segments is set back to 1). Before each scale: ``scaling <epoch>``;
  after it returned: ``scaled <epoch>`` (epoch = the one the scale creates).

Every log line is one os.write(2) on an O_APPEND file: a SIGKILL does not lose it. If a thread fails, the
child logs ``error <what>`` and exits with status 3.
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pravega_embedded as pe

SCOPE, STREAM = "crash", "s"
MAX_SEGMENTS = 8
_PATTERN = bytes(i & 0xFF for i in range(256 + 600))


def payload(wid: str, seq: int, key: str) -> bytes:
    """The event for (writer, seq, key): a header plus a pattern that depends on seq."""
    n = (seq * 7919) % 600
    start = seq & 0xFF
    return f"{wid}:{seq}:{key}:".encode() + _PATTERN[start : start + n]


def key_of(wid: str, seq: int) -> str:
    return f"{wid}-k{(seq * 31) % 23}"


def run_writer(store, wid: str, ack_fd: int, seed: int) -> None:
    rnd = random.Random(seed)
    w = store.create_writer(SCOPE, STREAM, writer_id=wid, linger=0.0005)
    seq = w.last_sequence + 1
    while True:
        n = rnd.choice([1, 5, 20, 100])
        if rnd.random() < 0.3:
            key = key_of(wid, seq)  # one atomic batch of one key: seqs stay in key order
            w.write_events([payload(wid, seq + i, key) for i in range(n)], routing_key=key)
            seq += n
        else:
            for _ in range(n):
                key = key_of(wid, seq)
                got = w.write_event(payload(wid, seq, key), routing_key=key)
                assert got == seq, (got, seq)
                seq += 1
        durable = w.flush()
        os.write(ack_fd, f"{wid} {durable}\n".encode())


def _split(lo: float, hi: float, k: int) -> list[tuple[float, float]]:
    width = (hi - lo) / k
    bounds = [lo + i * width for i in range(k)] + [hi]
    return [(bounds[i], bounds[i + 1]) for i in range(k)]


def plan(cur, step: int, rnd: random.Random):
    """(seal, new_ranges) for the next scale of the open segments ``cur`` ([(id, low, high)]
    in key order): splits on even steps, merges on odd ones (when possible); now and then a
    split and a merge in one scale."""
    n = len(cur)
    if n >= 3 and rnd.random() < 0.25:
        i = rnd.randrange(n - 1)
        a, b = cur[i], cur[i + 1]
        c = rnd.choice([s for j, s in enumerate(cur) if j not in (i, i + 1)])
        return [a[0], b[0], c[0]], [(a[1], b[2])] + _split(c[1], c[2], 2)
    if (step % 2 == 0 and n < MAX_SEGMENTS) or n == 1:
        s = rnd.choice(cur)
        return [s[0]], _split(s[1], s[2], rnd.choice([2, 3]))
    i = rnd.randrange(n - 1)
    a, b = cur[i], cur[i + 1]
    return [a[0], b[0]], [(a[1], b[2])]


QUIET_MIN1 = pe.StreamConfiguration(scaling=pe.ScalingPolicy.by_event_rate(1e12, min_segments=1))


def run_scaler(store, ack_fd: int, seed: int) -> None:
    rnd = random.Random(seed)
    info = store.stream_info(SCOPE, STREAM)
    if info.config.scaling.min_segments > 1:  # killed between the two update_stream calls
        store.update_stream(SCOPE, STREAM, QUIET_MIN1)
    epoch = info.epoch
    cur = [(s.segment_id, s.key_low, s.key_high) for s in info.current_segments]
    watcher = store.watch_segments(SCOPE, STREAM, initial=False)
    step = 0
    while True:
        while watcher.get(timeout=0) is not None:  # drop the changes of our own scale_stream calls
            pass
        epoch += 1
        if len(cur) < MAX_SEGMENTS and rnd.random() < 0.1:
            # a rescale by update_stream: a rate policy (that never triggers) whose min_segments
            # is above the count rescales into equal ranges; then min_segments goes back to 1
            n = len(cur) + 1
            os.write(ack_fd, f"scaling {epoch}\n".encode())
            store.update_stream(SCOPE, STREAM, pe.StreamConfiguration(
                scaling=pe.ScalingPolicy.by_event_rate(1e12, min_segments=n)))
            os.write(ack_fd, f"scaled {epoch}\n".encode())
            change = watcher.get(timeout=10)
            while change is not None and change.epoch < epoch:
                change = watcher.get(timeout=10)
            assert change is not None and change.epoch == epoch and change.segment_count == n, change
            cur = [(sid, lo, hi) for sid, (lo, hi) in zip(change.segment_ids, _split(0.0, 1.0, n))]
            store.update_stream(SCOPE, STREAM, QUIET_MIN1)
        else:
            seal, ranges = plan(cur, step, rnd)
            os.write(ack_fd, f"scaling {epoch}\n".encode())
            new = store.scale_stream(SCOPE, STREAM, seal=seal, new_ranges=ranges)
            os.write(ack_fd, f"scaled {epoch}\n".encode())
            assert all(sid >> 32 == epoch for sid in new), (new, epoch)
            cur = sorted([s for s in cur if s[0] not in seal] + [(sid, lo, hi) for sid, (lo, hi) in zip(new, sorted(ranges))],
                         key=lambda s: s[1])
        step += 1
        if rnd.random() < 0.5:
            time.sleep(0.001)  # now and then let the writers fill the new segments a little


def guarded(fn, ack_fd: int, *args) -> None:
    """Run ``fn``; if it fails, log ``error ...`` and end the process (the parent checks)."""
    try:
        fn(*args)
    except BaseException as exc:  # noqa: BLE001
        os.write(ack_fd, f"error {type(exc).__name__}: {exc}\n".replace("\n", " ").encode() + b"\n")
        os._exit(3)


def main() -> None:
    store_dir, ack_log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = pe.open(store_dir, durability="fsync", checkpoint_interval=0.05, roll_bytes=1 << 20)
    store.create_scope(SCOPE, exist_ok=True)
    store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)),
                        exist_ok=True)
    ack_fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(ack_fd, f"ready {seed}\n".encode())
    threads = [threading.Thread(target=guarded, args=(run_writer, ack_fd, store, f"w{i}", ack_fd, seed * 10 + i),
                                daemon=True) for i in range(2)]
    threads.append(threading.Thread(target=guarded, args=(run_scaler, ack_fd, store, ack_fd, seed * 10 + 7),
                                    daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
