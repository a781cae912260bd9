"""Filter pushdown for ``spark.read.format("pravega")`` (``spark.sql.python.filterPushdown.enabled``).

Owns: which of Spark's filters the source takes (comparisons, ``=`` and ``IN`` on
``segment_id``, ``offset`` and ``write_time``; ``IS NOT NULL`` on the first two), the ``Bounds`` they make, what a plan
prunes with them (segment ranges; a tier-2 file by its write-time range) and the exact row
mask a task applies.

Invariants:
  1. A filter taken is applied exactly: every row a task yields satisfies every filter taken,
     and no row satisfying them all is dropped. Planning prunes only what cannot hold a
     matching row: a range of a segment the filters exclude, a range whose offsets
     ``[start, end)`` miss the offset bounds, a tier-2 file whose write times (its manifest's
     ``min_write_us`` .. ``max_write_us``) miss the time bounds. Write times are not assumed
     to grow with offsets (clocks step back; writers race for the append lock), so a time
     bound never becomes a cut.
  2. A filter the source does not take (another column, ``NOT``, ``OR``, a value of another
     type, ``write_time IS NOT NULL``: records of formats 1 and 2 have no write time) is
     returned to Spark unchanged, which evaluates it after the scan. A comparison with a
     null write time drops the row, as in SQL.
  3. ``Bounds`` is a frozen, picklable value: Spark pickles the reader holding it to its tasks.

Thread-safety: immutable values and pure functions.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta, timezone
from typing import Iterable, Iterator

import pyarrow as pa
import pyarrow.compute as pc
from pyspark.sql.datasource import (
    EqualNullSafe,
    EqualTo,
    Filter,
    GreaterThan,
    GreaterThanOrEqual,
    In,
    IsNotNull,
    LessThan,
    LessThanOrEqual,
)

from ..batch import SegmentRange

__all__ = ["Interval", "Bounds", "NO_BOUNDS", "push"]

_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)
_US = timedelta(microseconds=1)
COLUMNS = ("segment_id", "offset", "write_time")


@dataclass(frozen=True, slots=True)
class Interval:
    """The integers ``lo <= x <= hi`` (None: unbounded) that are, if ``values`` is given, one
    of them (``=`` and ``IN``)."""

    lo: int | None = None
    hi: int | None = None
    values: frozenset[int] | None = None

    @property
    def bounded(self) -> bool:
        return self.lo is not None or self.hi is not None or self.values is not None

    def narrowed(self, op: str, value: int | frozenset[int]) -> "Interval":
        """This interval and ``x <op> value`` (op one of > >= < <= = in)."""
        if op in ("=", "in"):
            vals = frozenset([value]) if isinstance(value, int) else value
            return replace(self, values=vals if self.values is None else self.values & vals)
        assert isinstance(value, int)
        if op in (">", ">="):
            lo = value + 1 if op == ">" else value
            return replace(self, lo=lo if self.lo is None else max(self.lo, lo))
        hi = value - 1 if op == "<" else value
        return replace(self, hi=hi if self.hi is None else min(self.hi, hi))

    def meets(self, a: int, b: int) -> bool:
        """Some x with ``a <= x <= b`` is in the interval."""
        lo = a if self.lo is None else max(a, self.lo)
        hi = b if self.hi is None else min(b, self.hi)
        if lo > hi:
            return False
        return self.values is None or any(lo <= v <= hi for v in self.values)

    def mask(self, column: pa.Array) -> pa.Array | None:
        """Which of ``column``'s values are in the interval (None: all are)."""
        parts = []
        if self.lo is not None:
            parts.append(pc.greater_equal(column, self.lo))
        if self.hi is not None:
            parts.append(pc.less_equal(column, self.hi))
        if self.values is not None:
            parts.append(pc.is_in(column, value_set=pa.array(sorted(self.values), pa.int64())))
        if not parts:
            return None
        out = parts[0]
        for p in parts[1:]:
            out = pc.and_(out, p)
        return out


_WHOLE = Interval()


@dataclass(frozen=True, slots=True)
class Bounds:
    """What the filters a read took allow of each column (``write_time`` in µs since the
    epoch, as tier 2 stores it)."""

    segment_id: Interval = field(default=_WHOLE)
    offset: Interval = field(default=_WHOLE)
    write_time: Interval = field(default=_WHOLE)

    @property
    def bounded(self) -> bool:
        return self.segment_id.bounded or self.offset.bounded or self.write_time.bounded

    def keeps(self, rng: SegmentRange) -> bool:
        """``rng`` may hold a matching event (its segment and offsets; invariant 1)."""
        return (rng.nbytes > 0 and self.segment_id.meets(rng.segment_id, rng.segment_id)
                and self.offset.meets(rng.start, rng.end - 1) and self.write_time.meets(-(1 << 62), 1 << 62))

    def keeps_times(self, min_us: int, max_us: int) -> bool:
        """Events written between ``min_us`` and ``max_us`` may match."""
        return self.write_time.meets(min_us, max_us)

    def prune(self, ranges: Iterable[SegmentRange]) -> list[SegmentRange]:
        return [r for r in ranges if self.keeps(r)]

    def apply(self, batches: Iterable[pa.RecordBatch]) -> Iterator[pa.RecordBatch]:
        """``batches`` (the source's schema) with only the rows the bounds allow."""
        for batch in batches:
            keep = None
            for name in COLUMNS:
                col = batch.column(name)
                if name == "write_time":
                    col = pc.cast(col, pa.int64())
                m = getattr(self, name).mask(col)
                if m is not None:
                    keep = m if keep is None else pc.and_(keep, m)
            if keep is None:
                yield batch
            else:
                out = batch.filter(keep)
                if out.num_rows:
                    yield out


NO_BOUNDS = Bounds()

_OPS: dict[type, str] = {EqualTo: "=", EqualNullSafe: "=", GreaterThan: ">",
                         GreaterThanOrEqual: ">=", LessThan: "<", LessThanOrEqual: "<=", In: "in"}


def _value(column: str, raw: object) -> int | None:
    """A filter's value as the column's integer (µs for write_time), or None: not one."""
    if column == "write_time":
        if isinstance(raw, datetime) and raw.tzinfo is not None:
            return (raw - _EPOCH) // _US
        return None
    if isinstance(raw, int) and not isinstance(raw, bool):
        return raw
    return None


def _take(bounds: Bounds, f: Filter) -> Bounds | None:
    """``bounds`` narrowed by ``f``, or None: the source does not take ``f`` (invariant 2)."""
    attr = getattr(f, "attribute", None)
    if not isinstance(attr, tuple) or len(attr) != 1 or attr[0] not in COLUMNS:
        return None
    column = attr[0]
    if isinstance(f, IsNotNull):  # segment_id and offset are never null; write_time is for
        return None if column == "write_time" else bounds  # records of older formats
    op = _OPS.get(type(f))
    if op is None:
        return None
    if op == "in":
        vals = [_value(column, v) for v in f.value]  # type: ignore[attr-defined]
        if any(v is None for v in vals):
            return None
        arg: int | frozenset[int] = frozenset(v for v in vals if v is not None)
    else:
        v = _value(column, f.value)  # type: ignore[attr-defined]
        if v is None:
            return None
        arg = v
    return replace(bounds, **{column: getattr(bounds, column).narrowed(op, arg)})


def push(filters: Iterable[Filter]) -> tuple[Bounds, list[Filter]]:
    """The bounds of the filters the source takes, and the ones it leaves to Spark."""
    bounds, rest = NO_BOUNDS, []
    for f in filters:
        taken = _take(bounds, f)
        if taken is None:
            rest.append(f)
        else:
            bounds = taken
    return bounds, rest
