"""Child process of test_retention_crash.py: write a size-retained stream until SIGKILLed.

Usage: python retention_crash_child.py STORE_DIR ACK_LOG SEED TRUNCATE KEEP

Opens the store with fast maintenance (retention marks, truncation and reclaiming run every few
tens of milliseconds, journal files roll every 1 MiB), creates (exist_ok) the stream ``rc/ret``
(4 fixed segments, ``by_size`` retention) and ``rc/keep`` (no retention), then:

- two writer threads (ids w0, w1) resume at ``last_sequence + 1`` and write events of 500 B to
  4 KiB whose payload is a function of (writer, sequence, key); after each ``flush()`` they
  append ``A <writer> <durable seq> <monotonic ns>`` to ACK_LOG with a plain write(2), so a
  SIGKILL cannot lose an acknowledged line (the time is taken after flush returned and before
  the next event is made: events with a higher sequence number are made after it);
- with KEEP=1, one small burst of writer ``k0`` to ``rc/keep`` (one atomic batch, so one
  journal record in one file, written while the retained stream is being written; ``KEEPSTART``
  is logged before it: the parent counts the journal files that data may pin);
- with TRUNCATE=1, a thread that now and then reads part of ``rc/ret`` from its head with a
  standalone reader and truncates the stream at the reader's ``position()`` (logged ``T ...``).
"""

from __future__ import annotations

import os
import random
import sys
import threading
import time

import pravega_embedded as pe
from pravega_embedded.errors import InvalidStreamCutError, TruncatedDataError

SCOPE, RETAINED, KEEP = "rc", "ret", "keep"
RETENTION_BYTES = 2 << 20
ROLL_BYTES = 1 << 20
SEGMENTS = 4
GROUP = 3  # consecutive sequence numbers sharing a routing key
KEYS = 7  # routing keys per writer
WRITER_RATE = 3 << 20  # bytes/s per writer: retention keeps up (the disk bound depends on it)
OPTIONS = {"durability": "fsync", "roll_bytes": ROLL_BYTES, "maintenance_interval": 0.02,
           "retention_interval": 0.05, "checkpoint_interval": 0.05}

_PATTERN = bytes((i * 31 + 7) & 0xFF for i in range(256 + 4096))


def key_of(wid: str, seq: int) -> str:
    """The routing key of a writer's event ``seq`` (the same in every process)."""
    return f"{wid}-k{(seq // GROUP) % KEYS}"


def payload(wid: str, seq: int, key: str) -> bytes:
    """The event for (writer, seq, key): a header plus 500 B-4 KiB of a pattern that depends on seq."""
    head = f"{wid}:{seq}:{key}:".encode()
    n = 500 + (seq * 7919) % 3597
    start = (seq * 13) & 0xFF
    return head + _PATTERN[start : start + n]


def parse(event: bytes) -> tuple[str, int, str]:
    """(writer, seq, key) of an event, after checking it is exactly ``payload(...)``."""
    wid, seq_s, key, _ = event.split(b":", 3)
    w, s, k = wid.decode(), int(seq_s), key.decode()
    if event != payload(w, s, k):
        raise AssertionError(f"damaged event {w}:{s}:{k} ({len(event)} bytes)")
    return w, s, k


def _ack(fd: int, wid: str, durable: int) -> None:
    os.write(fd, f"A {wid} {durable} {time.monotonic_ns()}\n".encode())


def run_writer(store: pe.Store, wid: str, ack_fd: int, seed: int) -> None:
    rnd = random.Random(seed)
    w = store.create_writer(SCOPE, RETAINED, writer_id=wid, linger=0.0005)
    seq = w.last_sequence + 1
    t0, nbytes = time.monotonic(), 0
    while True:
        end = seq + rnd.choice([1, 4, 20, 80, 200])
        while seq < end:
            key = key_of(wid, seq)
            if rnd.random() < 0.3:
                run = GROUP - seq % GROUP  # the rest of this key's group, as one atomic batch
                evs = [payload(wid, seq + i, key) for i in range(run)]
                got = w.write_events(evs, routing_key=key)
            else:
                evs = [payload(wid, seq, key)]
                got = w.write_event(evs[0], routing_key=key)
            seq += len(evs)
            nbytes += sum(map(len, evs))
            assert got == seq - 1, (got, seq - 1)
        durable = w.flush()
        assert durable == seq - 1, (durable, seq - 1)
        _ack(ack_fd, wid, durable)
        ahead = nbytes / WRITER_RATE - (time.monotonic() - t0)
        if ahead > 0:
            time.sleep(ahead)


def write_keep(store: pe.Store, ack_fd: int, rnd: random.Random) -> None:
    """One small burst to the stream without retention, as one journal record (one file)."""
    os.write(ack_fd, b"KEEPSTART\n")
    with store.create_writer(SCOPE, KEEP, writer_id="k0") as w:
        first = w.last_sequence + 1
        w.write_events([payload("k0", s, "k0") for s in range(first, first + rnd.randint(5, 30))],
                       routing_key="k0")
        _ack(ack_fd, "k0", w.flush())


def run_truncator(store: pe.Store, ack_fd: int, seed: int) -> None:
    rnd = random.Random(seed)
    while True:
        time.sleep(rnd.uniform(0.03, 0.25))
        info = store.stream_info(SCOPE, RETAINED)
        budget = info.length * rnd.uniform(0.05, 0.5)  # read (and cut) at most half the stream
        try:
            with store.create_reader(SCOPE, RETAINED, end=info.tail) as r:
                got = 0
                while got < budget:
                    ev = r.read_next_event(0.5)
                    if ev is None:
                        break
                    got += len(ev.event)
                cut = r.position()
            store.truncate_stream(SCOPE, RETAINED, cut)
        except (TruncatedDataError, InvalidStreamCutError):
            continue  # retention truncated past us meanwhile
        os.write(ack_fd, f"T {time.monotonic_ns()} {cut.to_text()}\n".encode())


def main() -> None:
    store_dir, ack_log = sys.argv[1], sys.argv[2]
    seed, truncate, keep = int(sys.argv[3]), sys.argv[4] == "1", sys.argv[5] == "1"
    rnd = random.Random(seed)
    store = pe.open(store_dir, **OPTIONS)
    store.create_scope(SCOPE, exist_ok=True)
    store.create_stream(SCOPE, RETAINED, pe.StreamConfiguration(
        scaling=pe.ScalingPolicy.fixed(SEGMENTS),
        retention=pe.RetentionPolicy.by_size(bytes=RETENTION_BYTES)), exist_ok=True)
    store.create_stream(SCOPE, KEEP, exist_ok=True)
    ack_fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(ack_fd, b"ready\n")
    threads = [threading.Thread(target=run_writer, args=(store, f"w{i}", ack_fd, seed * 10 + i), daemon=True)
               for i in range(2)]
    if truncate:
        threads.append(threading.Thread(target=run_truncator, args=(store, ack_fd, seed * 10 + 7), daemon=True))
    for t in threads:
        t.start()
    if keep:
        time.sleep(rnd.uniform(0.0, 0.3))  # somewhere in the middle of the retained stream's data
        write_keep(store, ack_fd, rnd)
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
