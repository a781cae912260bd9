"""Child process of test_crash.py: write events until killed, logging what was acknowledged.

Usage: python crash_child.py STORE_DIR ACK_LOG SEED

Two writer threads (ids w0, w1) resume from their last durable sequence, write events whose
payload encodes (writer, sequence, key) plus a checkable pattern, and after each flush append
``writer seq`` to ACK_LOG (plain write(2): a SIGKILL does not lose it).
"""

from __future__ import annotations

import os
import random
import sys
import threading

import pravega_embedded as pe


_PATTERN = bytes(i & 0xFF for i in range(256 + 3000))


def payload(wid: str, seq: int, key: str) -> bytes:
    """The event for (writer, seq, key): a header plus a pattern that depends on seq."""
    head = f"{wid}:{seq}:{key}:".encode()
    n = (seq * 7919) % 3000
    start = seq & 0xFF
    return head + _PATTERN[start : start + n]


def run_writer(store, wid: str, ack_fd: int, seed: int) -> None:
    rnd = random.Random(seed)
    w = store.create_writer("crash", "s", writer_id=wid, linger=0.0005)
    seq = w.last_sequence + 1
    while True:
        n = rnd.choice([1, 5, 50, 400])
        if rnd.random() < 0.3:
            key = f"{wid}-k{seq % 7}"
            evs = [payload(wid, seq + i, key) for i in range(n)]
            # one key per batch keeps per-key order = sequence order
            w.write_events(evs, routing_key=key)
            seq += n
        else:
            for _ in range(n):
                key = f"{wid}-k{seq % 7}"
                got = w.write_event(payload(wid, seq, key), routing_key=key)
                assert got == seq, (got, seq)
                seq += 1
        durable = w.flush()
        os.write(ack_fd, f"{wid} {durable}\n".encode())


def main() -> None:
    store_dir, ack_log, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
    store = pe.open(store_dir, checkpoint_interval=0.05, roll_bytes=1 << 20)
    store.create_scope("crash", exist_ok=True)
    store.create_stream("crash", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)),
                        exist_ok=True)
    ack_fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
    os.write(ack_fd, b"ready\n")
    threads = [threading.Thread(target=run_writer, args=(store, f"w{i}", ack_fd, seed * 10 + i), daemon=True)
               for i in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()


if __name__ == "__main__":
    main()
