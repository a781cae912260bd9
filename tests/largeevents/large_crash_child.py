"""Child process of test_large_event_crash.py: write large events (20-40 MiB) between small
ones until SIGKILLed, logging what was acknowledged.

Usage: python large_crash_child.py STORE_DIR ACK_LOG RUN

Opens the store (durability "fsync", a small roll size and a short checkpoint interval, so
kills land in file rolls and checkpoints too), creates scope ``crash`` / stream ``big``
(fixed(2)) if missing, resumes writer ``w`` at ``last_sequence + 1`` and logs ``ready RUN``.
Then, per sequence number: a small event (``seq % 3 == 2``, buffered) or a large one (logged
``begin SEQ`` first, then written and flushed, then ``ack SEQ``). Every log line is one
os.write on an O_APPEND file followed by fsync. On an error: ``error ...`` and exit status 3.

The event of a sequence number is a pure function of it (``payload``), so the parent checks
every byte of every event it reads.
"""

from __future__ import annotations

import os
import random
import sys

import pravega_embedded as pe

SCOPE, STREAM, WRITER = "crash", "big", "w"
MiB = 1 << 20
_PERIOD = 65521  # a prime: no two 4 MiB chunks of an event hold the same bytes


def is_large(seq: int) -> bool:
    return seq % 3 != 2


def size_of(seq: int) -> int:
    if not is_large(seq):
        return 40 + (seq * 37) % 400
    return 20 * MiB + (seq * 7919 * 1021) % (20 * MiB)


def key_of(seq: int) -> str | None:
    return None if seq % 5 == 4 else f"k{seq % 3}"


def payload(seq: int) -> bytes:
    n = size_of(seq)
    head = f"ev{seq}:{n}:".encode()
    block = random.Random(seq).randbytes(_PERIOD)
    reps = (n - len(head)) // _PERIOD + 1
    return head + (block * reps)[: n - len(head)]


def seq_of(event: bytes) -> int:
    return int(event[2 : event.index(b":")])


def main() -> None:
    store_dir, ack_log, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
    fd = os.open(ack_log, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)

    try:
        store = pe.open(store_dir, checkpoint_interval=0.05, roll_bytes=1 << 20)
        store.create_scope(SCOPE, exist_ok=True)
        store.create_stream(SCOPE, STREAM, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)),
                            exist_ok=True)
        w = store.create_writer(SCOPE, STREAM, writer_id=WRITER)
        seq = w.last_sequence + 1
        log(f"ready {run} {seq}")
        while True:
            ev = payload(seq)
            if is_large(seq):
                log(f"begin {seq}")
                got = w.write_event(ev, routing_key=key_of(seq))
                del ev
                assert got == seq, (got, seq)
                durable = w.flush()
                assert durable == seq, (durable, seq)
                log(f"ack {durable}")
            else:
                assert w.write_event(ev, routing_key=key_of(seq)) == seq
            seq += 1
    except BaseException as exc:  # noqa: BLE001
        os.write(fd, f"error {type(exc).__name__}: {exc}".replace("\n", " ").encode() + b"\n")
        os._exit(3)


if __name__ == "__main__":
    main()
