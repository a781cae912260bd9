"""The handles a client of a shared store gets besides writers and standalone readers: reader
groups and their readers, checkpoints in progress, transactional writers and transactions,
byte streams, segment watchers and slices, each with the API of its in-process twin.

Owns: ``RemoteReaderGroup``, ``RemoteGroupReader``, ``RemoteCheckpointFuture``,
``RemoteTransactionalWriter``, ``RemoteTransaction``, ``RemoteByteStream``,
``RemoteSegmentWatcher``, ``RemoteSlice``.

Invariants:
  1. Handles that wait (group readers, watchers) or stream bytes (byte streams,
     transactional writers) have a connection of their own; reader groups, checkpoints and
     slices share the store's connection (their calls do not wait long).
  2. A group reader hands out a batch the owner read as one chunk; it asks for the next only
     when the batch is all handed out (so the group protocol in the owner sees the client's
     position), and ``position()``/``close()`` count only the events handed out.
  3. A transaction's events go to the owner as WRITE frames without waiting; ``flush``,
     ``commit`` and every other call come after them on the same connection and raise a
     failure of any of them.
  4. A group reader on this machine (a unix socket) asks for journal ranges: the owner hands
     out where a chunk lies in the journal files (``journalrange``) and the reader reads and
     parses it itself, so catch-up reads cost the owner one call per range, not work per
     event. The reader makes a range's events a run (``journalrange.RUN_EVENTS``) at a time
     under its lock, and hands out a run from a list iterator without it, so ``close`` or
     ``position`` from another thread sees whole runs. From a section whose file was
     reclaimed since, the rest of the range is asked of the owner (``reread``).

Thread-safety: as the in-process handles (one thread reads a reader; the others may call
``close``); every call is one exchange under the connection's lock.
"""

from __future__ import annotations

import io
import itertools
import os
import threading
import uuid
import weakref
from itertools import chain
from collections.abc import Iterable, Iterator, Mapping
from typing import TYPE_CHECKING, Callable

from ..errors import (
    ConnectionLostError,
    EventTooLargeError,
    InvalidConfigurationError,
    ProtocolError,
    ReaderClosedError,
    SerializationError,
    WriterClosedError,
)
from ..events import EventRead
from ..journalrange import JournalRange, RangeFiles, RangeGone
from ..readergroup.config import Checkpoint, Position, ReaderGroupConfig, SegmentDistribution
from ..readergroup.reader import make_context, make_marker
from ..serializers import Serializer
from ..streamcut import StreamCut
from ..transactions import TxnStatus
from ..writer import MAX_EVENT_SIZE
from .connection import Connection, with_large
from .values import Handle, loads
from .wire import Kind, WireEvent, encode_write

if TYPE_CHECKING:
    import pandas
    import pyarrow

    from ..watch import SegmentCountChange
    from ..watermarks import TimeWindow

__all__ = ["RemoteReaderGroup", "RemoteGroupReader", "RemoteCheckpointFuture",
           "RemoteTransactionalWriter", "RemoteTransaction", "RemoteByteStream",
           "RemoteSegmentWatcher", "RemoteSlice", "READ_BATCH"]

READ_BATCH = 1024  # events a reader asks for at once
TXN_BATCH = 4 << 20  # a transaction sends its buffered events at this many bytes
BYTES_WRITE_MAX = 16 << 20  # the most bytes of one BYTES write

Opener = Callable[[], Connection]  # a new connection to the same owner
Forget = Callable[[object], None]  # tell the store a handle is closed


def _handle(value: object, method: str) -> Handle:
    if not isinstance(value, Handle):
        raise ProtocolError(f"{method} did not answer a handle")
    return value


def _payload(ev: WireEvent, ser: Serializer | None) -> object:
    return ev.event if ser is None else ser.deserialize(ev.event)


def _to_bytes(event: object, ser: Serializer | None) -> bytes:
    if ser is not None:
        event = ser.serialize(event)
    elif isinstance(event, (bytearray, memoryview)):
        event = bytes(event)
    elif type(event) is not bytes:
        raise SerializationError(f"event must be bytes-like (or use a serializer), not {type(event).__name__}")
    if len(event) > MAX_EVENT_SIZE:  # type: ignore[arg-type]
        raise EventTooLargeError(f"an event of a transaction is at most {MAX_EVENT_SIZE} bytes, "
                                 f"got {len(event)}")  # type: ignore[arg-type]
    return event  # type: ignore[return-value]


def _key(routing_key: str | None) -> bytes | None:
    if routing_key is None:
        return None
    if not isinstance(routing_key, str):
        raise InvalidConfigurationError(f"routing_key must be a str or None, got {type(routing_key).__name__}")
    return routing_key.encode("utf-8", "surrogateescape")


class _Owned:
    """A handle in the owner, reached through ``conn``."""

    def __init__(self, conn: Connection, handle: Handle, forget: Forget | None, own: bool) -> None:
        self._conn = conn
        self._h = handle.id
        self._info = handle.info
        self._forget = forget
        self._own = own  # the connection is this handle's alone (invariant 1)
        self._closed = False

    def _call(self, method: str, *args: object, **kwargs: object) -> object:
        if self._closed:
            raise self._closed_error()
        return self._conn.call(self._h, method, *args, **kwargs)

    def _closed_error(self) -> Exception:
        return InvalidConfigurationError(f"{self!r} is closed")

    def _close(self, method: str = "close", *args: object) -> None:
        """Close the owner's handle, then the connection if it is this handle's. Idempotent."""
        if self._closed:
            return
        self._closed = True
        try:
            self._conn.call(self._h, method, *args)
        except ConnectionLostError:
            pass  # the owner is gone: its handle is closed with the connection
        finally:
            if self._own:
                self._conn.close()
            if self._forget is not None:
                self._forget(self)

    @property
    def closed(self) -> bool:
        return self._closed

    def __enter__(self):  # type: ignore[no-untyped-def]
        return self

    def __exit__(self, *exc: object) -> None:
        self._close()


# ---------------------------------------------------------------------------- reader groups
class RemoteReaderGroup(_Owned):
    """``ReaderGroup``'s API in a client process."""

    def __init__(self, conn: Connection, handle: Handle, opener: Opener, keep: Callable[[object], None],
                 forget: Forget) -> None:
        super().__init__(conn, handle, None, False)
        self.name = str(handle.info["name"])
        self._opener, self._keep, self._forget_reader = opener, keep, forget

    @property
    def config(self) -> ReaderGroupConfig:
        return self._call("config")  # type: ignore[return-value]

    def create_reader(self, reader_id: str, *, serializer: Serializer | None = None) -> "RemoteGroupReader":
        """A reader of this group with a connection of its own (invariant 1)."""
        from ..serializers import resolve
        ser = resolve(serializer)
        if self._closed:
            raise self._closed_error()
        conn = self._opener()
        try:
            h = _handle(conn.call(0, "open_group_reader", self.name, reader_id), "create_reader")
        except BaseException:
            conn.close()
            raise
        r = RemoteGroupReader(conn, h, ser, self._forget_reader)
        self._keep(r)
        return r

    def reader_offline(self, reader_id: str, position: Position | None = None) -> None:
        self._call("reader_offline", reader_id, position)

    def online_readers(self) -> list[str]:
        return list(self._call("online_readers"))  # type: ignore[call-overload]

    def initiate_checkpoint(self, name: str) -> "RemoteCheckpointFuture":
        h = _handle(self._call("initiate_checkpoint", name), "initiate_checkpoint")
        return RemoteCheckpointFuture(self._conn, h)

    def cancel_outstanding_checkpoints(self) -> int:
        return int(self._call("cancel_outstanding_checkpoints"))  # type: ignore[call-overload]

    def outstanding_checkpoints(self) -> list[str]:
        return list(self._call("outstanding_checkpoints"))  # type: ignore[call-overload]

    def last_checkpoint(self) -> Checkpoint | None:
        return self._call("last_checkpoint")  # type: ignore[return-value]

    def update_retention_cut(self, cuts: StreamCut | Checkpoint | Mapping[tuple[str, str], StreamCut]
                             | Iterable[StreamCut]) -> None:
        if not isinstance(cuts, (StreamCut, Checkpoint, Mapping)):
            cuts = list(cuts)
        self._call("update_retention_cut", cuts)

    def retention_cuts(self) -> dict[tuple[str, str], StreamCut]:
        return self._call("retention_cuts")  # type: ignore[return-value]

    def get_stream_cuts(self) -> dict[tuple[str, str], StreamCut]:
        return self._call("get_stream_cuts")  # type: ignore[return-value]

    def generate_stream_cuts(self, timeout: float | None = None) -> dict[tuple[str, str], StreamCut]:
        return self._call("generate_stream_cuts", timeout)  # type: ignore[return-value]

    def reset(self, target: ReaderGroupConfig | Checkpoint) -> None:
        self._call("reset", target)

    def unread_bytes(self, scope: str | None = None, stream: str | None = None) -> int:
        return int(self._call("unread_bytes", scope, stream))  # type: ignore[call-overload]

    def unread_events(self, scope: str | None = None, stream: str | None = None) -> int:
        return int(self._call("unread_events", scope, stream))  # type: ignore[call-overload]

    def segment_distribution(self) -> SegmentDistribution:
        return self._call("segment_distribution")  # type: ignore[return-value]

    def close(self) -> None:
        """Closes the handle (not its readers). Idempotent."""
        self._close()

    def _closed_error(self) -> Exception:
        from ..errors import ReaderGroupClosedError
        return ReaderGroupClosedError(f"reader group handle {self.name!r} is closed")

    def __repr__(self) -> str:
        return f"<RemoteReaderGroup {self.name!r}{' closed' if self._closed else ''}>"


class RemoteCheckpointFuture(_Owned):
    """``initiate_checkpoint``'s future: ``result(timeout)`` is the Checkpoint."""

    def __init__(self, conn: Connection, handle: Handle) -> None:
        super().__init__(conn, handle, None, False)
        self.name = str(handle.info["name"])
        self._result: Checkpoint | None = None

    def result(self, timeout: float | None = None) -> Checkpoint:
        """The Checkpoint once every reader answered; TimeoutError if not by ``timeout``."""
        if self._result is None:
            got = self._call("result", timeout)
            if not isinstance(got, Checkpoint):
                raise ProtocolError("a checkpoint's result is not a Checkpoint")
            self._result = got
            self._close()
        return self._result

    def done(self) -> bool:
        return self._result is not None or bool(self._call("done"))

    def __repr__(self) -> str:
        return f"<RemoteCheckpointFuture {self.name!r}>"


class RemoteGroupReader(_Owned):
    """``GroupReader``'s API in a client process (invariant 2)."""

    def __init__(self, conn: Connection, handle: Handle, serializer: Serializer | None,
                 forget: Forget) -> None:
        super().__init__(conn, handle, forget, True)
        self.reader_id = str(handle.info["reader_id"])
        self.group_name = str(handle.info["group_name"])
        self._ser = serializer
        self._it: Iterator[EventRead] = iter(())  # the batch (or run) being handed out
        self._runs: Iterator[list[EventRead]] | None = None  # a journal range's runs not made yet
        self._run_next = 0  # ... the offset of the first event of those runs
        self._range_stop = 0  # ... the range's end
        self._range_ctx: object = None  # ... and its one context
        self._lock = threading.RLock()
        # invariant 4: on this machine the journal ranges the owner hands out are read here
        self._files = RangeFiles(os.path.join(conn.path, "journal")) if conn.local else None

    def _closed_error(self) -> Exception:
        return ReaderClosedError(f"reader {self.reader_id!r} of group {self.group_name!r} is closed")

    def read_next_event(self, timeout: float | None = None) -> EventRead | None:
        """The next event or marker, or None when ``timeout`` passes without one. An event
        whose payload does not deserialize raises and stays first (as in process)."""
        try:
            ev = next(self._it)  # the batch being handed out: no lock (see _unreturned)
        except StopIteration:
            ev = self._next_slow(timeout)
        if self._ser is None or ev is None or ev[0] is None:
            return ev
        try:
            return EventRead.make(self._ser.deserialize(ev[0]), *ev[1:6])
        except BaseException:
            self._it = chain((ev,), self._it)
            raise

    def _next_slow(self, timeout: float | None) -> EventRead | None:
        with self._lock:
            if self._closed:
                raise self._closed_error()
            ev = self._next_of_batch()  # _unreturned may have put the batch back meanwhile
            if ev is not None:
                return ev
            try:
                body = self._conn.read(self._h, "read", timeout, READ_BATCH, self._files is not None)
            except ConnectionLostError:
                if self._closed:  # close() in another thread ended this read
                    if self._files is not None:
                        self._files.close()
                    raise self._closed_error() from None
                raise
            batch, self._runs = self._events(body.events, body.meta)
            self._it = iter(batch)
            return self._next_of_batch()

    def _next_of_batch(self) -> EventRead | None:
        """The batch's next event, the next run of a journal range made when one is handed
        out (under the lock); None when the batch is done."""
        while True:
            ev = next(self._it, None)
            if ev is not None or self._runs is None:
                return ev
            self._next_run()

    def _next_run(self) -> None:
        """The next run of the journal range being read becomes the batch (under the lock).
        From a section whose file is gone, the rest of the range is the owner's to read (tried
        again on the next read if that fails); any other failure (a damaged section) is raised
        and the next read asks the owner for the rest: nothing after it is skipped."""
        try:
            run = next(self._runs, None)  # type: ignore[arg-type]
        except RangeGone as gone:
            self._runs = _Raises(gone)
            self._it = iter(self._reread(gone))
            self._runs = None
            return
        except BaseException as exc:
            self._runs = _Raises(RangeGone(str(exc), self._run_next, self._range_stop, self._range_ctx))
            raise
        if run is None:
            self._runs = None
        else:
            self._it = iter(run)
            self._run_next = run[-1][3] + run[-1][4]

    def _events(self, events: list[WireEvent], meta: bytes | None
                ) -> tuple[list[EventRead], Iterator[list[EventRead]] | None]:
        """An EVENTS answer as (its events, None), or for a journal range ([], its runs)."""
        m = loads(meta) if meta is not None else None
        if not isinstance(m, dict):
            raise ProtocolError("a group reader's EVENTS has no contexts")
        contexts = [make_context((s, t), k, base) for s, t, k, base in m["ctx"]]  # type: ignore[union-attr]
        if m.get("range") is not None:
            return [], self._range_runs(m, contexts)
        out: list[EventRead] = []
        if m.get("large") is not None and len(events) == 1:  # type: ignore[union-attr]
            events = [with_large(self._conn, self._h, events[0], meta)]  # type: ignore[arg-type]
        it = iter(events)
        make = EventRead.make  # payloads deserialize as they are handed out
        for count, i in m["runs"]:  # type: ignore[union-attr]
            ctx = contexts[i]
            for _ in range(count):
                ev = next(it, None)
                if ev is None:
                    raise ProtocolError("a group reader's EVENTS has runs that do not match its events")
                out.append(make(ev.event, ev.routing_key, ev.segment_id, ev.offset, ev.length, ctx))
        if len(out) != len(events):
            raise ProtocolError("a group reader's EVENTS has runs that do not match its events")
        marker = m.get("marker")  # type: ignore[union-attr]
        if marker is not None:
            out.append(make_marker(marker["name"], Position.of(marker["position"])))
        return out, None

    def _range_runs(self, m: dict[str, object], contexts: list[tuple[str, str]]) -> Iterator[list[EventRead]]:
        """Invariant 4: the events of a journal range, read from the files a run at a time as
        they are taken (under the lock: ``_next_run``, ``_unreturned``); from a section whose
        file was reclaimed since, ``next`` raises RangeGone and the rest is asked of the owner
        (``_reread``)."""
        rng = JournalRange.from_json(m["range"])
        seg = m.get("seg")
        if type(seg) is not int or len(contexts) != 1 or self._files is None:
            raise ProtocolError("a journal range comes with its segment and one context, to a local reader")
        self._run_next, self._range_stop, self._range_ctx = rng.start, rng.stop, contexts[0]
        return self._files.runs(rng, seg, contexts[0])

    def _reread(self, gone: RangeGone) -> list[EventRead]:
        """The events of a journal range from ``gone.at`` to its end, asked of the owner (it
        reads them from tier 2). Under the lock."""
        out: list[EventRead] = []
        at = gone.at
        while at < gone.stop:
            body = self._conn.read(self._h, "reread", at)
            again = loads(body.meta) if body.meta is not None else None
            if not isinstance(again, dict) or again.get("range") is not None:
                raise ProtocolError("the owner answered a reread with another range")
            evs, runs = self._events(body.events, body.meta)
            if runs is not None or not evs or evs[0][3] != at:
                raise ProtocolError("the owner answered a reread with other events")
            out.extend(evs)
            at = evs[-1][3] + evs[-1][4]
        return out

    def _unreturned(self, *, take: bool = False) -> dict[str, int]:
        """Per segment, the offset of the first event of the batch not handed out (under the
        lock). The batch is taken out of its iterator whole and put back (with ``take``: not):
        an event the reading thread takes meanwhile was handed out, so it is not counted."""
        pending = list(self._it)  # atomic under the GIL: a list's (or C iterators') events
        self._it = iter(() if take else pending)
        first: dict[str, int] = {}
        for ev in pending:
            if ev[0] is not None or not (ev.is_checkpoint or ev.is_read_completed):
                first.setdefault(ev[5].key, ev[3])  # type: ignore[attr-defined]
        if self._runs is not None:  # a journal range's runs not made yet begin at _run_next
            if self._run_next < self._range_stop:
                first.setdefault(self._range_ctx.key, self._run_next)  # type: ignore[attr-defined]
            if take:
                self._runs = None
        return first

    def position(self) -> Position:
        """The reader's Position: just after the last event it returned."""
        with self._lock:
            first = self._unreturned()
            if not first:
                return self._call("position")  # type: ignore[return-value]
            return self._call("position_before", first)  # type: ignore[return-value]

    def position_before(self, unreturned: Mapping[str, int]) -> Position:
        """``position()`` before events returned that the caller has not taken yet
        (``{"scope/stream/segment": offset of the first such event}``), as
        ``GroupReader.position_before``: for a proxy that reads ahead (``aio``)."""
        with self._lock:
            first = _first_of(self._unreturned(), unreturned)
            if not first:
                return self._call("position")  # type: ignore[return-value]
            return self._call("position_before", first)  # type: ignore[return-value]

    def get_current_time_window(self, scope: str, stream: str) -> "TimeWindow":
        return self._call("get_current_time_window", scope, stream)  # type: ignore[return-value]

    def close(self) -> None:
        """Leave the group, releasing the segments just after the events returned (the
        batch not handed out is read by the group again). Idempotent. If another thread is
        waiting in a read, the connection is ended instead (the read raises
        ReaderClosedError): the owner then treats the reader as its process had died."""
        self.close_before({})

    def close_before(self, unreturned: Mapping[str, int]) -> None:
        """``close()`` releasing the segments before events returned that the caller has
        not taken yet (as ``GroupReader.close_before``: for a proxy that reads ahead)."""
        if self._closed:
            return
        if not self._lock.acquire(timeout=0.05):
            self._closed = True
            self._conn.close()
            if self._forget is not None:
                self._forget(self)
            return
        try:
            self._close("close_before", _first_of(self._unreturned(take=True), unreturned))
        finally:
            if self._files is not None:
                self._files.close()
            self._lock.release()

    def __iter__(self) -> Iterator[EventRead]:
        """Events and checkpoint markers until the group's read is complete; blocks."""
        while True:
            ev = self.read_next_event(None)
            if ev is None:
                continue
            if ev.is_read_completed:
                return
            yield ev

    def __repr__(self) -> str:
        return (f"<RemoteGroupReader {self.reader_id!r} of {self.group_name!r}"
                f"{' closed' if self._closed else ''}>")


class _Raises:
    """Runs whose every ``next`` raises ``exc`` (a journal range to be asked of the owner)."""

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc

    def __iter__(self) -> "_Raises":
        return self

    def __next__(self) -> list[EventRead]:
        raise self.exc.with_traceback(None)


def _first_of(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, int]:
    """Per segment, the smaller of two first-unreturned offsets."""
    out = dict(a)
    for k, off in b.items():
        out[k] = min(out.get(k, off), off)
    return out


# ---------------------------------------------------------------------------- transactions
class RemoteTransactionalWriter(_Owned):
    """``TransactionalEventStreamWriter``'s API in a client process."""

    def __init__(self, conn: Connection, handle: Handle, scope: str, stream: str,
                 serializer: Serializer | None, forget: Forget) -> None:
        super().__init__(conn, handle, forget, True)
        self.writer_id = str(handle.info["writer_id"])
        self.scope, self.stream = scope, stream
        self._ser = serializer
        self._live: weakref.WeakSet[RemoteTransaction] = weakref.WeakSet()  # may hold buffered events

    def track(self, txn: "RemoteTransaction") -> None:
        """Remember a transaction object of this writer: a commit by its id sends its buffer."""
        self._live.add(txn)

    def _closed_error(self) -> Exception:
        return WriterClosedError(f"transactional writer {self.writer_id!r} on {self.scope}/{self.stream} is closed")

    def begin_txn(self, lease: float | None = None) -> "RemoteTransaction":
        """A new OPEN transaction; aborted if not committed within ``lease`` seconds."""
        return RemoteTransaction(self, _handle(self._call("begin_txn", lease), "begin_txn"))

    def get_txn(self, txn_id: uuid.UUID | str) -> "RemoteTransaction":
        return RemoteTransaction(self, _handle(self._call("get_txn", str(txn_id)), "get_txn"))

    def commit_transactions(self, txns: Iterable["RemoteTransaction | uuid.UUID | str"], *,
                            mark: int | None = None) -> bool:
        """Commit several OPEN transactions of this stream as one atomic, durable step (with
        ``mark``: recorded in that step; a mark not above the last one aborts them and returns
        False). A ``RemoteTransaction``'s buffered events are sent first."""
        if isinstance(txns, (str, bytes, uuid.UUID, RemoteTransaction)) or not isinstance(txns, Iterable):
            raise InvalidConfigurationError(
                f"commit_transactions takes a list of transactions or ids, got {type(txns).__name__}")
        ids = []
        for t in txns:
            if isinstance(t, RemoteTransaction):
                t = t.txn_id
            ids.append(str(t))
        named = set()
        for i in ids:
            try:
                named.add(uuid.UUID(i))
            except ValueError:
                pass  # not an id: the owner says so
        for txn in list(self._live):  # buffered events of every object of those ids go first
            if txn.txn_id in named:
                txn.flush()
        return bool(self._call("commit_transactions", ids, mark=mark))

    def last_mark(self) -> int | None:
        """The last mark ``commit_transactions`` recorded for this writer id (None: none)."""
        mark = self._call("last_mark")
        return None if mark is None else int(mark)  # type: ignore[call-overload]

    def close(self) -> None:
        """Idempotent. Open transactions stay open (until committed, aborted or expired)."""
        self._close()

    def __repr__(self) -> str:
        return f"<RemoteTransactionalWriter {self.writer_id!r} on {self.scope}/{self.stream}>"


class RemoteTransaction:
    """``Transaction``'s API in a client process (invariant 3); a context manager that
    commits on success and aborts on error."""

    def __init__(self, writer: RemoteTransactionalWriter, handle: Handle) -> None:
        self._writer = writer
        self._h = handle.id
        self.txn_id = uuid.UUID(str(handle.info["txn_id"]))
        self._buf: list[tuple[bytes | None, bytes]] = []
        self._size = 0
        self._lock = threading.Lock()
        writer.track(self)

    def write_event(self, event: object, routing_key: str | None = None) -> None:
        self.write_events([event], routing_key)

    def write_events(self, events: Iterable[object], routing_key: str | None = None) -> None:
        kb = _key(routing_key)
        evs = [_to_bytes(e, self._writer._ser) for e in events]
        with self._lock:
            for ev in evs:
                self._buf.append((kb, ev))
                self._size += len(ev) + 16 + (0 if kb is None else len(kb))
                if self._size >= TXN_BATCH:
                    self._send()

    def _send(self) -> None:
        if self._writer.closed:
            raise self._writer._closed_error()
        if self._buf:
            self._writer._conn.write(encode_write(self._h, 0, self._buf))
            self._buf, self._size = [], 0

    def _then(self, method: str, *args: object) -> object:
        with self._lock:
            self._send()
            return self._writer._conn.call(self._h, method, *args)

    def flush(self) -> None:
        self._then("flush")

    def commit(self, timestamp: int | None = None) -> None:
        self._then("commit", timestamp)

    def abort(self) -> None:
        with self._lock:
            self._buf, self._size = [], 0
        self._then("abort")

    def ping(self, lease: float | None = None) -> None:
        self._then("ping", lease)

    def status(self) -> TxnStatus:
        return TxnStatus(self._then("status"))

    def __enter__(self) -> "RemoteTransaction":
        return self

    def __exit__(self, exc_type: object, *exc: object) -> None:
        if self.status() != TxnStatus.OPEN:
            return
        if exc_type is None:
            self.commit()
        else:
            self.abort()

    def __repr__(self) -> str:
        return f"<RemoteTransaction {self.txn_id}>"


# ---------------------------------------------------------------------------- byte streams
class RemoteByteStream(io.RawIOBase):
    """``ByteStream``'s API in a client process: writes go without waiting and are durable
    after ``flush()``; reads, seeks and offsets are calls."""

    def __init__(self, conn: Connection, handle: Handle, forget: Forget) -> None:
        super().__init__()
        self._conn = conn
        self._h = handle.id
        self.scope, self.stream = str(handle.info["scope"]), str(handle.info["stream"])
        self._forget = forget
        self._closing = False

    def readable(self) -> bool:
        return True

    def writable(self) -> bool:
        return True

    def seekable(self) -> bool:
        return True

    def _call(self, method: str, *args: object) -> object:
        if self.closed:
            raise ValueError(f"I/O operation on closed byte stream {self.scope}/{self.stream}")
        return self._conn.call(self._h, method, *args)

    def write(self, b: "bytes | bytearray | memoryview") -> int:  # type: ignore[override]
        """Append ``b`` at the tail; returns its length. Durable after ``flush()``."""
        if self.closed:
            raise ValueError(f"I/O operation on closed byte stream {self.scope}/{self.stream}")
        view = memoryview(b).cast("B")
        for i in range(0, len(view), BYTES_WRITE_MAX):
            self._conn.write_bytes(self._h, view[i:i + BYTES_WRITE_MAX])
        self._conn.raise_write_error()
        return len(view)

    def flush(self) -> None:
        """Wait until every byte written through this object is durable."""
        if self._closing:
            return
        self._call("flush")

    def readinto(self, b: "bytearray | memoryview") -> int:  # type: ignore[override]
        """Read up to ``len(b)`` bytes at the position into ``b``; 0 at the durable tail."""
        if self.closed:
            raise ValueError(f"I/O operation on closed byte stream {self.scope}/{self.stream}")
        out = memoryview(b).cast("B")
        data = self._conn.fetch(Kind.BYTES, self._h, "read_bytes", len(out))
        if len(data) > len(out):
            raise ProtocolError(f"a byte stream read of {len(out)} bytes answered {len(data)}")
        out[:len(data)] = data
        return len(data)

    def seek(self, offset: int, whence: int = io.SEEK_SET) -> int:
        return int(self._call("seek", offset, whence))  # type: ignore[call-overload]

    def tell(self) -> int:
        return int(self._call("tell"))  # type: ignore[call-overload]

    def truncate(self, size: int | None = None) -> int:
        raise io.UnsupportedOperation(
            f"byte stream {self.scope}/{self.stream} is append-only; truncate_before(offset) drops a prefix")

    def head_offset(self) -> int:
        return int(self._call("head_offset"))  # type: ignore[call-overload]

    def tail_offset(self) -> int:
        return int(self._call("tail_offset"))  # type: ignore[call-overload]

    def available(self) -> int:
        return int(self._call("available"))  # type: ignore[call-overload]

    def truncate_before(self, offset: int) -> None:
        self._call("truncate_before", offset)

    def seal(self) -> None:
        self._call("seal")

    def close(self) -> None:
        """Flush and close. Idempotent."""
        if self.closed:
            return
        try:
            self._conn.call(self._h, "close")  # the owner's close flushes
        except ConnectionLostError:
            pass
        finally:
            self._conn.close()
            self._forget(self)
            self._closing = True
            try:
                super().close()
            finally:
                self._closing = False

    def __repr__(self) -> str:
        return f"<RemoteByteStream {self.scope}/{self.stream}{' closed' if self.closed else ''}>"


# ---------------------------------------------------------------------------- watchers, slices
class RemoteSegmentWatcher(_Owned):
    """``SegmentWatcher``'s API in a client process; a callback runs on a thread here."""

    def __init__(self, conn: Connection, handle: Handle,
                 callback: "Callable[[SegmentCountChange], object] | None", forget: Forget) -> None:
        super().__init__(conn, handle, forget, True)
        self.scope, self.stream = str(handle.info["scope"]), str(handle.info["stream"])
        self.errors: list[BaseException] = []
        self._lock = threading.Lock()
        if callback is not None:
            threading.Thread(target=self._run, args=(callback,), daemon=True,
                             name=f"pe-watch-{self.scope}/{self.stream}").start()

    def get(self, timeout: float | None = None) -> "SegmentCountChange | None":
        """The next change, or None when ``timeout`` passes (or the watcher is closed)."""
        with self._lock:
            if self._closed:
                return None
            try:
                return self._call("get", timeout)  # type: ignore[return-value]
            except ConnectionLostError:
                if self._closed:
                    return None
                raise

    def __iter__(self) -> "Iterator[SegmentCountChange]":
        while True:
            item = self.get(None)
            if item is None:
                return
            yield item

    def _run(self, callback: "Callable[[SegmentCountChange], object]") -> None:
        try:
            for change in self:
                try:
                    callback(change)
                except Exception as exc:  # noqa: BLE001 - kept, as in process
                    self.errors.append(exc)
        except Exception as exc:  # noqa: BLE001 - the connection failed: kept for the caller
            self.errors.append(exc)

    def close(self) -> None:
        """Stop watching (idempotent)."""
        if self._closed:
            return
        self._closed = True
        self._conn.close()  # wakes a get() waiting in another thread; the owner closes it
        if self._forget is not None:
            self._forget(self)

    def __repr__(self) -> str:
        return f"<RemoteSegmentWatcher {self.scope}/{self.stream}>"


class RemoteSlice(_Owned):
    """``Slice``'s API in a client process: the owner holds the snapshot; ``to_arrow()``
    comes as Arrow IPC, iteration in batches of events."""

    def __init__(self, conn: Connection, handle: Handle, scope: str, stream: str,
                 serializer: Serializer | None) -> None:
        super().__init__(conn, handle, None, False)
        self._names = (scope, stream)
        self._ser = serializer
        self.ranges: list[tuple[int, int, int]] = [tuple(r) for r in handle.info["ranges"]]  # type: ignore[attr-defined, misc]
        self.nbytes = int(handle.info["nbytes"])  # type: ignore[call-overload]
        self._tables = itertools.count()  # ids of this slice's Arrow tables (next() is atomic)

    def __iter__(self) -> Iterator[EventRead]:
        self._call("rewind")
        while True:
            evs, end, meta = self._conn.read(self._h, "read", 0, READ_BATCH)
            if len(evs) == 1 and meta is not None:
                evs = [with_large(self._conn, self._h, evs[0], meta)]
            for ev in evs:
                yield EventRead.make(_payload(ev, self._ser), ev.routing_key, ev.segment_id,
                                     ev.offset, ev.length, self._names)
            if end or not evs:
                return

    def to_arrow(self, *, write_time: bool = False) -> "pyarrow.Table":
        """A pyarrow Table with the columns of ``Slice.to_arrow``."""
        import pyarrow as pa

        from ..arrow import SCHEMA, TIMED_SCHEMA
        return pa.Table.from_batches(list(self.arrow_batches(write_time=write_time)),
                                     schema=TIMED_SCHEMA if write_time else SCHEMA)

    def arrow_batches(self, *, write_time: bool = False) -> "Iterator[pyarrow.RecordBatch]":
        """``to_arrow()``'s record batches, fetched a part (a few MiB) at a time."""
        import pyarrow as pa

        from ..arrow import SCHEMA, TIMED_SCHEMA
        schema = TIMED_SCHEMA if write_time else SCHEMA
        stream = next(self._tables)  # this table's own stream in the owner (two at once stay apart)
        first = True
        while True:
            if self._closed:
                raise self._closed_error()
            body = self._conn.fetch(Kind.ARROW, self._h, "arrow", write_time, first, stream)
            first = False
            if not body or body[0] not in (0, 1):
                raise ProtocolError("an ARROW answer starts with its last-part flag")
            try:
                reader = pa.ipc.open_stream(memoryview(body)[1:])
                if not reader.schema.equals(schema):
                    raise ProtocolError(f"an ARROW answer has schema {reader.schema}, not the slice's")
                batches = list(reader)
            except (pa.ArrowInvalid, OSError) as exc:
                raise ProtocolError(f"an ARROW answer is not an Arrow IPC stream: {exc}") from None
            yield from batches
            if body[0] == 1:
                return

    def to_pandas(self) -> "pandas.DataFrame":
        """As ``Slice.to_pandas``: ``to_arrow()``'s columns and a ``segment`` column."""
        from ..notebook import segment_frame
        return segment_frame(self.to_arrow())

    def close(self) -> None:
        """Let the owner drop the snapshot (it keeps the last few a connection made)."""
        self._close()

    def __repr__(self) -> str:
        return f"<RemoteSlice {self._names[0]}/{self._names[1]} {self.nbytes} bytes>"
