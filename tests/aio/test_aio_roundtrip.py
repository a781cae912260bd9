"""The async façade end to end: written events read back exactly once, in order, over the
owner, a unix-socket client and a TCP client; errors are the sync API's; closing."""

from __future__ import annotations

import asyncio

import pytest

import pravega_embedded as pe
from pravega_embedded import errors

from aio_helpers import setup_stream

KEYS = [f"sensor-{i}" for i in range(5)]


@pytest.mark.asyncio
async def test_events_read_back_exactly_once_in_per_key_order(ahandle):
    store = ahandle
    await setup_stream(store)
    w = await store.create_writer("iot", "sensors", writer_id="gw-1")
    expected: dict[str, list[bytes]] = {k: [] for k in KEYS}
    for i in range(300):
        key = KEYS[i % len(KEYS)]
        ev = f"{key}:{i}".encode()
        assert await w.write_event(ev, routing_key=key) == len(sum(expected.values(), []))
        expected[key].append(ev)
    batch = [f"batch:{i}".encode() for i in range(50)]
    last = await w.write_events(batch, routing_key=KEYS[0])
    expected[KEYS[0]].extend(batch)
    assert last == 349 and w.last_sequence == 349
    assert await w.flush() == 349
    assert await w.durable_sequence() == 349
    await w.close()
    await w.close()  # idempotent
    await store.seal_stream("iot", "sensors")

    got: dict[str, list[bytes]] = {k: [] for k in KEYS}
    reader = store.create_reader("iot", "sensors")
    async for ev in reader:  # ends: the stream is sealed and read
        got[ev.routing_key].append(ev.event)
    assert got == expected
    assert reader.at_end
    assert await reader.read_next_event(timeout=0) is None
    info = await store.stream_info("iot", "sensors")
    assert await reader.position() == info.tail
    await reader.close()
    with pytest.raises(errors.ReaderClosedError):
        await reader.read_next_event(timeout=0)


@pytest.mark.asyncio
async def test_bounded_reader_ends_at_its_end_cut_and_timeout_returns_none(ahandle):
    store = ahandle
    await setup_stream(store, segments=2)
    start = (await store.stream_info("iot", "sensors")).tail
    async with store.create_writer("iot", "sensors") as w:
        await w.write_events([b"a", b"b", b"c"], routing_key="k")
    end = (await store.stream_info("iot", "sensors")).tail
    async with store.create_writer("iot", "sensors") as w:
        await w.write_event(b"after the end", routing_key="k")

    bounded = store.create_reader("iot", "sensors", start=start, end=end)
    assert [ev.event async for ev in bounded] == [b"a", b"b", b"c"]
    await bounded.close()

    tail = await store.create_reader("iot", "sensors", start=end)  # unbounded: follows the tail
    assert (await tail.read_next_event(timeout=5)).event == b"after the end"
    assert await tail.read_next_event(timeout=0.05) is None  # nothing new: None, not the end
    assert not tail.at_end
    await tail.close()


@pytest.mark.asyncio
async def test_a_second_open_async_of_the_same_path_is_a_client_of_the_first(tmp_path):
    path = tmp_path / "store"
    async with pe.open_async(path, durability="none", tier2=False) as owner:
        assert not owner.is_remote and isinstance(owner.sync, pe.Store)
        await setup_stream(owner)
        async with owner.create_writer("iot", "sensors") as w:
            await w.write_events([b"1", b"2"], routing_key="k")
        async with pe.open_async(path) as client:
            assert client.is_remote and isinstance(client.sync, pe.RemoteStore)
            assert await client.list_streams("iot") == ["sensors"]
            async with client.create_writer("iot", "sensors") as w:
                await w.write_event(b"3", routing_key="k")
            await client.seal_stream("iot", "sensors")
            assert [ev.event async for ev in client.create_reader("iot", "sensors")] == [b"1", b"2", b"3"]
        assert [ev.event async for ev in owner.create_reader("iot", "sensors")] == [b"1", b"2", b"3"]


@pytest.mark.asyncio
async def test_errors_are_the_sync_apis(ahandle):
    store = ahandle
    with pytest.raises(errors.ScopeNotFoundError):
        await store.stream_info("nope", "missing")
    await store.create_scope("iot")
    with pytest.raises(errors.ScopeExistsError):
        await store.create_scope("iot")
    with pytest.raises(errors.InvalidNameError):
        await store.create_scope("_private")
    with pytest.raises(errors.StreamNotFoundError):
        await store.create_writer("iot", "missing")  # awaiting opens it: the error comes here
    lazy = store.create_writer("iot", "missing")  # not awaited: the first call raises it
    with pytest.raises(errors.StreamNotFoundError):
        await lazy.write_event(b"x")
    with pytest.raises(errors.StreamNotFoundError):
        async for _ in store.create_reader("iot", "missing"):
            pass
    await setup_stream(store)
    w = await store.create_writer("iot", "sensors")
    with pytest.raises(errors.SerializationError):
        await w.write_event("not bytes")  # type: ignore[arg-type]
    assert await w.write_event(b"still fine") == 0  # the writer goes on after a refused event


@pytest.mark.asyncio
async def test_close_is_idempotent_and_later_calls_raise_store_closed(tmp_path):
    store = await pe.open_async(tmp_path / "store", durability="none", tier2=False)
    await setup_stream(store)
    w = store.create_writer("iot", "sensors")
    await w.write_event(b"kept", routing_key="k")  # not flushed: the close flushes it
    await asyncio.gather(store.close(), store.close())
    await store.close()
    assert store.closed and w.closed
    with pytest.raises(errors.StoreClosedError):
        await store.list_scopes()
    with pytest.raises(errors.StoreClosedError):
        store.create_writer("iot", "sensors")
    with pytest.raises(errors.StoreClosedError):
        await store
    async with pe.open_async(tmp_path / "store", durability="none", tier2=False) as again:
        sl = await again.read_slice("iot", "sensors")
        assert [ev.event async for ev in sl] == [b"kept"]


@pytest.mark.asyncio
async def test_a_failed_open_raises_the_sync_error(tmp_path):
    bad = pe.open_async(tmp_path / "store", durability="sometimes")
    with pytest.raises(errors.InvalidConfigurationError):
        await bad
    with pytest.raises(errors.StoreClosedError):
        await bad.list_scopes()
    await bad.close()  # idempotent, nothing to close
    with pytest.raises(errors.InvalidConfigurationError):
        pe.open_async(tmp_path / "store", wait_slice=0)
