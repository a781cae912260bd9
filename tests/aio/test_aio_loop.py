"""Blocking calls never run on the event loop: each call under test waits, in its thread,
for the loop to tick — so it completes only if the loop kept running meanwhile (no timing)."""

from __future__ import annotations

import asyncio

import pytest

import pravega_embedded as pe

from aio_helpers import Ticker, blocking, needs_ticks, setup_stream


class SlowSerializer(pe.BytesSerializer):
    """Serializes and deserializes only once the loop has ticked (see ``needs_ticks``)."""

    def __init__(self, ticker: Ticker) -> None:
        self.ticker = ticker
        self.ready = None

    def serialize(self, value):
        assert self.ready is not None and self.ready.wait(30), "the loop was blocked"
        return super().serialize(value)

    def deserialize(self, data):
        assert self.ready is not None and self.ready.wait(30), "the loop was blocked"
        return super().deserialize(data)


@pytest.mark.asyncio
async def test_writes_flushes_reads_and_slices_run_off_the_loop(ahandle):
    store = ahandle
    await setup_stream(store)
    with Ticker() as ticker:
        ser = SlowSerializer(ticker)
        w = await store.create_writer("iot", "sensors", serializer=ser)
        ser.ready = needs_ticks(ticker)
        assert await w.write_event(b"e0", routing_key="k") == 0  # serialize() ran in a thread
        sync = w.sync
        sync.flush = blocking(sync.flush, ticker)  # the next flush waits for the loop
        assert await w.flush() == 0
        reader = await store.create_reader("iot", "sensors", serializer=ser)
        ser.ready = needs_ticks(ticker)
        ev = await reader.read_next_event(timeout=10)  # deserialize() ran in a thread
        assert ev is not None and ev.event == b"e0"
        sl = await store.read_slice("iot", "sensors")
        sl.sync.to_arrow = blocking(sl.sync.to_arrow, ticker)
        assert (await sl.to_arrow()).column("event").to_pylist() == [b"e0"]
        await reader.close()
        await w.close()


@pytest.mark.asyncio
async def test_a_large_durable_flush_leaves_the_loop_running(tmp_path):
    """fsync durability, 16 MiB in one flush: the ticker's count moves while it runs."""
    async with pe.open_async(tmp_path / "store", tier2=False) as store:  # durability="fsync"
        await setup_stream(store)
        w = await store.create_writer("iot", "sensors", batch_bytes=64 << 20, linger=60)
        payload = b"x" * 4096
        for i in range(0, 4096, 256):
            await w.write_events([payload] * 256, routing_key=f"k{i % 7}")
        with Ticker() as ticker:
            sync = w.sync
            sync.flush = blocking(sync.flush, ticker)
            flushing = asyncio.ensure_future(w.flush())
            before = ticker.ticks
            assert await flushing == 4095
            assert ticker.ticks > before
        await w.close()
