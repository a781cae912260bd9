"""How a read's ranges become Spark partitions (spark/partitioning.py): one task per core of the
session, as even as the pieces allow, every piece once and in order. No Spark session needed."""

from __future__ import annotations

import subprocess
import sys

from hypothesis import given, settings
from hypothesis import strategies as st

import pravega_embedded.spark as pes
from pravega_embedded.batch import SegmentRange
from pravega_embedded.spark.partitioning import Planned, pack, partition_count, piece_bytes


def _piece(seg: int, start: int, end: int, tier2: str | None = None) -> Planned:
    return Planned(SegmentRange(scope="s", stream="t", segment_id=seg, start=start, end=end), tier2)


def _pieces(sizes: list[list[int]]) -> list[Planned]:
    """Consecutive pieces of each segment, segment after segment."""
    out = []
    for seg, lengths in enumerate(sizes):
        at = 0
        for n in lengths:
            out.append(_piece(seg, at, at + n))
            at += n
    return out


def _covered(runs) -> list[tuple[int, int]]:
    """Every byte of every segment the runs read, as (segment, offset) pairs in run order."""
    return [(p.range.segment_id, b) for run in runs for p in run for b in range(p.range.start, p.range.end)]


def test_four_unequal_segments_become_two_even_tasks():
    # the bench's stream: 4 segments of 40, 105, 40 and 73 MB, split to pieces of 16 MB at most
    sizes = [[16, 16, 8], [16] * 6 + [9], [16, 16, 8], [16] * 4 + [9]]
    runs = pack(_pieces(sizes), 2)
    assert len(runs) == 2
    loads = [sum(p.range.nbytes for p in run) for run in runs]
    assert max(loads) - min(loads) <= 16  # off by one piece at most (unpacked: 105 against 40)
    # contiguous pieces of one segment are read as one range again
    assert [(p.range.segment_id, p.range.start, p.range.end) for p in runs[0]] == [(0, 0, 40), (1, 0, 96)]
    assert [(p.range.segment_id, p.range.start, p.range.end) for p in runs[1]] == [(1, 96, 105), (2, 0, 40), (3, 0, 73)]


@settings(max_examples=300, deadline=None)
@given(st.lists(st.lists(st.integers(0, 50), min_size=1, max_size=8), min_size=1, max_size=6),
       st.integers(1, 12))
def test_pack_keeps_every_piece_once_in_order_in_at_most_k_even_runs(sizes, k):
    pieces = _pieces(sizes)
    runs = pack(pieces, k)
    assert 1 <= len(runs) <= k and all(runs)
    assert _covered(runs) == _covered([pieces])  # every byte once, in the read's order
    total = sum(p.range.nbytes for p in pieces)
    biggest = max(p.range.nbytes for p in pieces)
    for run in runs:  # each run within a piece of its share
        assert sum(p.range.nbytes for p in run) <= total / k + biggest


def test_pieces_from_different_places_are_not_joined():
    runs = pack([_piece(0, 0, 10, "s3://b/t2"), _piece(0, 10, 20), _piece(0, 20, 30)], 1)
    assert [(p.range.start, p.range.end, p.tier2) for p in runs[0]] == [(0, 10, "s3://b/t2"), (10, 30, None)]


def test_partition_count_and_piece_size():
    assert partition_count(0, 2, 128) == 2
    assert partition_count(100, 2, 128) == 2
    assert partition_count(1000, 2, 128) == 8  # none holds more than max_partition_bytes
    assert piece_bytes(1000, 2, 2, 128) == 125 and piece_bytes(1, 8, 8, 128) == 1  # a core each: quarters
    assert piece_bytes(1000, 8, 2, 128) == 128  # more partitions than cores: max_partition_bytes


class _Conf:
    def __init__(self, values):
        self.values = values

    def get(self, key, default=None):
        return self.values.get(key, default)


class _Registry:
    def __init__(self):
        self.registered = []

    def register(self, cls):
        self.registered.append(cls)


class _Context:
    defaultParallelism = 7


class _Session:
    def __init__(self, context=True, conf=None):
        if context:
            self.sparkContext = _Context()
        self.conf = _Conf(conf or {})
        self.dataSource = _Registry()


def test_register_carries_the_sessions_parallelism_to_the_workers():
    from pyspark import cloudpickle

    session = _Session()
    pes.register(session)
    (cls,) = session.dataSource.registered
    assert cls.name() == "pravega" and cls.parallelism == 7
    assert issubclass(cls, pes.PravegaDataSource) and not issubclass(cls, pes.PravegaPushdownSource)
    # Spark pickles the class to its Python workers, other processes: the number goes with it
    script = ("import pickle, sys; c = pickle.loads(sys.stdin.buffer.read()); "
              "r = c({'path': '/data', 'scope': 'iot', 'stream': 'sensors'}).reader(None); "
              "print(c.name(), c.parallelism, r.parallelism, type(r).__name__)")
    out = subprocess.run([sys.executable, "-c", script], input=cloudpickle.dumps(cls),
                         capture_output=True, check=True).stdout.decode().split()
    assert out == ["pravega", "7", "7", "PravegaBatchReader"]
    assert pes.PravegaDataSource.parallelism is None  # the module's class is unchanged

    connect = _Session(context=False, conf={"spark.default.parallelism": "3",
                                            pes.PUSHDOWN_CONF: "true"})
    pes.register(connect)  # Spark Connect: no SparkContext, the conf if it says
    (cls,) = connect.dataSource.registered
    assert cls.parallelism == 3 and issubclass(cls, pes.PravegaPushdownSource)
    configured = _Session(conf={"spark.default.parallelism": "16"})
    pes.register(configured)  # the setting wins over the cores registered so far
    assert configured.dataSource.registered[0].parallelism == 16
    bare = _Session(context=False)
    pes.register(bare)
    assert bare.dataSource.registered[0].parallelism is None  # the planner's CPUs then
