"""Cancel-safety: a cancelled read's event goes to the next read (exactly once, in order); a
cancelled write is written exactly once; a cancelled flush or commit goes on; closing with
reads in flight neither hangs nor loses a group's event."""

from __future__ import annotations

import asyncio
import random

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

from aio_helpers import setup_stream


async def until(cond, what: str, limit: float = 30.0) -> None:
    """Wait (yielding to the loop) until ``cond()``; fail after ``limit`` seconds."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + limit
    while not cond():
        assert loop.time() < deadline, f"timed out waiting until {what}"
        await asyncio.sleep(0.001)


def read_in_flight(reader) -> bool:
    """The reader's blocking read is running in a worker thread."""
    pending = reader._pump._inflight
    return pending is not None and pending.cf.running()


@pytest.mark.asyncio
async def test_an_event_a_cancelled_read_obtained_goes_to_the_next_read(tmp_path):
    # a long wait slice: the cancelled read is still waiting in its thread when the event comes
    async with pe.open_async(tmp_path / "s", durability="none", tier2=False, wait_slice=30) as store:
        await setup_stream(store, segments=1)
        reader = await store.create_reader("iot", "sensors")
        w = await store.create_writer("iot", "sensors")
        task = asyncio.ensure_future(reader.read_next_event())
        await until(lambda: read_in_flight(reader), "the read waits in its thread")
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        await w.write_event(b"first", routing_key="k")
        await w.flush()
        await until(lambda: reader._pump.unclaimed() is not None, "the cancelled read got the event")
        assert await reader.position() == (await store.stream_info("iot", "sensors")).head
        ev = await reader.read_next_event(timeout=0)
        assert ev is not None and ev.event == b"first"
        assert await reader.read_next_event(timeout=0.05) is None  # handed out once only
        await w.write_events([b"second", b"third"], routing_key="k")
        await w.flush()
        assert [(await reader.read_next_event(timeout=10)).event for _ in range(2)] == [b"second", b"third"]


@pytest.mark.asyncio
async def test_reads_cancelled_at_random_moments_lose_and_repeat_nothing(ahandle):
    store = ahandle
    await setup_stream(store, segments=2)
    n = 400
    rng = random.Random(7)

    async def produce() -> None:
        async with store.create_writer("iot", "sensors") as w:
            for i in range(n):
                await w.write_event(b"%d" % i, routing_key="one-key")
                if i % 13 == 0:
                    await w.flush()
                    await asyncio.sleep(rng.random() / 1000)

    reader = await store.create_reader("iot", "sensors")
    producer = asyncio.ensure_future(produce())
    got: list[bytes] = []
    cancelled = 0

    async def consume() -> None:
        nonlocal cancelled
        while len(got) < n:
            try:  # wait_for cancels the read when its time is up: at random points of it
                ev = await asyncio.wait_for(reader.read_next_event(), timeout=rng.random() / 500)
            except asyncio.TimeoutError:
                cancelled += 1
                continue
            got.append(ev.event)

    await asyncio.wait_for(consume(), timeout=120)  # a lost event would leave it waiting
    await producer
    assert got == [b"%d" % i for i in range(n)]
    assert await reader.read_next_event(timeout=0.05) is None
    assert cancelled > 0
    await reader.close()


@pytest.mark.asyncio
async def test_cancelled_writes_are_written_exactly_once_in_call_order(ahandle):
    store = ahandle
    await setup_stream(store, segments=3)
    w = await store.create_writer("iot", "sensors")
    tasks = [asyncio.ensure_future(w.write_event(b"%d" % i, routing_key="k")) for i in range(100)]
    await asyncio.sleep(0)  # every write has started (queued in the writer's lane)
    for t in tasks[::2]:
        t.cancel()
    never = asyncio.ensure_future(w.write_event(b"never started", routing_key="k"))
    never.cancel()  # cancelled before its coroutine ran: not written
    flush = asyncio.ensure_future(w.flush())
    await asyncio.sleep(0)
    flush.cancel()  # a cancelled flush goes on; the next one covers the same events
    results = await asyncio.gather(*tasks, never, flush, return_exceptions=True)
    assert sum(isinstance(r, asyncio.CancelledError) for r in results) == 52
    assert await w.flush() == 99
    assert w.last_sequence == 99
    await w.close()
    await store.seal_stream("iot", "sensors")
    got = [ev.event async for ev in store.create_reader("iot", "sensors")]
    assert got == [b"%d" % i for i in range(100)]


@pytest.mark.asyncio
async def test_closing_a_reader_with_a_read_in_flight_wakes_it(tmp_path):
    async with pe.open_async(tmp_path / "s", durability="none", tier2=False, wait_slice=30) as store:
        await setup_stream(store)
        reader = await store.create_reader("iot", "sensors")
        task = asyncio.ensure_future(reader.read_next_event())  # waits at the tail
        await until(lambda: read_in_flight(reader), "the read waits in its thread")
        # far less than the 30 s slice: the close woke the read instead of waiting for it
        await asyncio.wait_for(asyncio.gather(reader.close(), reader.close()), timeout=20)
        with pytest.raises(errors.ReaderClosedError):
            await task
        assert reader.closed


@pytest.mark.asyncio
async def test_closing_the_store_with_reads_in_flight_does_not_hang(tmp_path):
    store = await pe.open_async(tmp_path / "s", durability="none", tier2=False, wait_slice=0.2)
    await setup_stream(store)
    reader = await store.create_reader("iot", "sensors")
    group = await store.create_reader_group("g", [("iot", "sensors")])
    member = await group.create_reader("r1")
    reads = [asyncio.ensure_future(reader.read_next_event()),
             asyncio.ensure_future(member.read_next_event())]
    await until(lambda: read_in_flight(reader) and read_in_flight(member), "both reads wait")
    await asyncio.wait_for(store.close(), timeout=20)
    for t in reads:
        with pytest.raises((errors.ReaderClosedError, errors.StoreClosedError)):
            await t


@pytest.mark.asyncio
async def test_a_group_event_a_cancelled_read_obtained_goes_back_to_the_group_at_close(ahandle):
    store = ahandle
    await setup_stream(store, segments=1)
    group = await store.create_reader_group("g", [("iot", "sensors")])
    r1 = await group.create_reader("r1")
    w = await store.create_writer("iot", "sensors")
    await w.write_event(b"e0", routing_key="k")
    await w.flush()
    ev0 = await r1.read_next_event(timeout=10)
    assert ev0.event == b"e0"
    task = asyncio.ensure_future(r1.read_next_event())
    await until(lambda: read_in_flight(r1) or r1._pump.unclaimed() is not None, "r1 reads")
    task.cancel()
    await w.write_event(b"e1", routing_key="k")
    await w.flush()
    await until(lambda: r1._pump.unclaimed() is not None, "r1's cancelled read got e1")
    assert (await r1.position()).as_dict() == {"iot/sensors/0": ev0.next_offset}  # before e1
    await r1.close()  # e1 was never handed out: the group keeps it
    r2 = await group.create_reader("r2")
    ev = await r2.read_next_event(timeout=10)
    assert ev is not None and ev.event == b"e1"
    assert await r2.read_next_event(timeout=0.05) is None
    await r2.close()


@pytest.mark.asyncio
async def test_a_cancelled_commit_still_commits_atomically(ahandle):
    store = ahandle
    await setup_stream(store)
    tw = await store.create_transactional_writer("iot", "sensors")
    txn = await tw.begin_txn()
    for i in range(20):
        await txn.write_event(b"%d" % i, routing_key=f"k{i % 3}")
    commit = asyncio.ensure_future(txn.commit())
    await asyncio.sleep(0)
    commit.cancel()
    with pytest.raises(asyncio.CancelledError):
        await commit
    assert await txn.status() == pe.TxnStatus.COMMITTED  # queued after the commit
    await store.seal_stream("iot", "sensors")
    got = [int(ev.event) async for ev in store.create_reader("iot", "sensors")]
    assert sorted(got) == list(range(20))
