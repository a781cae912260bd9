"""Async transactions: ``TransactionalEventStreamWriter`` and ``Transaction`` (or a client's
``RemoteTransactionalWriter`` / ``RemoteTransaction``) for asyncio.

Owns: ``AsyncTransactionalWriter`` (opened in a worker thread; begins, gets and commits
transactions together) and ``AsyncTransaction`` (writes, flush, commit, abort, ping, status,
``async with``), each with a lane (``threads.Lane``) of its own.

Invariants:
  1. A transaction's calls run in its lane: one at a time, in the order they were made, in a
     worker thread; so a ``commit()`` comes after every ``write_event`` made before it.
  2. Cancel-safety: a call whose coroutine started runs exactly once even if the awaiting task
     is cancelled (a write is staged; a ``commit()`` or ``abort()`` takes effect). After a
     cancelled commit, ``await txn.status()`` says how it ended. Nothing is half-applied: a
     commit is atomic in the sync API (all events visible, or none).
  3. ``async with txn:`` commits when the block ends normally and aborts when it raises,
     cancellation included (the sync ``__exit__``, run in the lane); a transaction no longer
     OPEN is left as it is.
  4. Errors are the sync API's (TxnFailedError, TxnNotFoundError, ...), unchanged.

Thread-safety: use from one event loop; tasks may share a transaction (the lane serializes).
"""

from __future__ import annotations

import asyncio
import uuid
from types import TracebackType
from typing import TYPE_CHECKING, Callable, Iterable, TypeVar, Union

from .handle import LaneHandle
from .threads import Lane, Runner

if TYPE_CHECKING:
    from ..remote.handles import RemoteTransaction, RemoteTransactionalWriter
    from ..transactions import Transaction, TransactionalEventStreamWriter, TxnStatus

__all__ = ["AsyncTransactionalWriter", "AsyncTransaction"]

SyncTxnWriter = Union["TransactionalEventStreamWriter", "RemoteTransactionalWriter"]
SyncTxn = Union["Transaction", "RemoteTransaction"]
T = TypeVar("T")


class AsyncTransaction:
    """One transaction for asyncio (``await twriter.begin_txn()``): module invariants 1-3."""

    def __init__(self, runner: Runner, txn: SyncTxn) -> None:
        self._txn = txn
        self.txn_id: uuid.UUID = txn.txn_id
        self._lane = Lane(runner, f"transaction {self.txn_id}")

    async def write_event(self, event: object, routing_key: str | None = None) -> None:
        """Stage one event; visible only when the transaction commits."""
        await self._lane.submit(self._txn.write_event, event, routing_key)

    async def write_events(self, events: Iterable[object], routing_key: str | None = None) -> None:
        """Stage several events with one routing key."""
        await self._lane.submit(self._txn.write_events, list(events), routing_key)

    async def flush(self) -> None:
        """Make every staged event durable (still invisible)."""
        await self._lane.submit(self._txn.flush)

    async def commit(self, timestamp: int | None = None) -> None:
        """Make every event visible, atomically; returns once that is durable."""
        await self._lane.submit(self._txn.commit, timestamp)

    async def abort(self) -> None:
        """Drop every event of the transaction."""
        await self._lane.submit(self._txn.abort)

    async def ping(self, lease: float | None = None) -> None:
        """Renew the lease."""
        await self._lane.submit(self._txn.ping, lease)

    async def status(self) -> "TxnStatus":
        """The status now (after every call queued before this one)."""
        return await self._lane.submit(self._txn.status)

    @property
    def sync(self) -> SyncTxn:
        """The sync transaction underneath (its calls block: call them in a thread)."""
        return self._txn

    async def __aenter__(self) -> "AsyncTransaction":
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None, exc: BaseException | None,
                        tb: TracebackType | None) -> None:
        await asyncio.shield(self._lane.submit(self._txn.__exit__, exc_type, exc, tb))

    def __repr__(self) -> str:
        return f"<AsyncTransaction {self.txn_id}>"


class AsyncTransactionalWriter(LaneHandle[SyncTxnWriter]):
    """Begins transactions on one stream (``store.create_transactional_writer(...)``; opens
    in the background, ``await`` it to open it at once and see errors there)."""

    async def _run(self, fn: Callable[[SyncTxnWriter], T]) -> T:
        return await self._lane.submit(lambda: fn(self._handle()))

    async def begin_txn(self, lease: float | None = None) -> AsyncTransaction:
        """A new OPEN transaction (aborted if not committed within ``lease`` seconds)."""
        txn: SyncTxn = await self._run(lambda w: w.begin_txn(lease))
        return AsyncTransaction(self._runner, txn)

    async def get_txn(self, txn_id: uuid.UUID | str) -> AsyncTransaction:
        """The transaction with this id."""
        txn: SyncTxn = await self._run(lambda w: w.get_txn(txn_id))
        return AsyncTransaction(self._runner, txn)

    async def commit_transactions(self, txns: Iterable["AsyncTransaction | uuid.UUID | str"], *,
                                  mark: int | None = None) -> bool:
        """Commit several OPEN transactions of this stream as one atomic step (the sync
        ``commit_transactions``); each transaction's earlier calls run first."""
        items = list(txns)
        for t in items:
            if isinstance(t, AsyncTransaction):
                await t._lane.drain()  # its writes are staged before the commit reads them
        plain = [t._txn if isinstance(t, AsyncTransaction) else t for t in items]
        return await self._run(lambda w: w.commit_transactions(plain, mark=mark))  # type: ignore[arg-type]

    async def last_mark(self) -> int | None:
        """The last mark ``commit_transactions`` recorded for this writer id."""
        return await self._run(lambda w: w.last_mark())

    @property
    def writer_id(self) -> str:
        return self._handle().writer_id

    def __repr__(self) -> str:
        return f"<AsyncTransactionalWriter {self._what}>"
