"""Reading a tier-2 folder with no store: ``pe.open_tier2(url)``, read-only.

Owns: ``Tier2Store`` (listing the scopes and streams a tier-2 root holds, a stream's
``Tier2StreamInfo`` from its manifest, and ``Tier2Slice``: the tiered events between two
StreamCuts, iterated or as an Arrow table). Another machine reads a stream's history with it
from the tier-2 folder or bucket alone.

Invariants:
  1. Only manifests are trusted for what exists: a stream is listed once it has a manifest, and
     a slice reads only files its manifest lists (a file being written, a staged piece, or one
     of a crashed copy is never read). Each slice reads the manifest once, so it is a snapshot.
  2. A slice is bounded by the manifest: its default start is the head cut, its default end is
     where each segment's tiered data ends. A start before the head is TruncatedDataError; an
     end past the tiered data, or a cut that is not on an event boundary of a listed file, is
     InvalidStreamCutError; a cut of another stream, one not covering the key space, or one
     past a segment whose predecessors it did not finish is InvalidStreamCutError (the store's
     own checks, ``topology.check_cut``).
  3. Events come per segment in ascending segment id (predecessors first), each segment in
     offset order, exactly the rows with ``start <= offset < end``.
  4. Nothing is written: the tier-2 root is only listed and read.

Thread-safety: a ``Tier2Store`` may be shared by threads; a ``Tier2Slice`` is iterated by one
thread at a time.
"""

from __future__ import annotations

import html
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Iterator, Mapping

import pyarrow as pa
import pyarrow.compute as pc

from ..arrow import SCHEMA as SLICE_SCHEMA
from ..arrow import TIMED_SCHEMA as _TIMED
from ..batch import SegmentRange, segment_ranges
from ..errors import (InvalidConfigurationError, InvalidStreamCutError, ScopeNotFoundError,
                      SegmentNotFoundError, StoreClosedError, StreamKindError, StreamNotFoundError,
                      TruncatedDataError)
from ..events import EventRead
from ..names import validate_scope, validate_stream
from ..serializers import Serializer, resolve
from ..streamcut import StreamCut, format_segment_id
from ..timelookup import Timestamp, timestamp_ns
from ..topology import check_cut, frontier
from .manifest import Manifest, SegmentNode, TieredFile, latest_manifest
from .parquetfile import as_slice_table, group_starts, iter_segment_file, read_segment_file
from .target import Tier2Target

if TYPE_CHECKING:
    import pandas

__all__ = ["Tier2Store", "Tier2StreamInfo", "Tier2Slice", "open_tier2"]

_FRAME_HEADER = 6  # u32 payload length + u16 key length: an event's bytes in its segment
_FOOTER_READERS = 16  # footers read at once when get_segments splits files at row groups


@dataclass(frozen=True, slots=True)
class Tier2StreamInfo:
    """What tier 2 holds of one stream (``Tier2Store.stream_info``), from its manifest."""

    scope: str
    stream: str
    kind: str  # "events" or "bytes"
    version: int  # the manifest's version
    segments: tuple[SegmentNode, ...]  # the segment graph as the manifest saw it
    head: StreamCut  # the first offset kept per segment
    tail: StreamCut  # where each segment's tiered data ends
    files: int
    events: int  # rows of the listed files (events; chunks for a byte stream)
    file_bytes: int  # the files' size in tier 2
    tiered_bytes: int  # segment bytes in the files
    first_write_us: int | None  # oldest write time in the files (µs since the epoch, UTC)
    last_write_us: int | None

    def _repr_html_(self) -> str:
        return (f"<b>{html.escape(self.scope)}/{html.escape(self.stream)}</b> in tier 2 "
                f"(manifest {self.version}): {len(self.segments)} segments, {self.files:,} files, "
                f"{self.events:,} events, {self.tiered_bytes:,} B ({self.file_bytes:,} B on disk)")


@dataclass(frozen=True, slots=True)
class _Seg:
    """A manifest segment as ``topology.check_cut`` sees one: its tiered length."""

    name: str
    low: float
    high: float
    length: int
    preds: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class _Node:
    """A manifest segment as ``topology.frontier`` sees one."""

    length: int
    sealed: bool
    preds: tuple[int, ...]
    succs: tuple[int, ...]


class Tier2Slice:
    """The tiered events of one stream between two cuts (``Tier2Store.read_slice``)."""

    def __init__(self, target: Tier2Target, m: Manifest, ranges: list[tuple[int, int, int]],
                 serializer: Serializer | None) -> None:
        self._target = target
        self._m = m
        self._ranges = ranges
        self._ser = serializer

    @property
    def ranges(self) -> list[tuple[int, int, int]]:
        """(segment id, start offset, end offset) per segment, as the store's ``Slice``."""
        return list(self._ranges)

    @property
    def manifest(self) -> Manifest:
        """The manifest the slice reads (a snapshot: invariant 1)."""
        return self._m

    @property
    def nbytes(self) -> int:
        """Segment bytes in the slice."""
        return sum(hi - lo for _, lo, hi in self._ranges)

    def _tables(self) -> Iterator[tuple[int, pa.Table]]:
        m = self._m
        for sid, lo, hi in self._ranges:
            for f in m.files_of(sid):
                if f.end <= lo or f.first >= hi:
                    continue
                yield sid, read_segment_file(self._target, m.scope, m.stream, f, lo, hi)

    def __iter__(self) -> Iterator[EventRead]:
        names = (self._m.scope, self._m.stream)
        ser = self._ser
        new = EventRead.make
        for sid, t in self._tables():
            offs = t.column("offset").to_pylist()
            keys = t.column("routing_key").to_pylist()
            evs = t.column("event").to_pylist()
            t = None  # type: ignore[assignment]
            for off, key, ev in zip(offs, keys, evs):
                kb = None if key is None else key.encode("utf-8", "surrogateescape")
                length = _FRAME_HEADER + (0 if kb is None else len(kb)) + len(ev)
                yield new(ev if ser is None else ser.deserialize(ev), kb, sid, off, length, names)

    def to_arrow(self, *, write_time: bool = True) -> pa.Table:
        """A pyarrow Table with the store's slice columns (event, routing_key, segment_id,
        offset) and, unless ``write_time=False``, ``write_time`` (each file's row groups
        decoded side by side)."""
        schema = _TIMED if write_time else SLICE_SCHEMA
        return pa.Table.from_batches([b for sid, t in self._tables()
                                      for b in as_slice_table(t, sid, write_time).to_batches()],
                                     schema=schema)

    def arrow_batches(self, *, write_time: bool = True) -> Iterator[pa.RecordBatch]:
        """``to_arrow()``'s record batches, a row group read (and its pages checked) as the
        consumer asks for the next: one group in memory at a time."""
        m = self._m
        for sid, lo, hi in self._ranges:
            for f in m.files_of(sid):
                if f.end <= lo or f.first >= hi:
                    continue
                for t in iter_segment_file(self._target, m.scope, m.stream, f, lo, hi):
                    yield from as_slice_table(t, sid, write_time).to_batches()

    def to_pandas(self) -> "pandas.DataFrame":
        """A pandas DataFrame with the columns of ``to_arrow()`` and, after ``segment_id``, a
        ``segment`` column naming it ``number#epoch`` (needs pandas)."""
        from ..notebook import segment_frame
        return segment_frame(self.to_arrow())


class Tier2Store:
    """A tier-2 root opened read-only (module docstring). ``pe.open_tier2(url)``."""

    def __init__(self, url: str, storage_options: Mapping[str, object] | None = None) -> None:
        self.target = Tier2Target(url, storage_options)
        self.url = self.target.url
        self.closed = False

    def __repr__(self) -> str:
        return f"<Tier2Store {self.url!r}{' closed' if self.closed else ''}>"

    def __enter__(self) -> "Tier2Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Nothing is held open between calls; later calls raise StoreClosedError. Idempotent."""
        self.closed = True

    def _check(self) -> None:
        if self.closed:
            raise StoreClosedError(f"tier-2 store {self.url} is closed")

    # ------------------------------------------------------------------ listing
    def list_scopes(self) -> list[str]:
        """The scopes with at least one stream folder, sorted."""
        self._check()
        names = self.target.list("")
        return sorted(n[6:] for n in names if n.startswith("scope=") and _valid_scope(n[6:]))

    def list_streams(self, scope: str) -> list[str]:
        """The streams of ``scope`` that have a manifest, sorted (ScopeNotFoundError if the
        scope has no folder)."""
        self._check()
        validate_scope(scope)
        if scope not in self.list_scopes():
            raise ScopeNotFoundError(f"tier 2 {self.url} has no scope {scope!r}")
        out = []
        for n in self.target.list(f"scope={scope}"):
            if n.startswith("stream=") and _valid_stream(n[7:]):
                if self.target.list(f"scope={scope}/{n}/_manifest"):
                    out.append(n[7:])
        return sorted(out)

    def manifest(self, scope: str, stream: str) -> Manifest:
        """The stream's latest manifest (StreamNotFoundError if it has none)."""
        self._check()
        m = latest_manifest(self.target, scope, stream)
        if m is None:
            raise StreamNotFoundError(f"tier 2 {self.url} holds no stream {scope}/{stream} (no "
                                      "manifest: nothing of it was tiered yet, or it was deleted)")
        return m

    def stream_info(self, scope: str, stream: str) -> Tier2StreamInfo:
        """What tier 2 holds of the stream (``Tier2StreamInfo``)."""
        m = self.manifest(scope, stream)
        files = m.files
        return Tier2StreamInfo(
            scope=scope, stream=stream, kind=m.kind, version=m.version, segments=m.segments,
            head=_cut(m, _heads(m)), tail=_cut(m, _ends(m)), files=len(files),
            events=sum(f.events for f in files), file_bytes=sum(f.size for f in files),
            tiered_bytes=sum(f.end - f.first for f in files),
            first_write_us=min((f.min_write_us for f in files), default=None),
            last_write_us=max((f.max_write_us for f in files), default=None))

    # ------------------------------------------------------------------ reading
    def read_slice(self, scope: str, stream: str, start: StreamCut | None = None,
                   end: StreamCut | None = None, *,
                   serializer: Serializer | str | None = None) -> Tier2Slice:
        """The tiered events between two cuts (default: the head to the end of the tiered
        data), per segment in order: iterate it, or ``.to_arrow()`` / ``.to_pandas()``."""
        ser = resolve(serializer)
        m = self.manifest(scope, stream)
        if m.kind != "events":
            raise StreamKindError(f"{scope}/{stream} is a byte stream: read_slice reads events")
        heads, ends = _heads(m), _ends(m)
        lo = self._resolve(m, start, "read_slice start") or heads
        hi = self._resolve(m, end, "read_slice end") or ends
        ranges = []
        for n in sorted(m.segments, key=lambda n: n.segment_id):
            sid = n.segment_id
            a, b = lo.get(sid, 0), hi.get(sid, 0)
            if a < heads[sid]:
                raise TruncatedDataError(f"read_slice start: offset {a} of segment "
                                         f"{format_segment_id(sid)} of {scope}/{stream} is before "
                                         f"the head ({heads[sid]}) tier 2 keeps")
            if b < a:
                raise InvalidStreamCutError(f"read_slice of {scope}/{stream}: end is before start "
                                            f"in segment {format_segment_id(sid)}")
            if b > a:
                ranges.append((sid, a, b))
        return Tier2Slice(self.target, m, ranges, ser)

    def get_segments(self, scope: str, stream: str, start: StreamCut | None = None,
                     end: StreamCut | None = None, *, max_bytes: int | None = None) -> list[SegmentRange]:
        """The tiered slice between two cuts as one SegmentRange per segment with events in it,
        predecessors first (``Store.get_segments``); ``max_bytes`` splits ranges into pieces
        of about that size at the boundaries of files and, within a file larger than that,
        of its row groups (read from its footer), so each piece reads whole row groups."""
        if max_bytes is not None and (isinstance(max_bytes, bool) or not isinstance(max_bytes, int)
                                      or max_bytes <= 0):
            raise InvalidConfigurationError(f"max_bytes must be an int > 0 or None, got {max_bytes!r}")
        sl = self.read_slice(scope, stream, start, end)
        ranges = segment_ranges(scope, stream, sl.ranges)
        if max_bytes is None:
            return ranges
        m = sl.manifest
        starts = self._group_starts(m, ranges, max_bytes)
        out = []
        for r in ranges:
            lo = r.start
            for stop in _boundaries(m, r, max_bytes, starts):
                if stop - lo >= max_bytes or stop == r.end:
                    out.append(SegmentRange(scope=scope, stream=stream, segment_id=r.segment_id,
                                            start=lo, end=stop))
                    lo = stop
            if lo < r.end:
                out.append(SegmentRange(scope=scope, stream=stream, segment_id=r.segment_id,
                                        start=lo, end=r.end))
        return out

    def _group_starts(self, m: Manifest, ranges: list[SegmentRange],
                      max_bytes: int) -> dict[TieredFile, tuple[int, ...]]:
        """The row groups' starts of each file of ``ranges`` larger than ``max_bytes``, their
        footers read side by side (an object store answers each after a round trip)."""
        big = [f for r in ranges for f in m.files_of(r.segment_id)
               if f.end - f.first > max_bytes and f.end > r.start and f.first < r.end]
        if not big:
            return {}
        with ThreadPoolExecutor(min(_FOOTER_READERS, len(big)), thread_name_prefix="pe-footers") as pool:
            found = pool.map(lambda f: group_starts(self.target, m.scope, m.stream, f), big)
            return dict(zip(big, found))

    def get_stream_cut_at(self, scope: str, stream: str, timestamp: Timestamp) -> StreamCut:
        """As ``Store.get_stream_cut_at``, over what tier 2 holds: per segment, the first
        tiered event written at or after ``timestamp`` (found through the manifest's per-file
        write-time range, then the one file's write_time column), else its tiered end."""
        t_us = -(-timestamp_ns(timestamp) // 1000)  # write times are µs in tier 2
        m = self.manifest(scope, stream)
        heads, ends = _heads(m), _ends(m)
        full = {}
        for n in m.segments:
            sid = n.segment_id
            full[sid] = ends[sid]
            for f in m.files_of(sid):
                if f.end <= heads[sid] or f.max_write_us < t_us:
                    continue
                t = read_segment_file(self.target, scope, stream, f, max(f.first, heads[sid]))
                times = pc.cast(t.column("write_time"), pa.int64())
                hit = pc.index(pc.greater_equal(times, t_us), True).as_py()
                if hit >= 0:
                    full[sid] = t.column("offset")[hit].as_py()
                    break
        segs = {n.segment_id: _Node(ends[n.segment_id], n.sealed, n.predecessors, n.successors)
                for n in m.segments}
        return _cut(m, frontier(segs, full))

    def read_segment_range(self, rng: SegmentRange, *,
                           serializer: Serializer | str | None = None) -> Tier2Slice:
        """The tiered events of one SegmentRange (``Store.read_segment_range``): the range must
        lie within what the manifest lists for its segment."""
        if not isinstance(rng, SegmentRange):
            raise InvalidConfigurationError(f"expected a SegmentRange, got {type(rng).__name__}")
        ser = resolve(serializer)
        m = self.manifest(rng.scope, rng.stream)
        if m.kind != "events":
            raise StreamKindError(f"{rng.scope}/{rng.stream} is a byte stream: read_segment_range "
                                  "reads events")
        sid = rng.segment_id
        if all(n.segment_id != sid for n in m.segments):
            raise SegmentNotFoundError(f"tier 2 {self.url} has no segment {format_segment_id(sid)} "
                                       f"of {rng.scope}/{rng.stream}")
        head, end = _heads(m)[sid], _ends(m)[sid]
        if rng.start < head:
            raise TruncatedDataError(f"read_segment_range: offset {rng.start} of segment "
                                     f"{format_segment_id(sid)} is before the head ({head}) tier 2 keeps")
        if rng.end > end:
            raise InvalidStreamCutError(f"read_segment_range: end {rng.end} is past the tiered end "
                                        f"({end}) of segment {format_segment_id(sid)}")
        if rng.nbytes:
            for off in (rng.start, rng.end):
                self._check_boundary(m, sid, off, "read_segment_range")
        return Tier2Slice(self.target, m, [(sid, rng.start, rng.end)] if rng.nbytes else [], ser)

    def _resolve(self, m: Manifest, cut: StreamCut | None, what: str) -> dict[int, int] | None:
        """A user's cut as the full map of the manifest's segments (invariant 2)."""
        if cut is None or (isinstance(cut, StreamCut) and cut.positions is None):
            return None
        if not isinstance(cut, StreamCut):
            raise InvalidStreamCutError(f"{what}: expected a StreamCut, got {type(cut).__name__}")
        if (cut.scope, cut.stream) != (m.scope, m.stream):
            raise InvalidStreamCutError(f"{what}: the StreamCut is of {cut.scope}/{cut.stream}, "
                                        f"not of {m.scope}/{m.stream}")
        ends = _ends(m)
        segs = {n.segment_id: _Seg(format_segment_id(n.segment_id), n.key_low, n.key_high,
                                   ends[n.segment_id], n.predecessors) for n in m.segments}
        named = cut.as_dict()
        try:
            full = check_cut(segs, named, what, f"{m.scope}/{m.stream} in tier 2")
        except InvalidStreamCutError as exc:
            raise InvalidStreamCutError(f"{exc} (tier 2 holds what its manifest lists: "
                                        f"{self.url})") from None
        for sid, off in named.items():
            self._check_boundary(m, sid, off, what)
        return full

    def _check_boundary(self, m: Manifest, sid: int, off: int, what: str) -> None:
        """``off`` starts an event of a listed file, or is the end of one (invariant 2)."""
        files = m.files_of(sid)
        head = _heads(m)[sid]
        if off < head:
            raise TruncatedDataError(f"{what}: offset {off} of segment {format_segment_id(sid)} "
                                     f"of {m.scope}/{m.stream} is before the head ({head}) tier "
                                     "2 keeps")
        if off == head or any(f.end == off for f in files):
            return
        f = next((f for f in files if f.first <= off < f.end), None)
        if f is not None:
            if off in group_starts(self.target, m.scope, m.stream, f):
                return  # a row group starts there (its footer says): where get_segments splits
            t = read_segment_file(self.target, m.scope, m.stream, f, off, off + 1)
            if t.num_rows == 1:
                return
        raise InvalidStreamCutError(f"{what}: offset {off} of segment {format_segment_id(sid)} "
                                    f"of {m.scope}/{m.stream} is not at an event in tier 2")


def _boundaries(m: Manifest, r: SegmentRange, max_bytes: int,
                starts: Mapping[TieredFile, tuple[int, ...]]) -> Iterator[int]:
    """The offsets after ``r.start`` up to ``r.end`` where ``r`` may be split, ascending: its
    files' ends and, in a file larger than ``max_bytes``, its row groups' ``starts``."""
    for f in m.files_of(r.segment_id):
        stop = min(f.end, r.end)
        if stop <= r.start or f.first >= r.end:
            continue
        yield from (b for b in starts.get(f, ()) if r.start < b < stop)
        yield stop


def open_tier2(url: str, storage_options: Mapping[str, object] | None = None) -> Tier2Store:
    """Open a tier-2 folder or bucket read-only, with no store: ``pe.open_tier2("s3://b/p",
    storage_options={...})`` (any fsspec URL; docs/tiering.md)."""
    return Tier2Store(url, storage_options)


def _heads(m: Manifest) -> dict[int, int]:
    """The first offset kept per segment: the manifest's head, else its first file's start."""
    head = dict(m.head)
    return {n.segment_id: head.get(n.segment_id, 0) for n in m.segments}


def _ends(m: Manifest) -> dict[int, int]:
    """Where each segment's tiered data ends (its head if nothing of it is tiered)."""
    heads = _heads(m)
    return {sid: max(m.tiered_end(sid) or 0, heads[sid]) for sid in heads}


def _cut(m: Manifest, positions: dict[int, int]) -> StreamCut:
    return StreamCut.of(m.scope, m.stream, positions)


def _valid_scope(name: str) -> bool:
    try:
        validate_scope(name)
    except Exception:  # noqa: BLE001 - a folder that is not a scope of ours is not listed
        return False
    return True


def _valid_stream(name: str) -> bool:
    try:
        validate_stream(name)
    except Exception:  # noqa: BLE001
        return False
    return True
