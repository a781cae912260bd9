"""Micro-batch reads for ``spark.readStream.format("pravega")``.

Owns: the stream reader Spark's driver keeps for a query: its offsets (StreamCut frontiers as
JSON with sorted keys), how far each micro-batch goes (admission control: the soft limits
``max_events_per_trigger`` and ``max_bytes_per_trigger``, or everything available when Spark
asks so; ``min_events_per_trigger`` waiting at most ``max_trigger_delay``),
``Trigger.AvailableNow`` (a target cut fixed when the query starts), data lost to retention
(``fail_on_data_loss``) and a batch's partitions (the segment ranges between two offsets, read
as batch reads are: tiered ones straight from tier 2).

Invariants:
  1. An offset is ``{"scope": .., "segments": {segment: offset, ...}, "stream": ..}`` with its
     keys in sorted order at every level (segments sorted as strings), so the same cut is the
     same JSON text: Spark compares offsets as text.
  2. Consecutive offsets are consecutive cuts (``get_next_stream_cut``): each batch reads the
     events between them exactly once, successors only after their predecessors (a
     successor's events are never in an earlier batch than its predecessor's last ones), and a
     batch with events to read always moves (limits are soft).
  3. With AvailableNow no offset passes the target cut taken in
     ``prepareForTriggerAvailableNow``; the query ends once the target is reached
     (``min_events_per_trigger`` does not apply: it would wait for data that never comes).
  4. A start that retention (or a truncate) passed is never read from silently: with
     ``fail_on_data_loss`` (default) the query fails naming the lost ranges; without, the
     start moves up to the head (``Store.skip_truncated``) with a warning naming them.
  5. With ``min_events_per_trigger`` N, no batch is planned while fewer than N events are
     there, until ``max_trigger_delay`` has passed since the last batch (or the query's start).

Thread-safety: Spark calls one method at a time.
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable, Iterator, Sequence, TypeVar

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, SupportsTriggerAvailableNow

from ..batch import SegmentRange, Truncation
from ..errors import InvalidConfigurationError, TruncatedDataError
from ..streamcut import StreamCut, format_segment_id, segment_id
from ..tiering.tier2store import Tier2Store
from ..timelookup import iso_utc
from .batchread import open_source, route
from .options import StreamOptions
from .partitioning import default_parallelism, pack
from .source import partitions_of, read_partition

if TYPE_CHECKING:
    from ..remote.client import RemoteStore
    from ..store import Store

__all__ = ["PravegaStreamReader", "offset_of", "cut_of"]

_ALL = 1 << 62  # "everything available": no byte budget
_RACES = 5  # truncations racing with one call, looked at again before giving up
T = TypeVar("T")
LOG = logging.getLogger("pravega_embedded.spark")


def offset_of(cut: StreamCut) -> dict:
    """Invariant 1."""
    segs = {format_segment_id(sid): off for sid, off in (cut.positions or ())}
    return {"scope": cut.scope, "segments": {k: segs[k] for k in sorted(segs)}, "stream": cut.stream}


def cut_of(offset: dict, scope: str, stream: str) -> StreamCut:
    """The cut an offset stands for (InvalidConfigurationError if it is not one of this
    stream's: a checkpoint of another query)."""
    if not isinstance(offset, dict) or (offset.get("scope"), offset.get("stream")) != (scope, stream) \
            or not isinstance(offset.get("segments"), dict):
        raise InvalidConfigurationError(f"the offset {str(offset)[:120]} is not one of {scope}/{stream}'s "
                                        "(a checkpoint of another query?)")
    positions = {}
    for key, off in offset["segments"].items():
        number, _, epoch = str(key).partition("#")
        if not number.isdigit() or (epoch and not epoch.isdigit()) or isinstance(off, bool) \
                or not isinstance(off, int) or off < 0:
            raise InvalidConfigurationError(f"a bad segment position {key!r}: {off!r} in an offset")
        positions[segment_id(int(number), int(epoch or "0"))] = off
    return StreamCut.of(scope, stream, positions)


class PravegaStreamReader(DataSourceStreamReader, SupportsTriggerAvailableNow):
    """A micro-batch read of one stream (docs/spark.md)."""

    def __init__(self, opts: StreamOptions, parallelism: int | None = None) -> None:
        self.opts = opts
        self.parallelism = parallelism  # a batch's ranges are packed into this many tasks
        self._target: StreamCut | None = None  # AvailableNow's end (invariant 3)
        self._last_batch = time.monotonic()  # when the last batch was planned (invariant 5)

    # ------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict:
        o = self.opts
        with open_source(o.read) as store:
            if o.start_ns is not None:
                return offset_of(store.get_stream_cut_at(o.scope, o.stream, iso_utc(o.start_ns)))
            info = store.stream_info(o.scope, o.stream)
            if o.start == "latest":
                return offset_of(info.tail)
            return offset_of(info.head if o.start is None else o.start)  # type: ignore[arg-type]

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.opts.max_bytes)  # the options' limits apply (latestOffset)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.opts
        cut = cut_of(start, o.scope, o.stream)
        everything = isinstance(limit, ReadAllAvailable)
        budget, events = (_ALL, None) if everything else (o.max_bytes, o.max_events)
        waiting = (o.min_events is not None and not everything and self._target is None
                   and time.monotonic() - self._last_batch < o.max_trigger_delay)
        with open_source(o.read) as store:
            assert not isinstance(store, Tier2Store)  # parse_stream_options refuses tier-2 paths
            cut, nxt = self._past_loss(store, cut, "latestOffset", lambda c: store.get_next_stream_cut(
                o.scope, o.stream, c, budget, max_events=events, end=self._target,
                min_events=o.min_events if waiting else None))
        if nxt != cut:
            self._last_batch = time.monotonic()
        return offset_of(nxt)

    def _past_loss(self, store: "Store | RemoteStore", cut: StreamCut, when: str,
                   step: "Callable[[StreamCut], T]") -> "tuple[StreamCut, T]":
        """``step`` from ``cut``, or from the head where retention passed it (invariant 4). A
        truncation racing with these calls is looked at again: its loss is named (and raised
        or skipped) like any other."""
        o = self.opts
        for attempt in range(_RACES):
            last = attempt == _RACES - 1
            try:
                t = store.skip_truncated(o.scope, o.stream, cut)
            except TruncatedDataError:
                if last:
                    raise
                continue
            start = self._past(t, when)
            try:
                return start, step(start)
            except TruncatedDataError:
                if last:
                    raise
        raise AssertionError("unreachable")

    def _past(self, t: Truncation, when: str) -> StreamCut:
        """Where to go on after ``t``: an error naming the loss, or its cut with a warning."""
        o = self.opts
        if not t.lost:
            return t.cut
        what = (f"{t.nbytes} bytes of events of {o.scope}/{o.stream} were deleted by the stream's "
                f"retention (or a truncate) before this query read them: {t.describe()}")
        if o.fail_on_data_loss:
            raise TruncatedDataError(f"readStream.format('pravega'): {what}. Set option "
                                     "fail_on_data_loss to false to skip lost data with a warning, "
                                     "or keep more of the stream (its retention policy)")
        LOG.warning("%s (%s): skipped, fail_on_data_loss is false; reading on from the head", what, when)
        return t.cut

    def reportLatestOffset(self) -> dict | None:
        o = self.opts
        with open_source(o.read) as store:
            return offset_of(store.stream_info(o.scope, o.stream).tail)

    def prepareForTriggerAvailableNow(self) -> None:
        o = self.opts
        with open_source(o.read) as store:
            self._target = store.stream_info(o.scope, o.stream).tail

    # ------------------------------------------------------------------ batches
    def partitions(self, start: dict, end: dict) -> Sequence[InputPartition]:
        o = self.opts
        a, b = cut_of(start, o.scope, o.stream), cut_of(end, o.scope, o.stream)
        if a == b:
            return []
        with open_source(o.read) as store:
            assert not isinstance(store, Tier2Store)

            def ranges(a: StreamCut) -> list[SegmentRange]:
                b2 = store.skip_truncated(o.scope, o.stream, b).cut  # passed too: none of it is left
                return store.get_segments(o.scope, o.stream, a, b2)

            planned = route(o.read, store, self._past_loss(store, a, "partitions", ranges)[1])
        return partitions_of(pack(planned, self.parallelism or default_parallelism()))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts.read, partition)

    def commit(self, end: dict) -> None:
        """Nothing to release: the store keeps what the stream's retention keeps."""

    def stop(self) -> None:
        """Nothing is held open between calls."""
