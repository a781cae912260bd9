"""The PySpark Python data source "pravega" (pyspark >= 4.2): batch and micro-batch reads, and
the sink.

Owns: ``PravegaDataSource`` (its name, schema, batch reader, stream reader (``microbatch``) and
writers (``sink``)), ``PravegaBatchReader`` (a read's partitions, one per segment range, and
reading one) and ``PravegaPushdownReader`` (the same, taking Spark's filters: ``pushdown``).
Options are parsed by ``options``; the work is ``batchread``'s. Spark pickles the reader to
its Python workers: it holds only the parsed options (and pushed bounds), never an open store.

Invariants:
  1. Planning happens once per query (``partitions``): every partition of a read comes from one
     ``get_segments`` snapshot, so a read is consistent even while writers append.
  2. A partition is one SegmentRange as JSON text and the tier-2 URL to read it from, if any
     (``RangePartition``): what a worker reads depends on nothing else.
  3. A reader overrides ``pushFilters`` only where the user asked for pushdown (option
     ``filter_pushdown``, or a session with ``spark.sql.python.filterPushdown.enabled`` when
     ``register`` ran): pyspark refuses such a reader while pushdown is off.

Thread-safety: Spark calls these from its planner and worker processes, one call at a time.
"""

from __future__ import annotations

from typing import Iterable, Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    Filter,
    InputPartition,
)
from pyspark.sql.types import StructType

from ..batch import SegmentRange
from .batchread import SPARK_SCHEMA, Planned, plan_ranges, read_range
from .options import ReadOptions, parse_read_options, parse_stream_options, parse_write_options
from .pushdown import NO_BOUNDS, push

__all__ = ["PravegaDataSource", "PravegaPushdownSource", "PravegaBatchReader", "PravegaPushdownReader",
           "RangePartition", "partitions_of"]


class RangePartition(InputPartition):
    """One segment range of a read (its JSON text: small and picklable), and the tier-2 URL to
    read it from (None: from the read's path)."""

    def __init__(self, rng: SegmentRange, tier2: str | None = None) -> None:
        super().__init__(rng.to_json())
        self.tier2 = tier2

    @property
    def range(self) -> SegmentRange:
        return SegmentRange.from_json(self.value)


def partitions_of(planned: Sequence[Planned]) -> list[InputPartition]:
    """Spark's partitions for planned ranges (one empty partition when there are none: Spark
    needs at least one)."""
    if not planned:
        return [InputPartition(None)]
    return [RangePartition(p.range, p.tier2) for p in planned]


class PravegaBatchReader(DataSourceReader):
    """A batch read between two cuts (docs/spark.md)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        return partitions_of(plan_ranges(self.opts))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return iter(())
        return read_range(self.opts, SegmentRange.from_json(partition.value),
                          tier2=getattr(partition, "tier2", None))


class PravegaPushdownReader(PravegaBatchReader):
    """A batch read that takes Spark's filters on segment_id, offset and write_time
    (``pushdown``): ranges and tier-2 files no row of which can match are not read, and each
    task yields only matching rows. Spark uses it only with
    ``spark.sql.python.filterPushdown.enabled`` (docs/spark.md)."""

    def __init__(self, opts: ReadOptions) -> None:
        super().__init__(opts)
        self.bounds = NO_BOUNDS

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds, rest = push(filters)
        return rest

    def partitions(self) -> Sequence[InputPartition]:
        return partitions_of(plan_ranges(self.opts, self.bounds))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return iter(())
        return read_range(self.opts, SegmentRange.from_json(partition.value),
                          tier2=getattr(partition, "tier2", None), bounds=self.bounds)


class PravegaDataSource(DataSource):
    """``spark.read.format("pravega")``: a stream of a store directory (live, any process)
    or of a tier-2 URL, between two StreamCuts (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "pravega"

    def schema(self) -> str:
        return SPARK_SCHEMA

    pushdown = False  # the reader takes filters unless option filter_pushdown says otherwise

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options)
        if self.pushdown if opts.filter_pushdown is None else opts.filter_pushdown:
            return PravegaPushdownReader(opts)
        return PravegaBatchReader(opts)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .microbatch import PravegaStreamReader
        return PravegaStreamReader(parse_stream_options(self.options))

    def writer(self, schema: StructType, overwrite: bool) -> DataSourceWriter:
        from .sink import PravegaBatchWriter, prepare
        opts = parse_write_options(self.options)
        prepare(opts, schema, overwrite, "df.write.format('pravega')")
        return PravegaBatchWriter(opts)

    def streamWriter(self, schema: StructType, overwrite: bool) -> DataSourceStreamWriter:
        from .sink import PravegaStreamWriter, prepare
        opts = parse_write_options(self.options)
        prepare(opts, schema, overwrite, "writeStream.format('pravega')")
        return PravegaStreamWriter(opts)


class PravegaPushdownSource(PravegaDataSource):
    """``format("pravega")`` as ``register`` makes it when the session has
    ``spark.sql.python.filterPushdown.enabled``: batch reads take filters by default."""

    pushdown = True
