"""The threads of the asyncio façade: where blocking calls of the sync API run.

Owns: ``Runner`` (an async store's two thread pools: *work* for writes, flushes, admin calls,
slices and closes; *waits* for reads that may wait at a stream's tail), ``Lane`` (calls of one
handle run one at a time, in the order they were made) and ``deliver`` (a result handed back
to the event loop from a worker thread).

Invariants:
  1. The event loop never runs a call that may block on the disk, an fsync, a lock held by a
     writer or a socket: it awaits a future that a pool thread completes.
  2. A call handed to a ``Lane`` runs exactly once, in submission order, whether or not the
     task awaiting it is still waiting: cancelling the awaiting task cancels the wait, never
     the call. A failure nobody awaits any more is logged (``pravega_embedded.aio``), never
     dropped silently.
  3. ``Runner.run`` withdraws a call whose task is cancelled before a thread took it (it never
     runs); a call already running completes, and its failure is logged (invariant 2).
  4. Reads and other waits never occupy the work pool, so writers and admin calls are never
     queued behind readers waiting at the tail (and a reader waiting for an event never waits
     for a write stuck behind it).

Thread-safety: ``Runner`` and ``Lane`` are used from one event loop; their pool threads hand
results back with ``loop.call_soon_threadsafe``. A lane's queue is guarded by its own lock.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import logging
import os
import threading
from collections import deque
from typing import Callable, TypeVar

from ..errors import StoreClosedError

__all__ = ["Runner", "Lane", "LOG", "deliver"]

LOG = logging.getLogger("pravega_embedded.aio")

T = TypeVar("T")


def _default_work_threads() -> int:
    return min(32, (os.cpu_count() or 1) + 4)


def _settle(fut: "asyncio.Future[T]", ok: bool, value: object, what: str) -> None:
    """On the loop: complete ``fut`` unless its awaiting task went away (then log a failure)."""
    if fut.done():  # cancelled: the caller stopped waiting; the call ran all the same
        if not ok:
            LOG.warning("%s failed after its caller stopped waiting: %r", what, value,
                        exc_info=value if isinstance(value, BaseException) else None)
        return
    if ok:
        fut.set_result(value)  # type: ignore[arg-type]
    else:
        fut.set_exception(value)  # type: ignore[arg-type]


def deliver(loop: asyncio.AbstractEventLoop, fut: "asyncio.Future[T]", ok: bool, value: object,
            what: str) -> None:
    """From a worker thread: settle ``fut`` on its loop (log if the loop is gone)."""
    try:
        loop.call_soon_threadsafe(_settle, fut, ok, value, what)
    except RuntimeError:  # the loop was closed: nobody can be told
        if not ok:
            LOG.warning("%s failed after its event loop closed: %r", what, value,
                        exc_info=value if isinstance(value, BaseException) else None)


def _log_orphan(what: str) -> Callable[["concurrent.futures.Future[object]"], None]:
    def done(cf: "concurrent.futures.Future[object]") -> None:
        if not cf.cancelled() and cf.exception() is not None:
            LOG.warning("%s failed after its caller stopped waiting: %r", what, cf.exception(),
                        exc_info=cf.exception())
    return done


class Runner:
    """The thread pools of one async store (invariants 1, 3 and 4)."""

    def __init__(self, path: str, work_threads: int | None, wait_threads: int) -> None:
        self.path = path
        self.work = concurrent.futures.ThreadPoolExecutor(
            work_threads or _default_work_threads(), thread_name_prefix="pe-aio-work")
        self.waits = concurrent.futures.ThreadPoolExecutor(wait_threads, thread_name_prefix="pe-aio-wait")
        self.closed = False

    def submit(self, pool: concurrent.futures.ThreadPoolExecutor, fn: Callable[..., T],
               *args: object) -> "concurrent.futures.Future[T]":
        """``pool.submit``, StoreClosedError once the pools are shut down."""
        try:
            return pool.submit(fn, *args)
        except RuntimeError:  # "cannot schedule new futures after shutdown"
            raise StoreClosedError(f"store {self.path} is closed") from None

    async def run(self, fn: Callable[..., T], *args: object, what: str = "a call",
                  wait: bool = False) -> T:
        """``fn(*args)`` in the work pool (the waits pool with ``wait``), awaited (invariant 3)."""
        cf = self.submit(self.waits if wait else self.work, fn, *args)
        try:
            return await asyncio.wrap_future(cf)
        except asyncio.CancelledError:
            if not cf.cancelled():
                cf.add_done_callback(_log_orphan(what))  # type: ignore[arg-type]
            raise

    def shutdown(self) -> None:
        """Stop taking calls and let the threads end (blocks until they have: run it in a
        thread of its own)."""
        self.closed = True
        self.work.shutdown(wait=True, cancel_futures=False)
        self.waits.shutdown(wait=True, cancel_futures=True)


class Lane:
    """Calls of one handle, one at a time, in order, in the runner's work pool (invariant 2).

    ``submit`` queues the call at once (synchronously, before the caller's first await), so
    the order of calls is the order in which the coroutines that made them started.
    """

    def __init__(self, runner: Runner, what: str) -> None:
        self._runner = runner
        self.what = what
        self._ops: deque[tuple[Callable[..., object], tuple[object, ...], asyncio.Future[object],
                               asyncio.AbstractEventLoop, str]] = deque()
        self._lock = threading.Lock()
        self._pumping = False

    def submit(self, fn: Callable[..., T], *args: object, what: str = "") -> "asyncio.Future[T]":
        """Queue ``fn(*args)``; its future (await it; cancelling the wait leaves the call)."""
        loop = asyncio.get_running_loop()
        fut: asyncio.Future[T] = loop.create_future()
        with self._lock:
            self._ops.append((fn, args, fut, loop, what or self.what))  # type: ignore[arg-type]
            start = not self._pumping
            self._pumping = True
        if start:
            try:
                self._runner.submit(self._runner.work, self._pump)
            except StoreClosedError:
                with self._lock:
                    self._pumping = False
                    ops = list(self._ops)
                    self._ops.clear()
                for _fn, _args, f, lp, w in ops:
                    deliver(lp, f, False, StoreClosedError(f"store {self._runner.path} is closed"), w)
        return fut

    def _pump(self) -> None:
        """A pool thread: run the queued calls until none is left."""
        while True:
            with self._lock:
                if not self._ops:
                    self._pumping = False
                    return
                fn, args, fut, loop, what = self._ops.popleft()
            try:
                value = fn(*args)
            except BaseException as exc:  # noqa: BLE001 - handed to the awaiting task (or logged)
                deliver(loop, fut, False, exc, what)
            else:
                deliver(loop, fut, True, value, what)

    async def drain(self) -> None:
        """Wait until every call queued before this one has run (cancelling the wait leaves
        them running)."""
        await asyncio.shield(self.submit(lambda: None))
