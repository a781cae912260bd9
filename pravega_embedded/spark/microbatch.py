"""Micro-batch reads for ``spark.readStream.format("pravega")``.

Owns: the stream reader Spark's driver keeps for a query: its offsets (StreamCut frontiers as
JSON with sorted keys), how far each micro-batch goes (admission control: the soft limits
``max_events_per_trigger`` and ``max_bytes_per_trigger``, or everything available when Spark
asks so), ``Trigger.AvailableNow`` (a target cut fixed when the query starts), and a batch's
partitions (the segment ranges between two offsets, read as batch reads are).

Invariants:
  1. An offset is ``{"scope": .., "segments": {segment: offset, ...}, "stream": ..}`` with its
     keys in sorted order at every level (segments sorted as strings), so the same cut is the
     same JSON text: Spark compares offsets as text.
  2. Consecutive offsets are consecutive cuts (``get_next_stream_cut``): each batch reads the
     events between them exactly once, successors only after their predecessors (a
     successor's events are never in an earlier batch than its predecessor's last ones), and a
     batch with events to read always moves (limits are soft).
  3. With AvailableNow no offset passes the target cut taken in
     ``prepareForTriggerAvailableNow``; the query ends once the target is reached.

Thread-safety: Spark calls one method at a time.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import DataSourceStreamReader, InputPartition
from pyspark.sql.streaming.datasource import ReadAllAvailable, ReadLimit, ReadMaxBytes, SupportsTriggerAvailableNow

from ..batch import SegmentRange
from ..errors import InvalidConfigurationError
from ..streamcut import StreamCut, format_segment_id, segment_id
from .batchread import open_source, read_range
from .options import StreamOptions
from .source import RangePartition

__all__ = ["PravegaStreamReader", "offset_of", "cut_of"]

_ALL = 1 << 62  # "everything available": no byte budget


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

    def __init__(self, opts: StreamOptions) -> None:
        self.opts = opts
        self._target: StreamCut | None = None  # AvailableNow's end (invariant 3)

    # ------------------------------------------------------------------ offsets
    def initialOffset(self) -> dict:
        o = self.opts
        with open_source(o.read) as store:
            info = store.stream_info(o.scope, o.stream)
            if o.start == "latest":
                return offset_of(info.tail)
            return offset_of(info.head if o.start is None else o.start)  # type: ignore[arg-type]

    def getDefaultReadLimit(self) -> ReadLimit:
        return ReadMaxBytes(self.opts.max_bytes)  # the options' limits apply (latestOffset)

    def latestOffset(self, start: dict, limit: ReadLimit) -> dict:
        o = self.opts
        cut = cut_of(start, o.scope, o.stream)
        if isinstance(limit, ReadAllAvailable):
            budget, events = _ALL, None
        else:
            budget, events = o.max_bytes, o.max_events
        with open_source(o.read) as store:
            nxt = store.get_next_stream_cut(o.scope, o.stream, cut, budget, max_events=events,
                                            end=self._target)
        return offset_of(nxt)

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
            return [RangePartition(r) for r in store.get_segments(o.scope, o.stream, a, b)]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_range(self.opts.read, SegmentRange.from_json(partition.value))

    def commit(self, end: dict) -> None:
        """Nothing to release: the store keeps what the stream's retention keeps."""

    def stop(self) -> None:
        """Nothing is held open between calls."""
