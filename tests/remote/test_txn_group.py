"""Transactions committed together (``commit_transactions``), in process, through a client on
the unix socket and over TCP (``handle`` runs each test three ways). What a sink relies on: the
events of every transaction of the group become visible in one step (a reader never sees part
of them), a mark recorded in that step makes a replayed batch commit nothing, and a bad call
changes nothing."""

from __future__ import annotations

import threading
from collections import Counter

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

N = 40  # events per transaction


def _stream(store, segments=3, stream="s"):
    store.create_scope("g", exist_ok=True)
    store.create_stream("g", stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)))


def _txn(tw, tag):
    txn = tw.begin_txn()
    for i in range(N):
        txn.write_event(f"{tag}|{i}".encode(), routing_key=f"k{i % 7}")
    return txn


def _events(store, stream="s"):
    return [ev.event.decode() for ev in store.read_slice("g", stream)]


def _per_tag(events):
    return Counter(e.split("|")[0] for e in events)


def _assert_per_key_order(events):
    last = {}
    for e in events:
        tag, i = e.split("|")
        key = (tag, int(i) % 7)
        assert last.get(key, -1) < int(i), f"{e} out of order"
        last[key] = int(i)


def test_transactions_committed_together_become_visible_in_one_step(handle):
    _stream(handle)
    tw = handle.create_transactional_writer("g", "s", writer_id="sink")
    txns = [_txn(tw, t) for t in "abc"]
    for t in txns:
        t.flush()
    assert _events(handle) == []
    seen = set()
    stop = threading.Event()

    def watch():
        while not stop.is_set():
            seen.add(len(_events(handle)))

    th = threading.Thread(target=watch)
    th.start()
    try:
        assert tw.commit_transactions([txns[0], txns[1].txn_id, str(txns[2].txn_id)]) is True
    finally:
        stop.set()
        th.join()
    assert seen <= {0, 3 * N}, f"a reader saw part of the group: {sorted(seen)}"
    times = handle.read_slice("g", "s").to_arrow(write_time=True).column("write_time").unique()
    assert len(times) == 1, "one MERGE record puts every event of the group in its segments"
    got = _events(handle)
    assert [e.split("|")[0] for e in got if e.endswith("|0")] == ["a", "b", "c"] or \
        len({ev.segment_id for ev in handle.read_slice("g", "s")}) > 1  # the order given, per segment
    assert _per_tag(got) == {"a": N, "b": N, "c": N} and len(set(got)) == 3 * N
    _assert_per_key_order(got)
    assert {t.status() for t in txns} == {pe.TxnStatus.COMMITTED}
    assert tw.last_mark() is None  # no mark asked for


def test_a_mark_makes_a_replayed_batch_commit_nothing(handle):
    _stream(handle)
    tw = handle.create_transactional_writer("g", "s", writer_id="spark-sink-q1")
    assert tw.commit_transactions([_txn(tw, "b0x"), _txn(tw, "b0y")], mark=0) is True
    assert tw.last_mark() == 0
    replay = [_txn(tw, "b0x-again"), _txn(tw, "b0y-again")]
    assert tw.commit_transactions(replay, mark=0) is False  # batch 0 again: a no-op
    assert {t.status() for t in replay} == {pe.TxnStatus.ABORTED}
    assert tw.commit_transactions([_txn(tw, "b1")], mark=1) is True
    other = handle.create_transactional_writer("g", "s", writer_id="spark-sink-q2")
    assert other.last_mark() is None  # marks are per writer id
    assert other.commit_transactions([_txn(other, "q2b0")], mark=0) is True
    assert _per_tag(_events(handle)) == {"b0x": N, "b0y": N, "b1": N, "q2b0": N}
    assert tw.last_mark() == 1 and other.last_mark() == 0


def test_bad_calls_change_nothing(handle):
    _stream(handle)
    _stream(handle, stream="t")
    tw = handle.create_transactional_writer("g", "s", writer_id="w")
    a, b = _txn(tw, "a"), _txn(tw, "b")
    with pytest.raises(errors.InvalidConfigurationError, match="at least one"):
        tw.commit_transactions([])
    for bad in (-1, True, "3", 1.5):
        with pytest.raises(errors.InvalidConfigurationError, match="mark"):
            tw.commit_transactions([a, b], mark=bad)
    foreign = _txn(handle.create_transactional_writer("g", "t"), "f")
    with pytest.raises(errors.TxnNotFoundError):
        tw.commit_transactions([a, foreign.txn_id])
    with pytest.raises(errors.TxnNotFoundError):
        tw.commit_transactions([foreign], mark=7)  # the object, not only its id
    with pytest.raises(errors.InvalidConfigurationError, match="list of transactions"):
        tw.commit_transactions(str(a.txn_id))
    empty = tw.begin_txn()
    with pytest.raises(errors.InvalidConfigurationError, match="no events"):
        tw.commit_transactions([empty], mark=4)  # replay could not restore a mark of nothing
    assert empty.status() == pe.TxnStatus.OPEN
    ended = _txn(tw, "ended")
    ended.abort()
    with pytest.raises(errors.TxnFailedError, match="ABORTED|aborted"):
        tw.commit_transactions([a, b, ended], mark=5)
    assert _events(handle) == [] and tw.last_mark() is None
    assert a.status() == b.status() == pe.TxnStatus.OPEN  # still committable
    assert tw.commit_transactions([a, b], mark=5) is True
    assert _per_tag(_events(handle)) == {"a": N, "b": N}


def test_a_group_staged_before_a_scaling_keeps_per_key_order(handle):
    _stream(handle, segments=2)
    tw = handle.create_transactional_writer("g", "s", writer_id="w")
    txns = [_txn(tw, t) for t in "xy"]
    for t in txns:
        t.flush()
    rng = handle.stream_info("g", "s").segments[0]  # split it after the staging
    mid = (rng.key_low + rng.key_high) / 2
    handle.scale_stream("g", "s", seal=[rng.segment_id], new_ranges=[(rng.key_low, mid), (mid, rng.key_high)])
    for i, t in enumerate(txns):  # more events of key k0 (i % 7 == 0), now routed anew
        t.write_events([f"{'xy'[i]}|{j}".encode() for j in (N + 2, N + 9)], routing_key="k0")
    assert tw.commit_transactions(txns, mark=9) is True
    got = _events(handle)
    assert _per_tag(got) == {"x": N + 2, "y": N + 2} and len(set(got)) == len(got)
    _assert_per_key_order(got)
