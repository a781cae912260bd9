"""The PySpark Python data source "pravega" (pyspark >= 4.2): batch and micro-batch reads, and
the sink.

Owns: ``PravegaDataSource`` (its name, schema, batch reader, stream reader (``microbatch``) and
writers (``sink``)), ``PravegaBatchReader`` (a read's partitions, each a run of segment ranges
(``partitioning``), and reading one) and ``PravegaPushdownReader`` (the same, taking Spark's filters: ``pushdown``).
Options are parsed by ``options``; the work is ``batchread``'s. Spark pickles the reader to
its Python workers: it holds only the parsed options (and pushed bounds), never an open store.

Invariants:
  1. Planning happens once per query (``partitions``): every partition of a read comes from one
     ``get_segments`` snapshot, so a read is consistent even while writers append.
  2. A partition is a run of SegmentRanges as JSON text, each with the tier-2 URL to read it
     from, if any (``RangePartition``): what a worker reads depends on nothing else.
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
from .batchread import SPARK_SCHEMA, plan_partitions, read_range
from .options import ReadOptions, parse_read_options, parse_stream_options, parse_write_options
from .partitioning import Planned
from .pushdown import NO_BOUNDS, Bounds, push

__all__ = ["PravegaDataSource", "PravegaPushdownSource", "PravegaBatchReader", "PravegaPushdownReader",
           "RangePartition", "partitions_of", "read_partition"]


class RangePartition(InputPartition):
    """The pieces of a read one Spark task reads, in order (``partitioning``): each a segment
    range as JSON text (small and picklable) and the tier-2 URL to read it from (None: from
    the read's path)."""

    def __init__(self, planned: Sequence[Planned]) -> None:
        super().__init__(tuple((p.range.to_json(), p.tier2) for p in planned))

    @property
    def planned(self) -> tuple[Planned, ...]:
        return tuple(Planned(SegmentRange.from_json(r), t2) for r, t2 in self.value)


def partitions_of(runs: Sequence[Sequence[Planned]]) -> list[InputPartition]:
    """Spark's partitions for packed pieces (one empty partition when there are none: Spark
    needs at least one)."""
    if not runs:
        return [InputPartition(None)]
    return [RangePartition(run) for run in runs]


def read_partition(opts: ReadOptions, partition: InputPartition,
                   bounds: Bounds = NO_BOUNDS) -> Iterator[pa.RecordBatch]:
    """The record batches of ``partition``'s pieces, one after the other."""
    if not isinstance(partition, RangePartition):
        return
    for p in partition.planned:
        yield from read_range(opts, p.range, tier2=p.tier2, bounds=bounds)


class PravegaBatchReader(DataSourceReader):
    """A batch read between two cuts (docs/spark.md), planned for ``parallelism`` tasks
    (None: the planning process's CPUs) unless option ``min_partitions`` says."""

    def __init__(self, opts: ReadOptions, parallelism: int | None = None) -> None:
        self.opts = opts
        self.parallelism = parallelism
        self.bounds = NO_BOUNDS

    def partitions(self) -> Sequence[InputPartition]:
        return partitions_of(plan_partitions(self.opts, self.bounds, self.parallelism))

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        return read_partition(self.opts, partition, self.bounds)


class PravegaPushdownReader(PravegaBatchReader):
    """A batch read that takes Spark's filters on segment_id, offset and write_time
    (``pushdown``): ranges and tier-2 files no row of which can match are not read, and each
    task yields only matching rows. Spark uses it only with
    ``spark.sql.python.filterPushdown.enabled`` (docs/spark.md)."""

    def pushFilters(self, filters: list[Filter]) -> Iterable[Filter]:
        self.bounds, rest = push(filters)
        return rest


class PravegaDataSource(DataSource):
    """``spark.read.format("pravega")``: a stream of a store directory (live, any process)
    or of a tier-2 URL, between two StreamCuts (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "pravega"

    def schema(self) -> str:
        return SPARK_SCHEMA

    pushdown = False  # the reader takes filters unless option filter_pushdown says otherwise
    parallelism: int | None = None  # the session's default parallelism, set by ``register``

    def reader(self, schema: StructType) -> DataSourceReader:
        opts = parse_read_options(self.options)
        if self.pushdown if opts.filter_pushdown is None else opts.filter_pushdown:
            return PravegaPushdownReader(opts, self.parallelism)
        return PravegaBatchReader(opts, self.parallelism)

    def streamReader(self, schema: StructType) -> DataSourceStreamReader:
        from .microbatch import PravegaStreamReader
        return PravegaStreamReader(parse_stream_options(self.options), self.parallelism)

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
