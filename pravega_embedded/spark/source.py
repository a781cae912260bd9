"""The PySpark Python data source "pravega" (pyspark >= 4.2): batch and micro-batch reads, and
the sink.

Owns: ``PravegaDataSource`` (its name, schema, batch reader, stream reader (``microbatch``) and
writers (``sink``)) and ``PravegaBatchReader`` (a read's partitions, one per segment range, and
reading one). Options are parsed by ``options``; the
work is ``batchread``'s. Spark pickles the reader to its Python workers: it holds only the
parsed options and never an open store.

Invariants:
  1. Planning happens once per query (``partitions``): every partition of a read comes from one
     ``get_segments`` snapshot, so a read is consistent even while writers append.
  2. A partition is one SegmentRange as JSON text (``RangePartition``): what a worker reads
     depends on nothing else.

Thread-safety: Spark calls these from its planner and worker processes, one call at a time.
"""

from __future__ import annotations

from typing import Iterator, Sequence

import pyarrow as pa
from pyspark.sql.datasource import (
    DataSource,
    DataSourceReader,
    DataSourceStreamReader,
    DataSourceStreamWriter,
    DataSourceWriter,
    InputPartition,
)
from pyspark.sql.types import StructType

from ..batch import SegmentRange
from .batchread import SPARK_SCHEMA, plan_ranges, read_range
from .options import ReadOptions, parse_read_options, parse_stream_options, parse_write_options

__all__ = ["PravegaDataSource", "PravegaBatchReader", "RangePartition"]


class RangePartition(InputPartition):
    """One segment range of a read (its JSON text: small and picklable)."""

    def __init__(self, rng: SegmentRange) -> None:
        super().__init__(rng.to_json())

    @property
    def range(self) -> SegmentRange:
        return SegmentRange.from_json(self.value)


class PravegaBatchReader(DataSourceReader):
    """A batch read between two cuts (docs/spark.md)."""

    def __init__(self, opts: ReadOptions) -> None:
        self.opts = opts

    def partitions(self) -> Sequence[InputPartition]:
        ranges = plan_ranges(self.opts)
        if not ranges:  # nothing to read: one empty partition (Spark needs at least one)
            return [InputPartition(None)]
        return [RangePartition(r) for r in ranges]

    def read(self, partition: InputPartition) -> Iterator[pa.RecordBatch]:
        if partition.value is None:
            return iter(())
        return read_range(self.opts, SegmentRange.from_json(partition.value))


class PravegaDataSource(DataSource):
    """``spark.read.format("pravega")``: a stream of a store directory (live, any process)
    or of a tier-2 URL, between two StreamCuts (docs/spark.md)."""

    @classmethod
    def name(cls) -> str:
        return "pravega"

    def schema(self) -> str:
        return SPARK_SCHEMA

    def reader(self, schema: StructType) -> DataSourceReader:
        return PravegaBatchReader(parse_read_options(self.options))

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
