"""Concurrent transactions on one stream: 8 threads x 20 transactions each (about a third
aborted, a few expired by their lease), each writing keyed events (per-key sequence numbers)
and keyless ones, with flushes at random points, while a plain writer and a reader follow the
stream. Exactly the committed transactions are visible, each event exactly once, per-key
order within each transaction, each transaction contiguous per segment; the reader (which
followed the tail the whole time) saw the same; after reopening, the same again.
"""

from __future__ import annotations

import random
import threading
import time

from txn_helpers import (
    assert_contiguous,
    assert_exactly_once,
    assert_key_order,
    make_stream,
    payload,
    reader_events,
    slice_events,
    tags,
)

import pravega_embedded as pe

SCOPE, STREAM = "cc", "s"
THREADS, TXNS = 8, 20


def run_thread(store: pe.Store, t: int, outcome: dict, errors: list) -> None:
    try:
        rnd = random.Random(t)
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id=f"tw{t}")
        for n in range(TXNS):
            tag = f"t{t}x{n}"
            expire = rnd.random() < 0.05
            txn = tw.begin_txn(lease=60)
            seq: dict[str, int] = {}
            count = 0
            for _ in range(rnd.randrange(1, 80)):
                if rnd.random() < 0.2:
                    txn.write_event(payload(tag, None, count))
                else:
                    k = f"k{rnd.randrange(12)}"
                    if rnd.random() < 0.3:  # a batch of one key
                        m = rnd.randrange(1, 6)
                        txn.write_events([payload(tag, k, seq.get(k, 0) + i) for i in range(m)], routing_key=k)
                        seq[k] = seq.get(k, 0) + m
                        count += m
                        continue
                    txn.write_event(payload(tag, k, seq.get(k, 0)), routing_key=k)
                    seq[k] = seq.get(k, 0) + 1
                count += 1
                if rnd.random() < 0.02:
                    txn.flush()
            if expire:
                txn.ping(lease=0.05)  # expires 50 ms from now
                time.sleep(0.1)
                try:
                    txn.commit()
                    raise AssertionError(f"{tag}: an expired transaction committed")
                except pe.errors.TxnFailedError:
                    outcome[tag] = 0
            elif rnd.random() < 0.33:
                txn.abort()
                outcome[tag] = 0
            else:
                txn.commit()
                outcome[tag] = count
    except BaseException as exc:  # noqa: BLE001
        errors.append(exc)


def test_concurrent_transactions_some_aborted(store_path):
    store = pe.open(store_path, durability="os", maintenance_interval=0.05)
    try:
        make_stream(store, SCOPE, STREAM, 4)
        outcome: dict[str, int] = {}
        errors: list[BaseException] = []
        stop = threading.Event()  # stops the plain writer
        tail: list[pe.StreamCut] = []  # the stream's tail once every writer is done
        followed: list[pe.EventRead] = []

        def follow() -> None:
            try:
                with store.create_reader(SCOPE, STREAM) as r:
                    # follow the stream until its final tail is known and reached
                    while not (tail and r.position() >= tail[0]):
                        ev = r.read_next_event(0.05)
                        if ev is not None:
                            followed.append(ev)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        def plain() -> None:
            try:
                with store.create_writer(SCOPE, STREAM, writer_id="plain", linger=0) as w:
                    i = 0
                    while not stop.is_set():
                        w.write_event(payload("plain", f"k{i % 12}", i // 12), routing_key=f"k{i % 12}")
                        i += 1
                        if i % 20 == 0:
                            w.flush()
                            time.sleep(0.001)
            except BaseException as exc:  # noqa: BLE001
                errors.append(exc)

        follower = threading.Thread(target=follow, daemon=True)
        plain_writer = threading.Thread(target=plain, daemon=True)
        follower.start()
        plain_writer.start()
        workers = [threading.Thread(target=run_thread, args=(store, t, outcome, errors), daemon=True)
                   for t in range(THREADS)]
        for w in workers:
            w.start()
        for w in workers:
            w.join(120)
            assert not w.is_alive(), "a transaction thread hung"
        stop.set()
        plain_writer.join(120)
        assert not plain_writer.is_alive(), "the plain writer hung"
        tail.append(store.stream_info(SCOPE, STREAM).tail)  # every write is in: the follower reads up to here
        follower.join(60)
        assert not follower.is_alive(), "the follower did not reach the stream's tail in 60 s"
        assert not errors, errors
        assert len(outcome) == THREADS * TXNS

        committed = {tag: n for tag, n in outcome.items() if n}
        aborted = {tag for tag, n in outcome.items() if not n}
        assert len(committed) > 50 and len(aborted) > 20, (len(committed), len(aborted))

        def check(events) -> None:
            seen = tags(events)
            seen.pop("plain", None)
            assert dict(seen) == committed, (
                f"missing {sorted(set(committed) - set(seen))[:5]}, "
                f"unexpected {sorted(set(seen) - set(committed))[:5]}")
            assert_exactly_once(events)
            assert_key_order(events)
            assert_contiguous(events, lambda tag: tag != "plain")

        events = slice_events(store, SCOPE, STREAM)
        check(events)
        assert tags(events)["plain"] > 0
        check(followed)
        assert sorted(ev.event for ev in followed) == sorted(ev.event for ev in events)
    finally:
        store.close()
    with pe.open(store_path) as store:
        events2 = reader_events(store, SCOPE, STREAM)
        check(events2)
        assert sorted(ev.event for ev in events2) == sorted(ev.event for ev in events)
