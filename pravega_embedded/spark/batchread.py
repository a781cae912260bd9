"""Batch reads for ``spark.read.format("pravega")``: planning partitions and reading one.

Owns: opening what a path names from a Spark process (a live store: the owner's store if this
process is the first to open it, else a client of the owner; a tier-2 URL or folder: a
read-only ``Tier2Store``), planning a read as segment ranges (the batch API), and reading one
range as Arrow record batches in the source's schema, resuming after an owner hand-over.

Invariants:
  1. A read never creates a store: a local path with no store and no tier-2 folders is an
     error naming it.
  2. The partitions of one read hold each event between its cuts exactly once (the batch API's
     invariant 1); a partition's batches are in offset order.
  3. A range truncated away by retention while it is read is an error naming it; with
     ``fail_on_data_loss`` false (micro-batch reads), what is left of it after the segment's
     head is read and the rest skipped with a warning naming what was lost.
  4. A range whose owner went away mid-read (the store's owner process closed or died) is
     reopened and resumed just after the last event already yielded: no event twice, none
     lost. It gives up once ``HANDOVER_TIMEOUT`` seconds passed with owners lost and no event
     read (short tasks that each own the store for a moment can hand it over many times in a
     row on a busy machine: a count of losses is no measure).
  5. A range of a live store that its tier 2 (the target ``tiering_status`` names) holds, by
     the stream's manifest when the read is planned, is read straight from tier 2 with
     pyarrow (tier-2 bytes are the segment's bytes at the same offsets). A manifest published
     before the stream was created (a deleted stream's folder, not yet deleted) is not used;
     a tier 2 this process cannot read plans every range through the store; a task whose
     tier-2 read fails reads the rest of its range through the store.

Thread-safety: each call opens and closes what it uses; nothing is shared.
"""

from __future__ import annotations

import logging
import os
import time
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator

import pyarrow as pa
import pyarrow.compute as pc

from ..batch import SegmentRange
from ..errors import (ConnectionLostError, InvalidConfigurationError, PravegaEmbeddedError,
                      StoreNotFoundError, StreamNotFoundError, TruncatedDataError)
from ..tiering.tier2store import Tier2Store, open_tier2
from ..timelookup import iso_utc
from .options import ReadOptions
from .partitioning import Planned, default_parallelism, pack, partition_count, piece_bytes
from .pushdown import NO_BOUNDS, Bounds

if TYPE_CHECKING:
    from ..remote.client import RemoteStore
    from ..store import Store
    from ..tiering.manifest import Manifest

__all__ = ["SPARK_SCHEMA", "ARROW_SCHEMA", "Planned", "plan_partitions", "plan_ranges", "route", "read_range",
           "open_source",
           "Handovers", "HANDOVER_TIMEOUT"]

LOG = logging.getLogger("pravega_embedded.spark")

SPARK_SCHEMA = ("event BINARY, routing_key STRING, scope STRING, stream STRING, "
                "segment_id BIGINT, offset BIGINT, write_time TIMESTAMP")
ARROW_SCHEMA = pa.schema([
    ("event", pa.binary()), ("routing_key", pa.string()), ("scope", pa.string()),
    ("stream", pa.string()), ("segment_id", pa.int64()), ("offset", pa.int64()),
    ("write_time", pa.timestamp("us", tz="UTC")),
])
HANDOVER_TIMEOUT = 120.0  # seconds of lost owners with no progress before a call gives up
_FRAME_HEADER = 6  # an event's bytes in its segment: header + key + payload


@contextmanager
def open_source(opts: ReadOptions, *, create: bool = False) -> "Iterator[Store | RemoteStore | Tier2Store]":
    """What ``opts.path`` names, opened, closed after; a missing store is created only when
    ``create`` (a sink's planner; never a read: invariant 1)."""
    if opts.is_tier2:
        t2 = open_tier2(opts.path, opts.storage_options or None)
        try:
            yield t2
        finally:
            t2.close()
        return
    from ..remote.opening import open as open_store
    path = opts.path[7:] if opts.path.startswith("file://") else opts.path
    if not create and not os.path.exists(os.path.join(path, "STORE")):
        raise StoreNotFoundError(f"format('pravega'): there is no store at {os.path.abspath(path)} "
                                 "(no STORE marker) and no tier-2 folder: check option 'path'")
    # should this task be the first to open the store, it must not tier to a target the store
    # does not use (the store does not record its own): without the tier2 option it owns it
    # with tier 2 off, and a read of history only tier 2 still holds says to give the option
    kwargs: dict[str, object] = {"tier2": False if opts.tier2 is None else opts.tier2}
    if opts.tier2_options:
        kwargs["tier2_options"] = opts.tier2_options
    store = open_store(path, **kwargs)  # type: ignore[arg-type]
    try:
        yield store
    finally:
        store.close()


def plan_partitions(opts: ReadOptions, bounds: Bounds = NO_BOUNDS,
                    parallelism: int | None = None) -> list[tuple[Planned, ...]]:
    """The read's partitions: ``plan_ranges``'s pieces packed into ``parallelism`` (None: this
    process's CPUs) runs of about equal bytes, at least ``min_partitions``, and more where a
    run would hold over about ``max_partition_bytes`` (``partitioning``)."""
    pieces, k = _plan(opts, bounds, parallelism)
    return pack(pieces, k)


def plan_ranges(opts: ReadOptions, bounds: Bounds = NO_BOUNDS,
                parallelism: int | None = None) -> list[Planned]:
    """The read's ranges between its cuts (or the cuts at its timestamps), less what
    ``bounds`` prunes, split into pieces (``partitioning.piece_bytes``: at event boundaries; a
    tier-2 range at its files' and row groups' boundaries) in the read's order;
    a live store's ranges that its tier 2 holds are read from there (invariant 5)."""
    return _plan(opts, bounds, parallelism)[0]


def _plan(opts: ReadOptions, bounds: Bounds, parallelism: int | None) -> tuple[list[Planned], int]:
    with open_source(opts) as src:
        start, end = opts.start, opts.end
        if opts.start_ns is not None:  # starting_timestamp / ending_timestamp: cuts at those times
            start = src.get_stream_cut_at(opts.scope, opts.stream, iso_utc(opts.start_ns))
        if opts.end_ns is not None:
            end = src.get_stream_cut_at(opts.scope, opts.stream, iso_utc(opts.end_ns))
        ranges = bounds.prune(src.get_segments(opts.scope, opts.stream, start, end))
        total = sum(r.nbytes for r in ranges)  # what is read: sized after pruning
        want = max(opts.min_partitions or 1, parallelism or default_parallelism())
        k = partition_count(total, want, opts.max_partition_bytes)
        piece = piece_bytes(total, k, want, opts.max_partition_bytes)
        if total and any(r.nbytes > piece for r in ranges):
            # one snapshot (invariant 2): the pieces are all of this second call's
            ranges = bounds.prune(src.get_segments(opts.scope, opts.stream, start, end, max_bytes=piece))
        if not isinstance(src, Tier2Store):
            return route(opts, src, ranges, bounds), k
        if not bounds.write_time.bounded:
            return [Planned(r) for r in ranges], k
        m = src.manifest(opts.scope, opts.stream)  # a trim since get_segments: ranges kept
        return [Planned(p) for r in ranges for p in _files_kept(m, r, bounds)], k  # whole


def route(opts: ReadOptions, src: "Store | RemoteStore", ranges: list[SegmentRange],
          bounds: Bounds = NO_BOUNDS) -> list[Planned]:
    """A live store's ``ranges`` as partitions, those parts its tier 2 holds to be read from
    there (invariant 5)."""
    url = _tier2_url(src) if ranges else None
    if url is None:
        return [Planned(r) for r in ranges]
    return _routed(opts, url, ranges, bounds, src.stream_info(opts.scope, opts.stream).created_ns)


def _tier2_url(src: "Store | RemoteStore") -> str | None:
    """The store's tier-2 target, None when it does not tier or names it relative to the
    owner's working directory (not this process's)."""
    try:
        url = src.tiering_status().target
    except InvalidConfigurationError:  # opened with tier2=False
        return None
    return url if "://" in url or os.path.isabs(url) else None


def _routed(opts: ReadOptions, url: str, ranges: list[SegmentRange], bounds: Bounds,
            created_ns: int) -> list[Planned]:
    """``ranges`` with each one's part that tier 2 holds (its manifest now) read from tier 2;
    all of them through the store should tier 2 not answer here (this process's credentials,
    s3fs missing, a damaged manifest: logged) or hold a deleted stream of that name."""
    try:
        with open_tier2(url, opts.tier2_options or None) as t2:
            m = t2.manifest(opts.scope, opts.stream)
    except StreamNotFoundError:  # nothing of the stream is tiered yet
        return [Planned(r) for r in ranges]
    except (PravegaEmbeddedError, OSError) as exc:
        LOG.warning("tier 2 %s of %s/%s could not be read from this process (%s): reading "
                    "through the store (give option tier2_options?)", url, opts.scope, opts.stream, exc)
        return [Planned(r) for r in ranges]
    if m.created_us * 1000 < created_ns:  # published before the stream was created: the
        return [Planned(r) for r in ranges]  # folder of a deleted one of that name, still there
    return _split(m, url, ranges, bounds)


def _split(m: "Manifest", url: str, ranges: list[SegmentRange], bounds: Bounds) -> list[Planned]:
    heads = dict(m.head)
    out = []
    for r in ranges:
        tiered = m.tiered_end(r.segment_id) or 0
        lo, hi = r.start, min(r.end, tiered)
        if lo < heads.get(r.segment_id, 0) or lo >= hi:
            out.append(Planned(r))
            continue
        part = SegmentRange(scope=r.scope, stream=r.stream, segment_id=r.segment_id, start=lo, end=hi)
        out.extend(Planned(p, url) for p in _files_kept(m, part, bounds))
        if hi < r.end:
            out.append(Planned(SegmentRange(scope=r.scope, stream=r.stream, segment_id=r.segment_id,
                                            start=hi, end=r.end)))
    return out


def _files_kept(m: "Manifest", r: SegmentRange, bounds: Bounds) -> list[SegmentRange]:
    """The pieces of tiered ``r`` in files whose write times ``bounds`` may keep (adjacent kept
    files make one piece; pushdown invariant 1)."""
    files = m.files_of(r.segment_id)
    if not bounds.write_time.bounded or r.start < dict(m.head).get(r.segment_id, 0) \
            or not any(f.first <= r.start < f.end for f in files):
        return [r]  # not all in this manifest's files: read whole, the read says what is gone
    out: list[SegmentRange] = []
    for f in files:
        lo, hi = max(f.first, r.start), min(f.end, r.end)
        if lo >= hi or not bounds.keeps_times(f.min_write_us, f.max_write_us):
            continue
        if out and out[-1].end == lo:
            lo = out.pop().start
        out.append(SegmentRange(scope=r.scope, stream=r.stream, segment_id=r.segment_id, start=lo, end=hi))
    return out


def read_range(opts: ReadOptions, rng: SegmentRange, *, tier2: str | None = None,
               bounds: Bounds = NO_BOUNDS) -> Iterator[pa.RecordBatch]:
    """The events of ``rng`` as record batches in ``ARROW_SCHEMA`` (invariants 2 to 5), read
    from the tier-2 URL ``tier2`` if given, with only the rows ``bounds`` allow."""
    batches = _read(opts, rng, tier2)
    return bounds.apply(batches) if bounds.bounded else batches


def _read(opts: ReadOptions, rng: SegmentRange, tier2: str | None) -> Iterator[pa.RecordBatch]:
    cur = _Cursor(rng.start)
    if tier2 is not None:  # a live store's tiered range: straight from tier 2 (invariant 5)
        try:
            with open_tier2(tier2, opts.tier2_options or None) as t2:
                yield from _yielded(t2.read_segment_range(rng).arrow_batches(write_time=True), rng, cur)
            return
        except PravegaEmbeddedError as exc:
            LOG.warning("reading %r from tier 2 %s failed at offset %d (%s): reading the rest "
                        "through the store", rng, tier2, cur.at, exc)
    yield from _read_store(opts, rng, cur)


@dataclass(slots=True)
class _Cursor:
    """How far a range's read got: just after the last event yielded."""

    at: int


def _yielded(batches: Iterator[pa.RecordBatch], rng: SegmentRange, cur: _Cursor) -> Iterator[pa.RecordBatch]:
    """``batches`` of ``rng`` in the source's schema, moving ``cur`` past each one yielded."""
    for batch in batches:
        if batch.num_rows == 0:
            continue
        out = _spark_batch(batch, rng.scope, rng.stream)
        cur.at = _after_last(batch)
        yield out


def _read_store(opts: ReadOptions, rng: SegmentRange, cur: _Cursor) -> Iterator[pa.RecordBatch]:
    handovers = Handovers(f"reading {rng!r}", cur.at)
    while True:
        try:
            with open_source(opts) as src:
                rest = SegmentRange(scope=rng.scope, stream=rng.stream, segment_id=rng.segment_id,
                                    start=cur.at, end=rng.end)
                if rest.nbytes == 0:
                    return
                yield from _yielded(src.read_segment_range(rest).arrow_batches(write_time=True), rng, cur)
            return
        except ConnectionLostError as exc:
            # an owner hand-over (the task that owned the store finished and closed it) is
            # normal: only time without progress counts
            if not handovers.retry(cur.at, exc):
                raise
        except TruncatedDataError as exc:
            resume = _after_truncation(opts, rng, cur.at, exc)
            if resume is None:
                return
            cur.at = resume


def _after_truncation(opts: ReadOptions, rng: SegmentRange, at: int, exc: TruncatedDataError) -> int | None:
    """Where to go on in ``rng`` after retention truncated it at ``at`` mid-read: the
    segment's head (None: nothing of the range is left), or an error (invariant 3)."""
    what = (f"events of segment range {rng!r} from offset {at} were deleted by the stream's "
            "retention (or a truncate) while Spark read them")
    if opts.fail_on_data_loss:
        raise TruncatedDataError(f"format('pravega'): {what} ({exc}). A micro-batch query skips "
                                 "lost data with option fail_on_data_loss=false; a batch read: "
                                 "plan it again") from exc
    with open_source(opts) as src:
        left = [r for r in src.get_segments(rng.scope, rng.stream) if r.segment_id == rng.segment_id]
    head = left[0].start if left else rng.end
    resume = max(at, head)
    if resume <= at:  # the head is not past ``at``: not a truncation this can skip
        raise exc
    LOG.warning("%s: [%d, %d) skipped, fail_on_data_loss is false", what, at, min(resume, rng.end))
    return resume if resume < rng.end else None


class Handovers:
    """The owner losses of one call (invariant 4): ``retry(progress, exc)`` says whether to
    reopen and go on (after a short pause), False once HANDOVER_TIMEOUT seconds passed since
    the first loss after ``progress`` last changed."""

    def __init__(self, what: str, progress: object = None) -> None:
        self.what = what
        self._progress = progress
        self._since: float | None = None  # the first loss since the last progress
        self._losses = 0

    def retry(self, progress: object, exc: BaseException) -> bool:
        now = time.monotonic()
        if progress != self._progress or self._since is None:
            self._progress, self._since, self._losses = progress, now, 0
        self._losses += 1
        if now - self._since > HANDOVER_TIMEOUT:
            return False
        LOG.warning("%s: the store's owner went away (%s); reopening (%d in a row)", self.what, exc,
                    self._losses)
        time.sleep(min(1.0, 0.01 * self._losses))
        return True


def _after_last(batch: pa.RecordBatch) -> int:
    """The offset just after the batch's last event (its frame: header, key, payload)."""
    last = batch.slice(batch.num_rows - 1)  # measured in Arrow: a large event is not copied
    klen = pc.binary_length(last.column("routing_key"))[0].as_py() or 0
    return last.column("offset")[0].as_py() + _FRAME_HEADER + klen + \
        pc.binary_length(last.column("event"))[0].as_py()


def _spark_batch(batch: pa.RecordBatch, scope: str, stream: str) -> pa.RecordBatch:
    n = batch.num_rows
    return pa.RecordBatch.from_arrays([
        pc.cast(batch.column("event"), pa.binary()),
        pc.cast(batch.column("routing_key"), pa.string()),
        pa.repeat(pa.scalar(scope, pa.string()), n),
        pa.repeat(pa.scalar(stream, pa.string()), n),
        batch.column("segment_id"), batch.column("offset"),
        batch.column("write_time"),
    ], schema=ARROW_SCHEMA)
