"""The async event writer: ``EventStreamWriter`` (or a client's ``RemoteWriter``) for asyncio.

Owns: ``AsyncWriter`` — the sync writer it wraps, opened in a worker thread, and the lane
(``threads.Lane``) every call of it goes through.

Invariants:
  1. Every call (open, write, flush, note_time, close) runs in the writer's lane: one at a
     time, in the order the calling coroutines started, in a worker thread. The event loop
     never waits for a batch hand-over, an fsync or the owner's socket.
  2. Cancel-safety: a ``write_event``/``write_events`` whose coroutine has started is written
     exactly once, in its place in the order, even if the awaiting task is cancelled (the
     cancellation stops the wait, never the write); ``write_events`` stays atomic. So after a
     cancelled write the writer is consistent: the event is in the writer's buffer (or its
     failure is logged), and any later ``flush()`` — queued behind it — makes it durable. A
     cancelled ``flush()`` goes on in its thread; a later flush covers the same events.
  3. ``close()`` is queued behind every earlier call, is idempotent (every caller awaits the
     same close), and completes even if the task awaiting it is cancelled.
  4. Errors are the sync writer's, unchanged (``pravega_embedded.errors``).

Thread-safety: use an AsyncWriter from one event loop; any number of tasks may write to it
(their calls are serialized by the lane, in the order they were made).
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Iterable, Union

from .handle import LaneHandle

if TYPE_CHECKING:
    from ..remote import RemoteWriter
    from ..writer import EventStreamWriter

__all__ = ["AsyncWriter"]

SyncWriter = Union["EventStreamWriter", "RemoteWriter"]


class AsyncWriter(LaneHandle[SyncWriter]):
    """Writes events to one stream from asyncio. Get it with ``store.create_writer(...)``
    (opens in the background; ``await`` it to open it at once and see errors there).

    ``await write_event(...)`` returns the sequence number once the event is buffered (as
    the sync ``write_event`` returns); ``await flush()`` returns once everything written is
    durable. Cancelling either stops the waiting only (module invariant 2).
    """

    # ------------------------------------------------------------------ writing
    async def write_event(self, event: object, routing_key: str | None = None, *,
                          sequence: int | None = None) -> int:
        """Buffer one event; its sequence number (module invariant 2 on cancellation)."""
        return await self._lane.submit(self._write_event, event, routing_key, sequence)

    def _write_event(self, event: object, routing_key: str | None, sequence: int | None) -> int:
        return self._handle().write_event(event, routing_key, sequence=sequence)

    async def write_events(self, events: Iterable[object], routing_key: str | None = None) -> int:
        """Buffer a batch atomically (one journal record); the last sequence number."""
        batch = list(events)  # taken now: the caller may change its list after the call
        return await self._lane.submit(self._write_events, batch, routing_key)

    def _write_events(self, events: list[object], routing_key: str | None) -> int:
        return self._handle().write_events(events, routing_key)

    async def flush(self, timeout: float | None = None) -> int:
        """Wait until every event written before this call is durable; ``durable_sequence``."""
        return await self._lane.submit(lambda: self._handle().flush(timeout))

    async def note_time(self, timestamp: int) -> None:
        """The sync ``note_time``: events written from now on have event time >= ``timestamp``."""
        await self._lane.submit(lambda: self._handle().note_time(timestamp))

    async def durable_sequence(self) -> int:
        """The highest sequence number known durable (a call to the owner for a client)."""
        return await self._lane.submit(lambda: self._handle().durable_sequence)

    @property
    def last_sequence(self) -> int:
        """The last sequence number written (-1: none yet); valid once the writer is open
        (``await writer``) and as of the last write call that returned."""
        return self._handle().last_sequence

    @property
    def writer_id(self) -> str:
        """The writer id (once open)."""
        return self._handle().writer_id

    @property
    def sync(self) -> SyncWriter:
        """The sync writer underneath (once open): for calls that never block only."""
        return self._handle()

    def __repr__(self) -> str:
        state = " closed" if self._close is not None else "" if self._sync is not None else " opening"
        return f"<AsyncWriter {self._what}{state}>"

