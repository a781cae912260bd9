"""Helpers of the asyncio tests: observe the event loop while a call runs; make a stream."""

from __future__ import annotations

import asyncio
import threading

import pravega_embedded as pe
from pravega_embedded.aio import AsyncStore


class Ticker:
    """A coroutine that counts its turns on the loop: a call that blocked the loop would
    stop it counting."""

    def __init__(self) -> None:
        self.ticks = 0
        self._task: asyncio.Task[None] | None = None

    async def _run(self) -> None:
        while True:
            self.ticks += 1
            await asyncio.sleep(0)

    def __enter__(self) -> "Ticker":
        self._task = asyncio.get_running_loop().create_task(self._run())
        return self

    def __exit__(self, *exc: object) -> None:
        assert self._task is not None
        self._task.cancel()


def needs_ticks(ticker: Ticker, n: int = 20, limit: float = 30.0) -> threading.Event:
    """An event a worker thread waits on: set once the ticker has ticked ``n`` more times
    (by a watcher on the loop). If the loop is blocked by the very call that waits, the
    event is never set and the wait times out: the test fails instead of hanging."""
    start = ticker.ticks
    done = threading.Event()

    async def watch() -> None:
        while ticker.ticks < start + n:
            await asyncio.sleep(0)
        done.set()

    asyncio.get_running_loop().create_task(watch())
    return done


def blocking(fn, ticker: Ticker, n: int = 20):
    """``fn`` that first waits, in the thread that calls it, for the loop to tick ``n`` more
    times (call ``blocking`` on the loop, just before the call under test)."""
    ready = needs_ticks(ticker, n)

    def wrapped(*args, **kwargs):
        if not ready.wait(30):
            raise AssertionError("the event loop did not run while the call was in progress")
        return fn(*args, **kwargs)
    return wrapped


async def setup_stream(store: AsyncStore, scope: str = "iot", stream: str = "sensors",
                       segments: int = 4) -> None:
    await store.create_scope(scope, exist_ok=True)
    await store.create_stream(scope, stream, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(segments)),
                              exist_ok=True)
