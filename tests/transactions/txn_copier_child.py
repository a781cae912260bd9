"""Child process of test_txn_copier.py: an exactly-once copier from stream A to stream B.

Usage: python txn_copier_child.py STORE_DIR LOG DELAY

The approach: the copier's input position is committed atomically with its output. Each batch
of up to BATCH events read from A is written to B in one transaction (same payload, same
routing key, in read order), and the transaction's last event is a *marker*: routing key
MARK, payload ``<batch number> <StreamCut text of A after the batch>`` (the standalone reader's
``position()``, the cut just after the last event it returned). The commit makes the batch and
its marker visible together, or neither.

On start the copier scans B for the marker with the highest batch number and starts a
standalone reader of A at its cut (``pe.StreamCut.from_text``), or at A's head if there is
none. So:

- a crash before a commit leaves neither the batch nor its marker: the restart reads those
  inputs again (the abandoned transaction stays invisible and its lease aborts it);
- a crash after a commit (even before the copier knew it returned) leaves both: the restart
  resumes after them. No input is copied twice or lost.

Per-key order in B holds: A's reader returns each key's events in order (also across A's
scalings), a key goes to one segment of B, and batches commit one after another.

One copier at a time (the parent runs one child at a time). A is sealed, so the reader returns
None at its end; the copier then logs ``done <batches>`` and exits 0. Log lines (os.write +
fsync on an O_APPEND file): ``start <resume batch>``, ``committing <batch>``,
``committed <batch> <events>``; on any failure ``error ...`` and exit status 3. DELAY seconds
are slept in the middle of each batch (after a flush of the half written so far), so that
kills often find a transaction OPEN with staged, durable events.
"""

from __future__ import annotations

import os
import sys
import time

import pravega_embedded as pe

SCOPE, A, B = "copy", "a", "b"
MARK = "_copier"
BATCH = 500


def resume_point(store: pe.Store) -> tuple[int, pe.StreamCut | None]:
    """(last committed batch number, A's cut after it); (0, None) before the first commit."""
    best, cut = 0, None
    for ev in store.read_slice(SCOPE, B):
        if ev.routing_key == MARK:
            batch, text = ev.event.decode().split(" ", 1)
            if int(batch) > best:
                best, cut = int(batch), pe.StreamCut.from_text(text)
    return best, cut


def main() -> None:
    store_dir, log_path, delay = sys.argv[1], sys.argv[2], float(sys.argv[3])
    fd = os.open(log_path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)

    def log(line: str) -> None:
        os.write(fd, (line + "\n").encode())
        os.fsync(fd)

    try:
        store = pe.open(store_dir, durability="fsync")
        batch, cut = resume_point(store)
        log(f"start {batch}")
        reader = store.create_reader(SCOPE, A, start=cut)
        tw = store.create_transactional_writer(SCOPE, B, writer_id="copier")
        while True:
            first = reader.read_next_event(timeout=5)
            if first is None:
                log(f"done {batch}")
                store.close()
                return
            batch += 1
            txn = tw.begin_txn(lease=60)
            n = 0
            ev = first
            while ev is not None:
                txn.write_event(ev.event, routing_key=ev.routing_key)
                n += 1
                if n == BATCH // 2:
                    txn.flush()
                    time.sleep(delay)
                if n == BATCH:
                    break
                ev = reader.read_next_event(timeout=5)
            txn.write_event(f"{batch} {reader.position().to_text()}".encode(), routing_key=MARK)
            log(f"committing {batch}")
            txn.commit()
            log(f"committed {batch} {n}")
    except BaseException as exc:  # noqa: BLE001
        log(f"error {type(exc).__name__}: {exc}".replace("\n", " "))
        os._exit(3)


if __name__ == "__main__":
    main()
