"""Reader groups, checkpoints, transactions and slices through the async façade."""

from __future__ import annotations

import asyncio

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

from aio_helpers import setup_stream


async def write(store, n: int, keys: int = 8) -> list[bytes]:
    async with store.create_writer("iot", "sensors") as w:
        evs = [f"k{i % keys}:{i}".encode() for i in range(n)]
        for ev in evs:
            await w.write_event(ev, routing_key=ev.split(b":")[0].decode())
    return evs


@pytest.mark.asyncio
async def test_two_group_readers_read_every_event_once_and_end_at_read_completed(ahandle):
    store = ahandle
    await setup_stream(store, segments=4)
    written = await write(store, 400)
    await store.seal_stream("iot", "sensors")  # the group's read completes at the end
    group = await store.create_reader_group("dashboard", [("iot", "sensors")])
    assert await store.list_reader_groups() == ["dashboard"]
    r1, r2 = await group.create_reader("r1"), await group.create_reader("r2")
    with pytest.raises(errors.ReaderExistsError if not store.is_remote else errors.PravegaEmbeddedError):
        await group.create_reader("r1")

    async def drain(r) -> list[bytes]:
        return [ev.event async for ev in r if not ev.is_checkpoint]

    a, b = await asyncio.wait_for(asyncio.gather(drain(r1), drain(r2)), timeout=120)
    assert sorted(a + b) == sorted(written)  # each event exactly once in the group
    for part in (a, b):  # per key, each reader's share comes in write order
        for k in range(8):
            mine = [int(e.split(b":")[1]) for e in part if e.startswith(b"k%d:" % k)]
            assert mine == sorted(mine)
    await r1.close()
    await r2.close()
    await store.delete_reader_group("dashboard")
    assert await store.list_reader_groups() == []


@pytest.mark.asyncio
async def test_a_checkpoint_is_awaited_while_a_reader_task_reads(ahandle):
    store = ahandle
    await setup_stream(store, segments=2)
    await write(store, 50)
    group = await store.create_reader_group("g", [("iot", "sensors")])
    reader = await group.create_reader("r1")
    seen: list[bytes] = []
    markers: list[str] = []

    async def consume() -> None:
        while True:
            ev = await reader.read_next_event(timeout=0.05)
            if ev is None:
                continue
            if ev.is_checkpoint:
                markers.append(ev.checkpoint_name)
            else:
                seen.append(ev.event)

    task = asyncio.ensure_future(consume())
    cp = await group.initiate_checkpoint("cp-1")
    checkpoint = await cp.result(timeout=60)
    assert await cp.done()
    assert markers == ["cp-1"] and checkpoint.name == "cp-1"
    cut = checkpoint.stream_cuts[("iot", "sensors")]
    await asyncio.sleep(0)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await reader.close()
    # the checkpoint's cut is exactly after the events read before the marker
    sl = await store.read_slice("iot", "sensors", end=cut)
    before = [ev.event async for ev in sl]
    assert set(before) <= set(seen) and len(before) <= len(seen)
    assert (await group.last_checkpoint()).name == "cp-1"
    await group.close()


@pytest.mark.asyncio
async def test_transactions_commit_abort_and_async_with(ahandle):
    store = ahandle
    await setup_stream(store)
    start = (await store.stream_info("iot", "sensors")).tail
    async with store.create_transactional_writer("iot", "sensors") as tw:
        txn = await tw.begin_txn()
        await txn.write_events([b"a1", b"a2"], routing_key="k")
        await txn.flush()
        tail = (await store.stream_info("iot", "sensors")).tail
        assert await store.read_slice("iot", "sensors", start=start, end=tail) is not None
        assert [ev async for ev in await store.read_slice("iot", "sensors", start=start)] == []
        await txn.commit()
        assert await txn.status() == pe.TxnStatus.COMMITTED

        dropped = await tw.begin_txn()
        await dropped.write_event(b"never", routing_key="k")
        await dropped.abort()
        assert await dropped.status() == pe.TxnStatus.ABORTED

        async with await tw.begin_txn() as ok:
            await ok.write_event(b"b1", routing_key="k")
        assert await ok.status() == pe.TxnStatus.COMMITTED

        with pytest.raises(RuntimeError, match="boom"):
            async with await tw.begin_txn() as bad:
                await bad.write_event(b"boom", routing_key="k")
                raise RuntimeError("boom")
        assert await bad.status() == pe.TxnStatus.ABORTED

        t1, t2 = await tw.begin_txn(), await tw.begin_txn()
        await t1.write_event(b"c1", routing_key="k")
        await t2.write_event(b"c2", routing_key="k")
        assert await tw.commit_transactions([t1, t2], mark=1) is True
        assert await tw.last_mark() == 1
        with pytest.raises(errors.TxnFailedError):
            await t1.commit()
    got = [ev.event async for ev in await store.read_slice("iot", "sensors", start=start)]
    assert got == [b"a1", b"a2", b"b1", b"c1", b"c2"]


@pytest.mark.asyncio
async def test_slices_to_arrow_pandas_iteration_and_batches(ahandle):
    store = ahandle
    await setup_stream(store, segments=2)
    written = await write(store, 3000, keys=3)
    async with await store.read_slice("iot", "sensors") as sl:
        assert sl.nbytes > 0 and len(sl.ranges) == 2
        table = await sl.to_arrow()
        assert sorted(table.column("event").to_pylist()) == sorted(written)
        frame = await sl.to_pandas()
        assert len(frame) == 3000
        events = [ev.event async for ev in sl]  # more than one chunk of 1024
        assert sorted(events) == sorted(written) and len(events) == 3000
        rows = 0
        async for batch in sl.arrow_batches():
            rows += batch.num_rows
        assert rows == 3000
    ranges = await store.get_segments("iot", "sensors")
    parts = [await store.read_segment_range(r) for r in ranges]
    assert sum([(await p.to_arrow()).num_rows for p in parts]) == 3000
