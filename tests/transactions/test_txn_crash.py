"""Crash test: SIGKILL a process that commits transactions in a loop, then recover and verify.

The child (txn_crash_child.py, durability "fsync") begins a transaction, writes EVENTS tagged
events (the transaction number in each payload; every third transaction with a scaling in the
middle, so its commit copies staged events), commits, and logs (fsync'ed) ``begin``,
``committing`` and ``committed`` lines. Most of its time is spent inside commit() (journal
syncs, the MERGE record, the LMDB write), so the seeded random kills land there often; the
parent counts how often. After every kill the parent reopens the store and checks:

- every transaction is visible whole (exactly EVENTS events) or not at all; every acknowledged
  (``committed``) one is whole; nothing visible was never sent to commit();
- no event twice, per-key order within each transaction, each transaction contiguous per
  segment, each keyed event in a segment owning its key;
- the status agrees with what is visible: COMMITTED if and only if visible; the others are OPEN
  (the commit's MERGE was lost) or ABORTED; the parent aborts the OPEN ones (so the next run
  starts clean) and checks they stay invisible;
- a standalone reader and a slice read the same events.

At the end the parent commits a transaction of its own to the recovered store.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
import uuid
from collections import Counter
from pathlib import Path

from txn_crash_child import EVENTS, SCOPE, STREAM
from txn_helpers import (
    assert_contiguous,
    assert_exactly_once,
    assert_key_order,
    assert_owned,
    parse,
    payload,
    reader_events,
    slice_events,
)

import pravega_embedded as pe

CHILD = Path(__file__).with_name("txn_crash_child.py")
ITERATIONS = int(os.environ.get("PE_TXN_CRASH_ITERATIONS", "20"))
SEED = int(os.environ.get("PE_TXN_CRASH_SEED", "2024"))


class Log:
    def __init__(self, path: Path) -> None:
        self.ready: set[int] = set()
        self.begun: dict[str, uuid.UUID] = {}
        self.committing: set[str] = set()
        self.committed: set[str] = set()
        self.errors: list[str] = []
        self.last = ""
        if not path.exists():
            return
        for line in path.read_text().splitlines():
            parts = line.split()
            if not parts:
                continue
            self.last = line
            what = parts[0]
            if what == "ready":
                self.ready.add(int(parts[1]))
            elif what == "begin":
                self.begun[f"n{parts[1]}"] = uuid.UUID(parts[2])
            elif what == "committing":
                self.committing.add(f"n{parts[1]}")
            elif what == "committed":
                self.committed.add(f"n{parts[1]}")
            else:
                self.errors.append(line)


def verify(store_dir: Path, log: Log, aborted_by_parent: set[str]) -> tuple[set[str], int]:
    """Check the recovered store; abort what the crash left OPEN. Returns (visible tags, how
    many OPEN transactions were aborted)."""
    with pe.open(store_dir) as store:
        events = reader_events(store, SCOPE, STREAM)
        assert Counter(ev.event for ev in slice_events(store, SCOPE, STREAM)) == Counter(ev.event for ev in events)
        per_txn = Counter(parse(ev.event)[0] for ev in events)
        torn = {t: c for t, c in per_txn.items() if c != EVENTS}
        assert not torn, f"transactions visible in part: {torn}"
        visible = set(per_txn)
        lost = log.committed - visible
        assert not lost, f"acknowledged transactions lost: {sorted(lost)}"
        ghosts = visible - log.committing
        assert not ghosts, f"visible but never sent to commit(): {sorted(ghosts)}"
        assert not visible & aborted_by_parent, "a transaction aborted after a crash became visible"
        assert_exactly_once(events)
        assert_key_order(events)
        assert_contiguous(events, lambda tag: True)
        assert_owned(store, SCOPE, STREAM, events)

        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="verifier")
        reopened = 0
        for tag, tid in log.begun.items():
            txn = tw.get_txn(tid)
            status = txn.status()
            if tag in visible:
                assert status == pe.TxnStatus.COMMITTED, f"{tag} is visible but {status.value}"
            else:
                assert status in (pe.TxnStatus.OPEN, pe.TxnStatus.ABORTED), f"{tag} is invisible but {status.value}"
                if status == pe.TxnStatus.OPEN:
                    txn.abort()
                    aborted_by_parent.add(tag)
                    reopened += 1
        assert tags_of(slice_events(store, SCOPE, STREAM)) == visible
        return visible, reopened


def wait_for_commit(ack_log: Path, run: int, k: int, deadline: float, proc) -> None:
    """Return once the child's run ``run`` has logged its k-th ``committing`` line."""
    with open(ack_log, "rb") as f:
        seen, buf = 0, b""
        while True:
            buf += f.read()
            *lines, buf = buf.split(b"\n")
            seen += sum(1 for line in lines if line.startswith(b"committing ") and int(line.split()[1]) // 10000 == run)
            if seen >= k:
                return
            assert proc.poll() is None, f"child {run} exited with {proc.returncode}"
            assert time.monotonic() < deadline, "the child commits nothing"
            time.sleep(0.0005)


def tags_of(events) -> set[str]:
    return {parse(ev.event)[0] for ev in events}


def test_sigkill_during_transaction_commits(tmp_path):
    store_dir, ack_log = tmp_path / "store", tmp_path / "acks"
    rnd = random.Random(SEED)
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(CHILD.parent)] + sys.path))
    in_commit = 0
    left_open = 0
    aborted_by_parent: set[str] = set()
    for it in range(ITERATIONS):
        proc = subprocess.Popen([sys.executable, str(CHILD), str(store_dir), str(ack_log), str(it)], env=env)
        try:
            deadline = time.monotonic() + 60
            while it not in Log(ack_log).ready:
                assert proc.poll() is None, f"child {it} exited with {proc.returncode}: {Log(ack_log).errors}"
                assert time.monotonic() < deadline, "child never got ready"
                time.sleep(0.005)
            if it % 2:
                time.sleep(rnd.uniform(0.02, 0.3))  # a random moment to kill at
            else:  # soon after the k-th commit of this run began
                wait_for_commit(ack_log, it, rnd.randint(1, 4), deadline, proc)
                time.sleep(rnd.uniform(0, 0.002))
            assert proc.poll() is None, f"child {it} died by itself ({proc.returncode}): {Log(ack_log).errors}"
        finally:
            proc.send_signal(signal.SIGKILL)
            proc.wait()
        log = Log(ack_log)
        assert not log.errors, log.errors
        in_commit += log.last.startswith("committing")
        visible, reopened = verify(store_dir, log, aborted_by_parent)
        left_open += reopened
    log = Log(ack_log)
    print(f"{ITERATIONS} kills, {in_commit} inside commit(); {len(log.committed)} transactions acknowledged, "
          f"{len(visible)} visible, {left_open} left OPEN by a kill and aborted")
    assert len(log.committed) >= ITERATIONS // 2, "too few commits: the test exercised little"
    assert in_commit >= max(3, ITERATIONS // 8), f"only {in_commit} of {ITERATIONS} kills landed inside commit()"
    with pe.open(store_dir) as store:  # the recovered store takes new transactions
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="after")
        with tw.begin_txn() as txn:
            txn.write_events([payload("after", "k", i) for i in range(10)], routing_key="k")
        assert tags_of(slice_events(store, SCOPE, STREAM)) == visible | {"after"}
