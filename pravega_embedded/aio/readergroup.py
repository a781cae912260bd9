"""Async reader groups: ``ReaderGroup`` (or a client's ``RemoteReaderGroup``) for asyncio.

Owns: ``AsyncReaderGroup`` (the group's calls, each in a worker thread), ``AsyncGroupReader``
(a group reader on ``reader.ReadPump``: reads, ``async for``, position, close) and
``AsyncCheckpoint`` (a checkpoint in progress, awaited without blocking the loop).

Invariants:
  1. Every call that touches the group state (LMDB, the owner's socket) runs in a worker
     thread; a wait (a checkpoint's result, ``generate_stream_cuts``) runs in the waits pool,
     so it never holds up writers.
  2. A group reader's reads follow ``reader.ReadPump``'s protocol: each event (or checkpoint
     marker) is handed to exactly one read call, in order, across cancellations. The group
     protocol is the sync one: the reader records its position for a checkpoint at the read
     *after* the one that returned the marker.
  3. Closing a group reader releases its segments just after the events read calls returned:
     an event a cancelled read obtained that no later read took goes back to the group
     (``close_before``), so another reader reads it — exactly once in the group.
  4. ``async for ev in reader`` yields events and checkpoint markers and ends at the group's
     read-completed marker, as the sync iterator.

Thread-safety: use the handles from one event loop; tasks may share them (a reader's reads are
serialized).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
from typing import TYPE_CHECKING, Callable, Generator, Iterable, Mapping, TypeVar, Union

from ..readergroup.config import seg_key
from .reader import ReadPump
from .threads import Runner

if TYPE_CHECKING:
    from ..events import EventRead
    from ..readergroup import (Checkpoint, CheckpointFuture, GroupReader, Position, ReaderGroup,
                               ReaderGroupConfig, SegmentDistribution)
    from ..remote.handles import RemoteCheckpointFuture, RemoteGroupReader, RemoteReaderGroup
    from ..serializers import Serializer
    from ..streamcut import StreamCut
    from ..watermarks import TimeWindow

__all__ = ["AsyncReaderGroup", "AsyncGroupReader", "AsyncCheckpoint"]

SyncGroup = Union["ReaderGroup", "RemoteReaderGroup"]
SyncGroupReader = Union["GroupReader", "RemoteGroupReader"]
SyncCheckpoint = Union["CheckpointFuture", "RemoteCheckpointFuture"]
StreamCuts = dict[tuple[str, str], "StreamCut"]
T = TypeVar("T")


def _key(ev: "EventRead") -> str:
    return seg_key(f"{ev.scope}/{ev.stream}", ev.segment_id)


def _close_group_reader(r: SyncGroupReader, held: "EventRead | None") -> None:
    """Invariant 3: the segments go back before an event no read call took."""
    if held is None or held.is_checkpoint or held.is_read_completed:
        r.close()
    else:
        r.close_before({_key(held): held.offset})


class AsyncGroupReader:
    """A reader of a reader group for asyncio. Get it with ``group.create_reader(id)`` (opens
    in the background; ``await`` it to open it at once and see errors there)."""

    def __init__(self, runner: Runner, opener: Callable[[], SyncGroupReader], what: str,
                 wait_slice: float, on_close: Callable[["AsyncGroupReader"], None], reader_id: str) -> None:
        self._pump: ReadPump[SyncGroupReader] = ReadPump(runner, opener, what, wait_slice,
                                                              lambda r: False, wake_on_close=False)
        self._on_close = on_close
        self.reader_id = reader_id

    def __await__(self) -> Generator[object, None, "AsyncGroupReader"]:
        return self._wait_open().__await__()

    async def _wait_open(self) -> "AsyncGroupReader":
        await self._pump.reader()
        return self

    async def read_next_event(self, timeout: float | None = None) -> "EventRead | None":
        """The next event or marker (``ev.is_checkpoint``, ``ev.is_read_completed``), or None
        when ``timeout`` seconds pass without one (timeout=None: wait without limit)."""
        return await self._pump.read(timeout)

    def __aiter__(self) -> "AsyncGroupReader":
        return self

    async def __anext__(self) -> "EventRead":
        while True:
            ev = await self._pump.read(None)
            if ev is None:
                continue
            if ev.is_read_completed:
                raise StopAsyncIteration
            return ev

    async def position(self) -> "Position":
        """The reader's Position just after the last event a read returned."""
        r = await self._pump.reader()
        ev = self._pump.unclaimed()
        if ev is None or ev.is_checkpoint or ev.is_read_completed:
            return await self._pump.runner.run(r.position)
        before: Mapping[str, int] = {_key(ev): ev.offset}
        return await self._pump.runner.run(r.position_before, before)

    async def get_current_time_window(self, scope: str, stream: str) -> "TimeWindow":
        """The event-time window of ``scope/stream`` at the segments this reader holds."""
        r = await self._pump.reader()
        return await self._pump.runner.run(r.get_current_time_window, scope, stream)

    async def close(self) -> None:
        """Leave the group, releasing the segments at the reader's exact position
        (invariant 3). Idempotent."""
        try:
            await self._pump.close(_close_group_reader)
        finally:
            self._on_close(self)

    @property
    def closed(self) -> bool:
        return self._pump.closing

    async def __aenter__(self) -> "AsyncGroupReader":
        return await self._wait_open()

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncGroupReader {self._pump.what}{' closed' if self._pump.closing else ''}>"


class AsyncCheckpoint:
    """A checkpoint in progress (``group.initiate_checkpoint``): ``await result()``."""

    def __init__(self, runner: Runner, future: SyncCheckpoint) -> None:
        self._runner = runner
        self._future = future
        self.name: str = future.name

    async def result(self, timeout: float | None = None) -> "Checkpoint":
        """The Checkpoint once every reader answered; TimeoutError if not within ``timeout``
        (CheckpointFailedError if the group was reset or deleted first)."""
        f = self._future
        if isinstance(f, concurrent.futures.Future):  # in process: awaited with no thread
            return await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(f)), timeout)
        return await self._runner.run(f.result, timeout, wait=True, what=f"checkpoint {self.name!r}")

    async def done(self) -> bool:
        """Whether the checkpoint completed (or failed)."""
        f = self._future
        if isinstance(f, concurrent.futures.Future):
            return f.done()
        return await self._runner.run(f.done)

    def __repr__(self) -> str:
        return f"<AsyncCheckpoint {self.name!r}>"


class AsyncReaderGroup:
    """A reader group for asyncio (``await store.create_reader_group(...)``): the sync
    group's methods as coroutines, and ``create_reader`` for async group readers."""

    def __init__(self, runner: Runner, group: SyncGroup, wait_slice: float,
                 track: Callable[[AsyncGroupReader], None],
                 forget: Callable[[AsyncGroupReader], None]) -> None:
        self._runner = runner
        self._group = group
        self._slice = wait_slice
        self._track, self._forget = track, forget
        self.name: str = group.name

    async def _run(self, fn: Callable[..., T], *args: object, wait: bool = False) -> T:
        return await self._runner.run(fn, *args, wait=wait, what=f"a call of reader group {self.name!r}")

    def create_reader(self, reader_id: str, *, serializer: "Serializer | str | None" = None) -> AsyncGroupReader:
        """A reader of this group (joins in a worker thread; await it to see errors at once)."""
        g = self._group
        r = AsyncGroupReader(self._runner, lambda: g.create_reader(reader_id, serializer=serializer),
                             f"reader {reader_id!r} of group {self.name!r}", self._slice, self._forget,
                             reader_id)
        self._track(r)
        return r

    async def config(self) -> "ReaderGroupConfig":
        return await self._run(lambda: self._group.config)

    async def reader_offline(self, reader_id: str, position: "Position | None" = None) -> None:
        await self._run(self._group.reader_offline, reader_id, position)

    async def online_readers(self) -> list[str]:
        return await self._run(self._group.online_readers)

    async def initiate_checkpoint(self, name: str) -> AsyncCheckpoint:
        """Begin a checkpoint; ``await (await group.initiate_checkpoint(n)).result()``."""
        return AsyncCheckpoint(self._runner, await self._run(self._group.initiate_checkpoint, name))

    async def cancel_outstanding_checkpoints(self) -> int:
        return await self._run(self._group.cancel_outstanding_checkpoints)

    async def outstanding_checkpoints(self) -> list[str]:
        return await self._run(self._group.outstanding_checkpoints)

    async def last_checkpoint(self) -> "Checkpoint | None":
        return await self._run(self._group.last_checkpoint)

    async def update_retention_cut(self, cuts: "StreamCut | Checkpoint | Mapping[tuple[str, str], StreamCut] | Iterable[StreamCut]") -> None:
        await self._run(self._group.update_retention_cut, cuts)

    async def retention_cuts(self) -> StreamCuts:
        return await self._run(self._group.retention_cuts)

    async def get_stream_cuts(self) -> StreamCuts:
        return await self._run(self._group.get_stream_cuts)

    async def generate_stream_cuts(self, timeout: float | None = None) -> StreamCuts:
        """Stream cuts the readers agree on (waits for every reader: the waits pool)."""
        return await self._run(self._group.generate_stream_cuts, timeout, wait=True)

    async def reset(self, target: "ReaderGroupConfig | Checkpoint") -> None:
        await self._run(self._group.reset, target)

    async def unread_bytes(self, scope: str | None = None, stream: str | None = None) -> int:
        return await self._run(self._group.unread_bytes, scope, stream)

    async def segment_distribution(self) -> "SegmentDistribution":
        return await self._run(self._group.segment_distribution)

    @property
    def sync(self) -> SyncGroup:
        """The sync group underneath (for calls that never block only)."""
        return self._group

    async def close(self) -> None:
        """Close the handle (not its readers). Idempotent."""
        await self._run(self._group.close)

    async def __aenter__(self) -> "AsyncReaderGroup":
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    def __repr__(self) -> str:
        return f"<AsyncReaderGroup {self.name!r}>"
