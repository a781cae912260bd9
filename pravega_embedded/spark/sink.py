"""The sink of ``format("pravega")``: ``df.write`` and ``writeStream`` into a stream of a store.

Owns: checking the rows' schema (``event`` BINARY or STRING required, ``routing_key`` STRING
optional, other columns ignored, so a ``format("pravega")`` read can be written as it is), a
task's write, the driver's commit and abort, and their commit message.

Invariants:
  1. Exactly once (the default): a task attempt writes its rows into a transaction of its own,
     which only the driver's commit makes visible, every task's at once
     (``commit_transactions``). A failed attempt's transaction is never committed: the task
     aborts it when it can, its lease (``txn_lease``) ends it when its process died.
  2. A micro-batch's commit records the batch id as the mark of the query's writer id
     (``spark-sink-<query id>``, or the ``writer_id`` option) in that same step, so a batch
     Spark runs again after a restart commits nothing.
  3. With ``exactly_once=false`` a task's rows are visible once it flushed them at its end; a
     task Spark retries writes them again (at least once). The driver's commit does nothing.
  4. The writers hold only parsed options (picklable): every call opens the store and closes it.

Thread-safety: Spark calls these from its planner, task and commit processes, one at a time.
"""

from __future__ import annotations

import logging
import time
import uuid
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceArrowWriter, DataSourceStreamArrowWriter, WriterCommitMessage
from pyspark.sql.types import BinaryType, StringType, StructType

from ..errors import ConnectionLostError, InvalidConfigurationError, SerializationError, TxnFailedError
from ..transactions import TxnStatus
from .batchread import Handovers, open_source
from .options import WriteOptions

if TYPE_CHECKING:
    from ..remote.client import RemoteStore
    from ..store import Store

__all__ = ["SinkCommit", "PravegaBatchWriter", "PravegaStreamWriter", "check_schema", "prepare",
           "write_task", "commit_tasks", "abort_tasks", "query_writer_id"]

LOG = logging.getLogger("pravega_embedded.spark")
QUERY_ID = "sql.streaming.queryId"  # Spark's local property: the query's id, kept by its checkpoint


@dataclass(frozen=True)
class SinkCommit(WriterCommitMessage):
    """What a task hands the driver: its transaction (None: it wrote no rows, or wrote them
    plainly), how many events, and the streaming query it ran for (None: a batch write)."""

    txn_id: str | None
    events: int
    query_id: str | None


def check_schema(schema: StructType) -> None:
    """``event`` BINARY or STRING, required; ``routing_key`` STRING, optional."""
    fields = {f.name.lower(): f for f in schema.fields}
    ev = fields.get("event")
    if ev is None or not isinstance(ev.dataType, (BinaryType, StringType)):
        raise InvalidConfigurationError(
            "format('pravega') writes a column 'event' (BINARY, or STRING written as UTF-8), got "
            f"{schema.simpleString()}: select or alias one (docs/spark.md)")
    key = fields.get("routing_key")
    if key is not None and not isinstance(key.dataType, StringType):
        raise InvalidConfigurationError(
            f"format('pravega'): column 'routing_key' must be STRING, got {key.dataType.simpleString()}")


def prepare(opts: WriteOptions, schema: StructType, overwrite: bool, what: str) -> None:
    """The planner's checks: append only, the schema, and the stream (created if missing)."""
    if overwrite:
        raise InvalidConfigurationError(
            f"{what}: a stream is appended to, never overwritten: use mode('append') "
            "(outputMode 'append' or 'update' for a streaming query)")
    check_schema(schema)
    with open_source(opts.store, create=True) as store:
        store.create_scope(opts.scope, exist_ok=True)
        store.create_stream(opts.scope, opts.stream, exist_ok=True)


def _rows(batch: pa.RecordBatch) -> Iterator[tuple[str | None, list[bytes]]]:
    """The batch's events in runs of one routing key, in row order."""
    names = [n.lower() for n in batch.schema.names]
    col = batch.column(names.index("event"))
    events = col.to_pylist()
    keys = batch.column(names.index("routing_key")).to_pylist() if "routing_key" in names else None
    run: list[bytes] = []
    run_key: str | None = None
    for i, ev in enumerate(events):
        if ev is None:
            raise SerializationError(f"format('pravega'): row {i} of a batch has a null event")
        key = None if keys is None else keys[i]
        if run and key != run_key:
            yield run_key, run
            run = []
        run_key = key
        run.append(ev.encode("utf-8") if isinstance(ev, str) else ev)
    if run:
        yield run_key, run


def _task() -> tuple[str, str | None]:
    """A name for this task attempt's writer, and the streaming query's id (None: batch)."""
    from pyspark import TaskContext

    ctx = TaskContext.get()
    if ctx is None:
        return f"spark-task-{uuid.uuid4().hex[:12]}", None
    return (f"spark-task-{ctx.stageId()}-{ctx.partitionId()}-{ctx.attemptNumber()}",
            ctx.getLocalProperty(QUERY_ID))


def write_task(opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> SinkCommit:
    """A task's rows into the stream (invariants 1, 3)."""
    name, query_id = _task()
    with open_source(opts.store) as store:
        if not opts.exactly_once:
            return SinkCommit(None, _write_plain(store, opts, batches), query_id)
        tw = store.create_transactional_writer(opts.scope, opts.stream, writer_id=name)
        txn = None
        n = 0
        pinged = time.monotonic()
        try:
            for batch in batches:
                for key, run in _rows(batch):
                    if txn is None:
                        txn = tw.begin_txn(lease=opts.txn_lease)
                    txn.write_events(run, routing_key=key)
                    n += len(run)
                if txn is not None and time.monotonic() - pinged > opts.txn_lease / 4:
                    txn.ping()  # a long task keeps its transaction alive
                    pinged = time.monotonic()
            if txn is not None:
                txn.flush()  # durable (and, from a client, at the owner) before the driver commits
        except BaseException:
            if txn is not None:
                _abort_quietly(txn, name)
            raise
        finally:
            tw.close()
        return SinkCommit(None if txn is None else str(txn.txn_id), n, query_id)


def _write_plain(store: "Store | RemoteStore", opts: WriteOptions, batches: Iterator[pa.RecordBatch]) -> int:
    n = 0
    with store.create_writer(opts.scope, opts.stream) as w:
        for batch in batches:
            for key, run in _rows(batch):
                for ev in run:
                    w.write_event(ev, routing_key=key)
                n += len(run)
        w.flush()
    return n


def _abort_quietly(txn: object, name: str) -> None:
    try:
        txn.abort()  # type: ignore[attr-defined]
    except Exception as exc:  # the task's own failure is what Spark must see; the lease ends it
        LOG.warning("task %s could not abort its transaction (its lease will): %s", name, exc)


def query_writer_id(opts: WriteOptions, messages: Sequence[SinkCommit | None]) -> str:
    """The writer id a streaming query's marks are recorded under (invariant 2)."""
    if opts.writer_id is not None:
        return opts.writer_id
    ids = {m.query_id for m in messages if m is not None and m.query_id}
    if len(ids) != 1:
        raise InvalidConfigurationError(
            "format('pravega') sink: Spark did not tell the tasks the streaming query's id "
            f"(found {sorted(ids)}): give option writer_id, the same on every run of the query")
    return f"spark-sink-{ids.pop()}"


def commit_tasks(opts: WriteOptions, messages: Sequence[SinkCommit | None], writer_id: str,
                 mark: int | None) -> bool:
    """Commit every task's transaction as one (with ``mark``: recorded in that step). False:
    the mark says this batch was committed before, so this run of it committed nothing."""
    ids = [m.txn_id for m in messages if m is not None and m.txn_id]
    if not opts.exactly_once or not ids:
        return True
    handovers = Handovers(f"the commit of {len(ids)} transactions to {opts.scope}/{opts.stream}")
    tried = False
    while True:
        try:
            with open_source(opts.store) as store:
                tw = store.create_transactional_writer(opts.scope, opts.stream, writer_id=writer_id)
                try:
                    done = tw.commit_transactions(ids, mark=mark)
                except TxnFailedError:
                    if not tried:
                        raise
                    outcome = _lost_answer(tw, ids, mark)  # the owner went on without us?
                    if outcome is None:
                        time.sleep(0.05)  # it is still committing them
                        continue
                    done = outcome
                finally:
                    tw.close()
        except ConnectionLostError as exc:
            tried = True
            if not handovers.retry(None, exc):
                raise
            continue
        if not done:
            LOG.info("batch %s of writer %s was committed before: this run of it committed nothing",
                     mark, writer_id)
        return done


def _lost_answer(tw: object, ids: list[str], mark: int | None) -> bool | None:
    """What became of a commit whose answer was lost with the owner: True (committed), False
    (a replayed batch: aborted, the mark there), None (still committing); else it raises."""
    statuses = {tw.get_txn(i).status() for i in ids}  # type: ignore[attr-defined]
    if statuses == {TxnStatus.COMMITTED}:
        return True
    if statuses == {TxnStatus.ABORTED} and mark is not None and (tw.last_mark() or -1) >= mark:  # type: ignore[attr-defined]
        return False
    if TxnStatus.COMMITTING in statuses or TxnStatus.ABORTING in statuses:
        return None
    raise TxnFailedError(f"the commit of {len(ids)} transactions found them {sorted(s.value for s in statuses)} "
                         "after losing the store's owner: the batch fails (Spark runs it again)")


def abort_tasks(opts: WriteOptions, messages: Sequence[SinkCommit | None]) -> None:
    """Abort the transactions of the tasks that succeeded (a failed one aborted its own)."""
    ids = [m.txn_id for m in messages if m is not None and m.txn_id]
    if not opts.exactly_once:
        if any(m is not None and m.events for m in messages):
            LOG.warning("a write to %s/%s with exactly_once=false failed: the rows of the tasks that "
                        "succeeded are in the stream (at least once)", opts.scope, opts.stream)
        return
    if not ids:
        return
    with open_source(opts.store) as store:
        tw = store.create_transactional_writer(opts.scope, opts.stream, writer_id="spark-abort")
        try:
            for i in ids:
                try:
                    tw.get_txn(i).abort()
                except Exception as exc:  # ended or forgotten already: nothing of it is visible
                    LOG.info("transaction %s was not aborted (%s)", i, exc)
        finally:
            tw.close()


class PravegaBatchWriter(DataSourceArrowWriter):
    """``df.write.format("pravega").mode("append").save()``: every task's rows appear at once
    when the job commits, or none (invariant 1)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts
        self.writer_id = f"spark-write-{uuid.uuid4().hex}"  # this job's group commit

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None]) -> None:
        commit_tasks(self.opts, _messages(messages), self.writer_id, None)

    def abort(self, messages: list[WriterCommitMessage | None]) -> None:
        abort_tasks(self.opts, _messages(messages))


class PravegaStreamWriter(DataSourceStreamArrowWriter):
    """``writeStream.format("pravega")``: each micro-batch's rows appear once, at its commit,
    even when Spark runs the batch again after a restart (invariants 1, 2)."""

    def __init__(self, opts: WriteOptions) -> None:
        self.opts = opts

    def write(self, iterator: Iterator[pa.RecordBatch]) -> SinkCommit:
        return write_task(self.opts, iterator)

    def commit(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        msgs = _messages(messages)
        if self.opts.exactly_once and any(m is not None and m.txn_id for m in msgs):
            commit_tasks(self.opts, msgs, query_writer_id(self.opts, msgs), batchId)

    def abort(self, messages: list[WriterCommitMessage | None], batchId: int) -> None:
        abort_tasks(self.opts, _messages(messages))


def _messages(messages: Sequence[WriterCommitMessage | None]) -> list[SinkCommit | None]:
    out: list[SinkCommit | None] = []
    for m in messages:
        if m is not None and not isinstance(m, SinkCommit):
            raise InvalidConfigurationError(f"format('pravega') sink: a task sent {type(m).__name__}, "
                                            "not its SinkCommit")
        out.append(m)
    return out
