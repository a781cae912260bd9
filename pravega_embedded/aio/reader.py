"""Async readers: the cancel-safe read protocol, and the standalone reader built on it.

Owns: ``ReadPump`` (one blocking read at a time in the waits pool, and who gets its outcome)
and ``AsyncReader`` (``EventStreamReader`` or a client's ``RemoteReader`` for asyncio: reads,
``async for``, position, close). Group readers use the same pump (``readergroup``).

The protocol. A read call takes the reader's asyncio lock (reads are serialized), then either
finds the outcome of an earlier read still unclaimed (the *in-flight read*) or starts one:
``read_next_event(t)`` of the sync reader in a waits-pool thread, ``t`` at most ``wait_slice``
seconds, so a pool thread is never parked longer than that. It awaits that read without
cancelling it, and claims its outcome — event, None or error — by taking it out of the pump.

Invariants:
  1. Exactly once, in order: every outcome of a sync read is claimed by exactly one party: the
     read call awaiting it; if that call was cancelled (or timed out) meanwhile, the next read
     call; or ``close()``. No second sync read starts while an outcome is unclaimed, so events
     keep the sync reader's order. An error (e.g. TruncatedDataError, raised once by the sync
     reader) is claimed like an event: it is raised to the call that claims it.
  2. ``read_next_event(timeout)`` has the sync semantics: None after ``timeout`` without an
     event, at once at the end (end cut, sealed stream read), and None never otherwise when
     ``timeout`` is None; ``async for`` ends where the sync iterator ends.
  3. ``close()`` is idempotent and never hangs: it withdraws an in-flight read not yet started;
     a standalone reader's running read is woken at once (the sync ``close()`` from another
     thread); a group reader's is given at most ``wait_slice`` (plus a grace) to end by itself
     before it is woken, so that an event it obtained and no read call took goes back to the
     group (``close_before``: another reader reads it). A standalone reader drops such an
     event (logged at DEBUG): it has no one to give it to.
  4. ``position()`` is the cut (or Position) just after the last event a read call returned:
     an unclaimed event is excluded (``position_before``). Exact between reads; taken while
     another task's read is in flight, it may already count an event that read is about to
     return (as the sync API across threads).

Thread-safety: use an async reader from one event loop; several tasks may call it (reads are
serialized). The sync reader is used by one pool thread at a time (its own rule), except
``close()``, which the sync API allows from any thread.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Callable, Generator, Generic, Mapping, NamedTuple, TypeVar, Union

from ..errors import ReaderClosedError
from .handle import retrieve
from .threads import LOG, Runner

if TYPE_CHECKING:
    from ..events import EventRead
    from ..reader import EventStreamReader
    from ..readergroup import GroupReader
    from ..remote import RemoteReader
    from ..remote.handles import RemoteGroupReader
    from ..streamcut import StreamCut
    from ..watermarks import TimeWindow

__all__ = ["AsyncReader", "ReadPump", "CLOSE_GRACE"]

CLOSE_GRACE = 2.0  # seconds a close waits past wait_slice for a running read before waking it

SyncReader = Union["EventStreamReader", "RemoteReader"]
R = TypeVar("R", bound=Union["EventStreamReader", "RemoteReader", "GroupReader", "RemoteGroupReader"])


class _Read(NamedTuple):
    """An in-flight sync read: the pool's future and the loop's view of it."""

    cf: "concurrent.futures.Future[EventRead | None]"
    fut: "asyncio.Future[EventRead | None]"


def check_timeout(timeout: float | None) -> None:
    """A plain TypeError for a timeout that is not a number, as the sync readers raise."""
    if timeout is not None and (isinstance(timeout, bool) or not isinstance(timeout, (int, float))):
        raise TypeError(f"timeout must be a number of seconds or None, not {type(timeout).__name__}")


class ReadPump(Generic[R]):
    """The read protocol of the module docstring, over one sync reader (opened in a thread)."""

    def __init__(self, runner: Runner, opener: Callable[[], R], what: str, wait_slice: float,
                 ended: Callable[[R], bool], *, wake_on_close: bool) -> None:
        self.runner = runner
        self._wake_on_close = wake_on_close
        self.what = what
        self._slice = wait_slice
        self._ended = ended
        self._open_cf = runner.submit(runner.work, opener)
        self._opened: asyncio.Future[R] = asyncio.wrap_future(self._open_cf)
        self._opened.add_done_callback(retrieve)  # type: ignore[arg-type]
        self._lock = asyncio.Lock()
        self._inflight: _Read | None = None
        self.closing = False
        self._close_task: asyncio.Future[None] | None = None

    async def reader(self) -> R:
        """The sync reader, once open (raises the open's error)."""
        return await asyncio.shield(self._opened)

    def closed_error(self) -> Exception:
        return ReaderClosedError(f"{self.what} is closed")

    async def read(self, timeout: float | None) -> "EventRead | None":
        """One read with the sync semantics (invariants 1 and 2)."""
        check_timeout(timeout)
        r = await self.reader()
        async with self._lock:
            loop = asyncio.get_running_loop()
            deadline = None if timeout is None else loop.time() + max(0.0, float(timeout))
            while True:
                pending = self._inflight
                mine = pending is None
                if pending is None:
                    if self.closing:
                        raise self.closed_error()
                    t = self._slice if deadline is None else min(self._slice, max(0.0, deadline - loop.time()))
                    pending = self._inflight = self._start(r, t)
                if not pending.fut.done():
                    # a read this call started bounds itself (t); an earlier call's may not
                    remaining = None if mine or deadline is None else max(0.0, deadline - loop.time())
                    await asyncio.wait((pending.fut,), timeout=remaining)
                    if not pending.fut.done():
                        return None  # the deadline passed; the read stays for the next call
                ev = self._claim(pending)
                if ev is not None or self._ended(r):
                    return ev
                if deadline is not None and loop.time() >= deadline:
                    return None

    def _start(self, r: R, t: float) -> _Read:
        cf = self.runner.submit(self.runner.waits, r.read_next_event, t)
        fut = asyncio.wrap_future(cf)
        fut.add_done_callback(retrieve)  # type: ignore[arg-type]
        return _Read(cf, fut)

    def _claim(self, pending: _Read) -> "EventRead | None":
        if self._inflight is not pending:  # close() claimed it (invariant 1)
            raise self.closed_error()
        self._inflight = None
        return pending.fut.result()

    def unclaimed(self) -> "EventRead | None":
        """The event a finished read obtained that no read call took yet (None if none)."""
        pending = self._inflight
        if pending is None or not pending.fut.done() or pending.fut.cancelled():
            return None
        if pending.fut.exception() is not None:
            return None
        return pending.fut.result()

    async def close(self, close_sync: Callable[[R, "EventRead | None"], None]) -> None:
        """Invariant 3; ``close_sync(reader, unclaimed event)`` closes the sync reader."""
        if self._close_task is None:
            self.closing = True
            self._close_task = asyncio.ensure_future(self._close(close_sync))
        await asyncio.shield(self._close_task)

    async def _close(self, close_sync: Callable[[R, "EventRead | None"], None]) -> None:
        self._open_cf.cancel()
        try:
            r = await asyncio.shield(self._opened)
        except BaseException:  # noqa: BLE001 - never opened: nothing to close (its caller saw why)
            return
        if self.runner.closed:
            return  # the store's close closed every sync reader (and stopped the threads)
        pending = self._inflight
        if pending is not None and not pending.cf.cancel():
            if not self._wake_on_close:  # let it end by itself: its event can still go back
                await asyncio.wait((pending.fut,), timeout=self._slice + CLOSE_GRACE)
            if not pending.fut.done():  # closing wakes it
                await self.runner.run(r.close, what=f"closing {self.what}")
                await asyncio.wait((pending.fut,))
        held = None
        if pending is not None and self._inflight is pending:
            held = self.unclaimed()
            self._inflight = None
        await self.runner.run(close_sync, r, held, what=f"closing {self.what}")

    @property
    def closed(self) -> bool:
        return self._close_task is not None and self._close_task.done()


def _close_standalone(r: SyncReader, held: "EventRead | None") -> None:
    if held is not None:
        LOG.debug("closing a reader of %s/%s: an event a cancelled read obtained (segment %d "
                  "offset %d) was not taken by a later read", r.scope, r.stream, held.segment_id,
                  held.offset)
    r.close()


class AsyncReader:
    """A standalone reader of one stream for asyncio. Get it with ``store.create_reader(...)``
    (opens in the background; ``await`` it to open it at once and see errors there).

    ``await read_next_event(timeout)`` and ``async for ev in reader`` behave as the sync
    reader's (the iteration ends at the end cut or when a sealed stream is read); reads never
    block the event loop and are cancel-safe (module invariant 1).
    """

    def __init__(self, runner: Runner, opener: Callable[[], SyncReader], what: str,
                 wait_slice: float, on_close: Callable[["AsyncReader"], None]) -> None:
        self._pump: ReadPump[SyncReader] = ReadPump(runner, opener, what, wait_slice,
                                                         lambda r: r.at_end, wake_on_close=True)
        self._on_close = on_close

    def __await__(self) -> Generator[object, None, "AsyncReader"]:
        return self._wait_open().__await__()

    async def _wait_open(self) -> "AsyncReader":
        await self._pump.reader()
        return self

    async def read_next_event(self, timeout: float | None = None) -> "EventRead | None":
        """The next event, or None when ``timeout`` seconds pass without one or the end is
        reached (timeout=None: wait without limit)."""
        return await self._pump.read(timeout)

    def __aiter__(self) -> "AsyncReader":
        return self

    async def __anext__(self) -> "EventRead":
        ev = await self._pump.read(None)
        if ev is None:  # only at the end (invariant 2)
            raise StopAsyncIteration
        return ev

    @property
    def at_end(self) -> bool:
        """True once a read returned None because everything up to the end was read."""
        opened = self._pump._opened
        if not opened.done() or opened.cancelled() or opened.exception() is not None:
            return False
        return self._pump.unclaimed() is None and opened.result().at_end

    async def position(self) -> "StreamCut":
        """The StreamCut just after the last event a read returned (module invariant 4)."""
        r = await self._pump.reader()
        ev = self._pump.unclaimed()
        if ev is None:
            return await self._pump.runner.run(r.position)
        before: Mapping[int, int] = {ev.segment_id: ev.offset}
        return await self._pump.runner.run(r.position_before, before)

    async def get_current_time_window(self) -> "TimeWindow":
        """The event-time window at this reader's position (docs/event-time.md)."""
        r = await self._pump.reader()
        return await self._pump.runner.run(r.get_current_time_window)

    async def close(self) -> None:
        """Close (module invariant 3). Idempotent; a read in another task raises
        ReaderClosedError."""
        try:
            await self._pump.close(_close_standalone)
        finally:
            self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._pump.closing

    async def __aenter__(self) -> "AsyncReader":
        return await self._wait_open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncReader {self._pump.what}{' closed' if self._pump.closing else ''}>"
