"""The status machine and stale operations (Jepsen-style: a late or repeated commit/abort must
never act again, nor on another transaction).

For every pair (first, second) of commit/abort, the second operation is made through the same
handle, through another handle of the id (``get_txn``), through another writer object, and
after reopening the store: it raises TxnFailedError, the status stays what the first made it,
and the stream holds exactly what it held (counted). Writes, flush and ping on an ended
transaction raise too. Many threads racing commit/abort on one transaction: exactly one wins.
Unknown, garbage and other-stream ids raise TxnNotFoundError. The context manager commits on
success, aborts on an exception (re-raised) and leaves an ended transaction alone. Bad events,
keys and leases are refused without touching the transaction.
"""

from __future__ import annotations

import random
import threading
import uuid

import pytest
from txn_helpers import make_stream, payload, slice_events, tags

import pravega_embedded as pe
from pravega_embedded import errors

SCOPE, STREAM = "st", "s"
N = 25
ENDED = {"commit": pe.TxnStatus.COMMITTED, "abort": pe.TxnStatus.ABORTED}


def staged_txn(tw: pe.TransactionalEventStreamWriter, tag: str) -> pe.Transaction:
    txn = tw.begin_txn()
    for i in range(N):
        txn.write_event(payload(tag, f"k{i % 5}", i // 5), routing_key=f"k{i % 5}")
    return txn


def counts(store) -> dict:
    return dict(tags(slice_events(store, SCOPE, STREAM)))


def assert_refused(txn: pe.Transaction, op: str) -> None:
    with pytest.raises(errors.TxnFailedError):
        getattr(txn, op)()


def assert_dead(txn: pe.Transaction) -> None:
    """Every operation but status() on an ended transaction raises TxnFailedError."""
    for call in (lambda: txn.commit(), lambda: txn.abort(), lambda: txn.flush(), lambda: txn.ping(),
                 lambda: txn.write_event(b"late", routing_key="k"),
                 lambda: txn.write_events([b"late"], routing_key="k")):
        with pytest.raises(errors.TxnFailedError):
            call()


@pytest.mark.parametrize("first", ["commit", "abort"])
@pytest.mark.parametrize("second", ["commit", "abort"])
@pytest.mark.parametrize("via", ["same", "get_txn", "other_writer", "reopen"])
def test_a_second_commit_or_abort_is_refused_and_changes_nothing(store_path, first, second, via):
    store = pe.open(store_path, durability="none")
    try:
        make_stream(store, SCOPE, STREAM, 3)
        tw = store.create_transactional_writer(SCOPE, STREAM, writer_id="tx")
        txn = staged_txn(tw, "t")
        later = staged_txn(tw, "later")  # an OPEN transaction a stale op must not touch
        getattr(txn, first)()
        assert txn.status() == ENDED[first]
        expected = {"t": N} if first == "commit" else {}
        assert counts(store) == expected
        if via == "same":
            handle = txn
        elif via == "get_txn":
            handle = tw.get_txn(txn.txn_id)
        elif via == "other_writer":
            handle = store.create_transactional_writer(SCOPE, STREAM, writer_id="other").get_txn(str(txn.txn_id))
        else:
            store.close()
            store = pe.open(store_path, durability="none")
            handle = store.create_transactional_writer(SCOPE, STREAM, writer_id="tx").get_txn(txn.txn_id)
            later = store.create_transactional_writer(SCOPE, STREAM).get_txn(later.txn_id)
        assert handle.txn_id == txn.txn_id
        assert handle.status() == ENDED[first]
        assert_refused(handle, second)
        assert_dead(handle)
        assert handle.status() == ENDED[first]
        assert counts(store) == expected
        assert later.status() == pe.TxnStatus.OPEN  # untouched by the stale operation
        later.commit()
        assert counts(store) == {**expected, "later": N}
        if via in ("get_txn", "other_writer"):  # and the original handle is refused too
            assert_refused(txn, second)
    finally:
        store.close()
    with pe.open(store_path, durability="none") as store:  # nothing changed durably either
        assert counts(store) == {**expected, "later": N}
        tw = store.create_transactional_writer(SCOPE, STREAM)
        assert tw.get_txn(txn.txn_id).status() == ENDED[first]
        assert tw.get_txn(later.txn_id).status() == pe.TxnStatus.COMMITTED


def race(barrier: threading.Barrier, handle: pe.Transaction, op: str, results: list) -> None:
    barrier.wait(10)
    try:
        getattr(handle, op)()
        results.append((op, "ok"))
    except errors.TxnFailedError:
        results.append((op, "refused"))


def test_racing_commits_and_aborts_on_one_transaction_have_one_winner(pe_store):
    make_stream(pe_store, SCOPE, STREAM, 4)
    tw = pe_store.create_transactional_writer(SCOPE, STREAM)
    committed = 0
    for round_ in range(30):
        txn = staged_txn(tw, f"r{round_}")
        writers = [pe_store.create_transactional_writer(SCOPE, STREAM) for _ in range(3)]
        handles = [w.get_txn(txn.txn_id) for w in writers] + [txn]
        barrier = threading.Barrier(8)
        results: list[tuple[str, str]] = []
        ops = ["commit", "abort"] * 4
        random.Random(round_).shuffle(ops)  # the last thread at the barrier runs first: vary it
        threads = [threading.Thread(target=race, args=(barrier, handles[i % 4], ops[i], results))
                   for i in range(8)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(30)
        winners = [op for op, outcome in results if outcome == "ok"]
        assert len(results) == 8 and len(winners) == 1, results
        assert txn.status() == ENDED[winners[0]]
        committed += winners[0] == "commit"
        got = counts(pe_store)
        assert got.get(f"r{round_}", 0) == (N if winners[0] == "commit" else 0)
    assert sum(counts(pe_store).values()) == committed * N
    assert 0 < committed < 30, "the race never went both ways: it tested little"


def test_get_txn_of_unknown_garbage_or_foreign_ids_raises_not_found(pe_store):
    make_stream(pe_store, SCOPE, STREAM, 1)
    make_stream(pe_store, SCOPE, "other", 1)
    tw = pe_store.create_transactional_writer(SCOPE, STREAM)
    foreign = pe_store.create_transactional_writer(SCOPE, "other").begin_txn()
    mine = tw.begin_txn()
    for bad in (uuid.uuid4(), str(uuid.uuid4()), "not-a-uuid", "", "1234", foreign.txn_id, str(foreign.txn_id)):
        with pytest.raises(errors.TxnNotFoundError):
            tw.get_txn(bad)
    # the real id works in every text form
    for good in (mine.txn_id, str(mine.txn_id), mine.txn_id.hex, str(mine.txn_id).upper()):
        assert tw.get_txn(good).txn_id == mine.txn_id
    assert isinstance(mine.txn_id, uuid.UUID)
    assert foreign.status() == pe.TxnStatus.OPEN and mine.status() == pe.TxnStatus.OPEN


def test_context_manager(pe_store):
    make_stream(pe_store, SCOPE, STREAM, 2)
    tw = pe_store.create_transactional_writer(SCOPE, STREAM)
    with tw.begin_txn() as ok:
        ok.write_events([payload("ok", "k", i) for i in range(N)], routing_key="k")
        assert counts(pe_store) == {}
    assert ok.status() == pe.TxnStatus.COMMITTED
    assert counts(pe_store) == {"ok": N}

    class Boom(Exception):
        pass

    with pytest.raises(Boom), tw.begin_txn() as bad:
        bad.write_events([payload("bad", "k", i) for i in range(N)], routing_key="k")
        raise Boom
    assert bad.status() == pe.TxnStatus.ABORTED
    assert counts(pe_store) == {"ok": N}

    with tw.begin_txn() as early:  # ended inside the block: leaving it does nothing
        early.write_event(payload("early", "k", 0), routing_key="k")
        early.abort()
    assert early.status() == pe.TxnStatus.ABORTED
    with pytest.raises(Boom), tw.begin_txn() as done:
        done.write_event(payload("done", "k", 0), routing_key="k")
        done.commit()
        raise Boom  # an exception after the commit cannot undo it
    assert done.status() == pe.TxnStatus.COMMITTED
    assert counts(pe_store) == {"ok": N, "done": 1}


def test_bad_events_keys_and_leases_are_refused_and_stage_nothing(pe_store):
    make_stream(pe_store, SCOPE, STREAM, 2)
    tw = pe_store.create_transactional_writer(SCOPE, STREAM)
    for lease in (0, -1, 0.0, 86400.5, True, "10", float("nan")):
        with pytest.raises(errors.InvalidConfigurationError):
            tw.begin_txn(lease=lease)
    txn = tw.begin_txn(lease=86400)
    with pytest.raises(errors.InvalidConfigurationError):
        txn.ping(lease=0)
    txn.write_event(payload("t", "k", 0), routing_key="k")
    big = b"x" * (pe.MAX_EVENT_SIZE + 1)
    with pytest.raises(errors.EventTooLargeError):
        txn.write_event(big, routing_key="k")
    with pytest.raises(errors.EventTooLargeError):  # all or nothing for write_events too
        txn.write_events([payload("t", "k", 99), big], routing_key="k")
    for key in (5, b"k", "\ud800", "x" * 4097):
        with pytest.raises(errors.InvalidRoutingKeyError):
            txn.write_event(payload("t", "bad", 0), routing_key=key)
    with pytest.raises(errors.SerializationError):
        txn.write_event("a str without a serializer", routing_key="k")
    txn.write_event(payload("t", "k", 1) + b"y" * (pe.MAX_EVENT_SIZE - 20), routing_key="k")
    assert txn.status() == pe.TxnStatus.OPEN
    txn.commit()
    events = slice_events(pe_store, SCOPE, STREAM)
    assert [len(ev.event) for ev in events if ev.routing_key == "k"][1] == len(payload("t", "k", 1)) + pe.MAX_EVENT_SIZE - 20
    assert counts(pe_store) == {"t": 2}


def test_transactional_writer_on_a_byte_stream_and_on_a_closed_writer(pe_store):
    pe_store.create_scope(SCOPE)
    pe_store.create_byte_stream(SCOPE, "bytes")
    with pytest.raises(errors.StreamKindError):
        pe_store.create_transactional_writer(SCOPE, "bytes")
    make_stream(pe_store, SCOPE, STREAM, 1)
    tw = pe_store.create_transactional_writer(SCOPE, STREAM)
    txn = tw.begin_txn()
    txn.write_event(payload("t", "k", 0), routing_key="k")
    tw.close()
    with pytest.raises(errors.WriterClosedError):
        tw.begin_txn()
    with pytest.raises(errors.WriterClosedError):
        tw.get_txn(txn.txn_id)
    with pytest.raises(errors.WriterClosedError):
        txn.write_event(payload("t", "k", 1), routing_key="k")
    txn.flush()
    txn.ping()
    # the transaction itself stays open and can be ended from another writer object
    other = pe_store.create_transactional_writer(SCOPE, STREAM).get_txn(txn.txn_id)
    assert other.status() == pe.TxnStatus.OPEN
    other.commit()
    assert counts(pe_store) == {"t": 1}
