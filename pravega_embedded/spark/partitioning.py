"""How a read's segment ranges become Spark partitions, as Spark's file sources do it.

Owns: the number of partitions a read gets (``partition_count``), the size of the pieces its
ranges are split into first (``piece_bytes``), and packing the pieces into partitions of about
equal bytes (``pack``).

Spark's own Parquet read of a folder aims at one partition per core when the data is small
(``spark.sql.files.maxPartitionBytes`` at most each, 128 MiB by default): a 4-segment stream
read as 4 partitions of unequal size on 2 cores runs the last big one alone, and every
partition more costs a Python task. So: ``k`` partitions, at least the parallelism asked for
(the session's default parallelism, or option ``min_partitions`` if larger) and enough for
about ``max_partition_bytes`` each; ranges split into pieces (``piece_bytes``); the pieces, in
the read's order, cut into ``k`` consecutive runs of about equal bytes; the contiguous pieces
of one segment in a run joined again.

Invariants:
  1. ``pack`` keeps every piece exactly once, in order: a partition's ranges are in the read's
     order (a segment's pieces ascending), so each segment is still read in offset order.
  2. ``pack`` returns at most ``k`` partitions, none empty; a piece goes to the run that holds
     its middle byte, so no run is off its share by more than half a piece.
  3. Pieces are joined only when they are of one segment, touch, and are read from the same
     place (the same tier-2 URL, or both through the store).

Thread-safety: pure functions.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from typing import Sequence

from ..batch import SegmentRange

__all__ = ["Planned", "partition_count", "piece_bytes", "pack", "default_parallelism",
           "PIECES_PER_PARTITION"]

PIECES_PER_PARTITION = 4  # ranges are split this much finer than a partition, to even them out


@dataclass(frozen=True, slots=True)
class Planned:
    """A planned piece of a read: a segment range, and the tier-2 URL to read it from (None:
    read it from what ``path`` names)."""

    range: SegmentRange
    tier2: str | None = None


def default_parallelism() -> int:
    """The planning process's CPUs: the parallelism of a ``local[*]`` session, used when the
    source was registered without a session that says (``register``)."""
    try:
        return max(1, len(os.sched_getaffinity(0)))
    except (AttributeError, OSError):
        return max(1, os.cpu_count() or 1)


def partition_count(total: int, parallelism: int, max_partition_bytes: int) -> int:
    """How many partitions a read of ``total`` bytes gets: ``parallelism``, or more so none
    holds more than ``max_partition_bytes``."""
    return max(1, parallelism, -(-total // max_partition_bytes))


def piece_bytes(total: int, partitions: int, parallelism: int, max_partition_bytes: int) -> int:
    """The size ranges are split to before packing: a ``PIECES_PER_PARTITION``-th of a
    partition's share while there is a partition per core (the pieces even out the few
    tasks); ``max_partition_bytes`` once the size makes more partitions than cores (Spark
    evens out many tasks itself, and a tier-2 file no larger is not opened to be split)."""
    if partitions > parallelism:
        return max(1, max_partition_bytes)
    return max(1, -(-total // (partitions * PIECES_PER_PARTITION)))


def pack(pieces: Sequence[Planned], k: int) -> list[tuple[Planned, ...]]:
    """``pieces`` as at most ``k`` consecutive runs of about equal bytes (invariants 1 to 3)."""
    total = sum(p.range.nbytes for p in pieces)
    runs: list[list[Planned]] = []
    before = 0
    for p in pieces:
        n = p.range.nbytes
        # the run holding this piece's middle byte (the last run for an empty piece at the end)
        run = min(k - 1, (2 * before + n) * k // (2 * total)) if total else 0
        if not runs or (run >= len(runs) and runs[-1]):
            runs.append([])
        runs[-1].append(p)
        before += n
    return [_joined(r) for r in runs]


def _joined(run: list[Planned]) -> tuple[Planned, ...]:
    out: list[Planned] = []
    for p in run:
        last = out[-1] if out else None
        if (last is not None and last.tier2 == p.tier2 and last.range.segment_id == p.range.segment_id
                and last.range.end == p.range.start):
            r = last.range
            out[-1] = Planned(SegmentRange(scope=r.scope, stream=r.stream, segment_id=r.segment_id,
                                           start=r.start, end=p.range.end), p.tier2)
        else:
            out.append(p)
    return tuple(out)
