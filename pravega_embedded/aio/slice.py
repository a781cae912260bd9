"""Async slices: ``Slice`` (or a client's ``RemoteSlice``) read without blocking the loop.

Owns: ``AsyncSlice`` (a snapshot between two cuts: ``await to_arrow()``, ``await
to_pandas()``, ``async for ev in slice``, ``async for batch in slice.arrow_batches()``) and
``_Chunks`` (an async iterator over a sync iterator, advanced a chunk at a time in a thread).

Invariants:
  1. Every read of the slice's data runs in the work pool; the loop only hands chunks out.
  2. An async iteration advances its sync iterator in one thread at a time, ``CHUNK`` items
     per hop; a chunk fetched for a call that was cancelled is kept for the next call, so a
     cancelled ``__anext__`` loses nothing and repeats nothing.
  3. Each ``async for`` is a new iteration from the slice's start (as the sync slice); a
     client's slice (``RemoteSlice``) is read through the store's connection, so iterate one
     of its iterations at a time.

Thread-safety: use from one event loop; separate iterations of an in-process slice may run at
once (each has its own sync iterator).
"""

from __future__ import annotations

import asyncio
import itertools
from collections import deque
from typing import TYPE_CHECKING, Callable, Generic, Iterator, TypeVar, Union

from .handle import retrieve
from .threads import Runner

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from ..events import EventRead
    from ..reader import Slice
    from ..remote.handles import RemoteSlice

__all__ = ["AsyncSlice", "CHUNK"]

CHUNK = 1024  # events (or record batches: at most a few) fetched per thread hop
SyncSlice = Union["Slice", "RemoteSlice"]
T = TypeVar("T")


class _Chunks(Generic[T]):
    """An async iterator over ``make()``'s sync iterator (invariant 2)."""

    def __init__(self, runner: Runner, make: Callable[[], Iterator[T]], per_hop: int) -> None:
        self._runner = runner
        self._make = make
        self._per_hop = per_hop
        self._it: Iterator[T] | None = None
        self._buf: deque[T] = deque()
        self._pending: asyncio.Future[list[T]] | None = None
        self._done = False

    def _next_chunk(self) -> list[T]:
        if self._it is None:
            self._it = self._make()
        return list(itertools.islice(self._it, self._per_hop))

    def __aiter__(self) -> "_Chunks[T]":
        return self

    async def __anext__(self) -> T:
        while not self._buf:
            if self._done:
                raise StopAsyncIteration
            if self._pending is None:
                self._pending = asyncio.ensure_future(self._runner.run(self._next_chunk, what="a slice read"))
                self._pending.add_done_callback(retrieve)
            chunk = await asyncio.shield(self._pending)  # cancelled: the chunk waits for the next call
            self._pending = None
            if not chunk:
                self._done = True
            self._buf.extend(chunk)
        return self._buf.popleft()


class AsyncSlice:
    """The events of one stream between two cuts (``await store.read_slice(...)``)."""

    def __init__(self, runner: Runner, sl: SyncSlice) -> None:
        self._runner = runner
        self._slice = sl

    @property
    def ranges(self) -> list[tuple[int, int, int]]:
        """(segment id, start offset, end offset) per segment."""
        return self._slice.ranges

    @property
    def nbytes(self) -> int:
        """Framed bytes in the slice."""
        return self._slice.nbytes

    @property
    def sync(self) -> SyncSlice:
        """The sync slice underneath (its reads block: call them in a thread)."""
        return self._slice

    async def to_arrow(self, *, write_time: bool = False) -> "pyarrow.Table":
        """The slice as a pyarrow Table (built in a worker thread)."""
        return await self._runner.run(lambda: self._slice.to_arrow(write_time=write_time), what="to_arrow")

    async def to_pandas(self) -> "pandas.DataFrame":
        """The slice as a pandas DataFrame (needs pandas; built in a worker thread)."""
        return await self._runner.run(self._slice.to_pandas, what="to_pandas")

    def arrow_batches(self, *, write_time: bool = False) -> "_Chunks[pyarrow.RecordBatch]":
        """``to_arrow()``'s record batches, each made in a worker thread as it is taken."""
        return _Chunks(self._runner, lambda: iter(self._slice.arrow_batches(write_time=write_time)), 1)

    def __aiter__(self) -> "_Chunks[EventRead]":
        return _Chunks(self._runner, lambda: iter(self._slice), CHUNK)

    async def close(self) -> None:
        """Let a client's owner drop the snapshot (nothing to do in process). Idempotent."""
        close = getattr(self._slice, "close", None)
        if close is not None:
            await self._runner.run(close, what="closing a slice")

    async def __aenter__(self) -> "AsyncSlice":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncSlice ranges={self.ranges}>"
