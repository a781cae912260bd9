"""Child process of test_txn_crash.py: commit transactions in a loop until SIGKILLed, logging
what was begun, what is being committed and what was acknowledged.

Usage: python txn_crash_child.py STORE_DIR ACK_LOG RUN

Opens the store (durability "fsync", frequent checkpoints, small journal files), creates scope
``crash`` / stream ``t`` (fixed(1): the child scales it by hand) if missing, logs ``ready RUN``,
then loops over transaction numbers ``n = RUN * 10000 + i``:

- ``begin <n> <txn id>`` once begin_txn returned;
- EVENTS events ``payload("n<n>", key, seq)`` over KEYS routing keys (per-key sequence
  numbers), the first ten keyless, with a flush() now and then, and on every third transaction
  a scaling between two halves of the writes (split up to 4 segments, then merges), so that
  its commit copies the events staged for the sealed segment;
- ``committing <n>`` just before commit();
- ``committed <n>`` once commit() returned (the transaction is acknowledged).

Every log line is one os.write(2) on an O_APPEND file followed by fsync, so it survives the
SIGKILL (and a power loss). If anything fails, the child logs ``error ...`` and exits with 3.
"""

from __future__ import annotations

import os
import random
import sys

from txn_helpers import payload

import pravega_embedded as pe

SCOPE, STREAM = "crash", "t"
EVENTS, KEYS, KEYLESS, SIZE = 120, 16, 10, 400


def tag_of(n: int) -> str:
    return f"n{n}"


def key_of(j: int) -> str | None:
    return None if j < KEYLESS else f"k{j % KEYS}"


def scale(store: pe.Store, step: int) -> None:
    cur = list(store.stream_info(SCOPE, STREAM).current_segments)
    if len(cur) < 4 and (step // 4) % 2 == 0:
        s = max(cur, key=lambda s: s.key_high - s.key_low)
        mid = (s.key_low + s.key_high) / 2
        store.scale_stream(SCOPE, STREAM, seal=[s.segment_id], new_ranges=[(s.key_low, mid), (mid, s.key_high)])
    elif len(cur) > 1:
        a, b = cur[0], cur[1]
        store.scale_stream(SCOPE, STREAM, seal=[a.segment_id, b.segment_id], new_ranges=[(a.key_low, b.key_high)])


def main() -> None:
    store_dir, ack_log, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)

    try:
        rnd = random.Random(run)
        store = pe.open(store_dir, durability="fsync", checkpoint_interval=0.02, roll_bytes=1 << 20)
        store.create_scope(SCOPE, exist_ok=True)
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)),
                            exist_ok=True)
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id=f"crash-{run}")
        log(f"ready {run}")
        for i in range(10**6):
            n = run * 10000 + i
            txn = tw.begin_txn(lease=3600)
            log(f"begin {n} {txn.txn_id}")
            seq: dict[str | None, int] = {}
            for j in range(EVENTS):
                k = key_of(j)
                s = seq.get(k, 0)
                txn.write_event(payload(tag_of(n), k, s, SIZE), routing_key=k)
                seq[k] = s + 1
                if j == EVENTS // 2:
                    if i % 3 == 2:
                        scale(store, i // 3)
                    if rnd.random() < 0.3:
                        txn.flush()
            log(f"committing {n}")
            txn.commit()
            log(f"committed {n}")
    except BaseException as exc:  # noqa: BLE001
        log(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        os._exit(3)


if __name__ == "__main__":
    main()
