"""Tier-2 manifests: the self-describing, versioned index of one stream's tiered history.

Owns: the manifest value types (``Manifest``, ``SegmentNode``, ``TieredFile``), their JSON form
(docs/format.md, "Tier 2 manifest") and the publishing and finding of a stream's manifests in a
tier-2 target.

Invariants:
  1. A manifest is immutable once published: version ``v`` is written once, exclusively, as
     ``_manifest/<v>.json``; the highest version present is the stream's manifest.
  2. ``Manifest.parse`` accepts only what ``Manifest.to_json`` can produce for a consistent
     manifest: exact types (ints are never bools, 0 <= n < 2**63), valid names, key ranges in
     [0, 1], segment ids unique, every file and head entry on a listed segment, files sorted by
     segment and then offset and not overlapping and holding at least one event, each file's
     name its offset range; the text is strict UTF-8. Anything
     else raises CorruptDataError naming the manifest; a newer layout, FormatVersionError. Keys
     it does not know are ignored (additions within a layout version stay readable).
  3. No manifest larger than ``MAX_MANIFEST_BYTES`` is read (the size is checked first).

Thread-safety: value types are frozen; the functions hold no state.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from ..errors import (AlreadyExistsError, CorruptDataError, FormatVersionError,
                      PravegaEmbeddedError)
from ..names import validate_scope, validate_stream
from .layout import (LAYOUT_VERSION, file_name, manifest_dir, manifest_name,
                     parse_manifest_name)
from .target import Tier2Target

__all__ = [
    "MAX_MANIFEST_BYTES",
    "TieredFile",
    "SegmentNode",
    "Manifest",
    "latest_manifest",
    "publish_manifest",
]

MAX_MANIFEST_BYTES = 256 * 1024 * 1024
_MAX = (1 << 63) - 1


@dataclass(frozen=True, slots=True)
class TieredFile:
    """One Parquet file of a segment: offsets ``[first, end)``, ``events`` events, ``size``
    bytes on tier 2, write times from ``min_write_us`` to ``max_write_us`` (µs since the epoch)."""

    segment_id: int
    first: int
    end: int
    events: int
    size: int
    min_write_us: int
    max_write_us: int

    @property
    def name(self) -> str:
        return file_name(self.first, self.end)


@dataclass(frozen=True, slots=True)
class SegmentNode:
    """One segment of the stream's graph as the manifest saw it."""

    segment_id: int
    key_low: float
    key_high: float
    sealed: bool
    predecessors: tuple[int, ...] = ()
    successors: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Manifest:
    """Version ``version`` of the tier-2 manifest of ``scope/stream``: its segment graph, its
    files (sorted by segment, then offset) and its head cut (segment id -> first offset kept)."""

    scope: str
    stream: str
    version: int
    segments: tuple[SegmentNode, ...]
    files: tuple[TieredFile, ...]
    head: tuple[tuple[int, int], ...] = ()
    created_us: int = 0
    kind: str = "events"  # "bytes": a byte stream (rows are raw byte chunks, not events)
    _by_segment: Mapping[int, tuple[TieredFile, ...]] = field(default_factory=dict, repr=False,
                                                              compare=False)

    def __post_init__(self) -> None:
        by: dict[int, list[TieredFile]] = {}
        for f in self.files:
            by.setdefault(f.segment_id, []).append(f)
        object.__setattr__(self, "_by_segment", {k: tuple(v) for k, v in by.items()})

    def files_of(self, segment_id: int) -> tuple[TieredFile, ...]:
        """The files of one segment, in offset order."""
        return self._by_segment.get(segment_id, ())

    def tiered_end(self, segment_id: int) -> int | None:
        """The end offset of the segment's last file (None: nothing tiered)."""
        files = self._by_segment.get(segment_id)
        return files[-1].end if files else None

    # ------------------------------------------------------------------ JSON
    def to_json(self) -> bytes:
        doc = {
            "format": LAYOUT_VERSION,
            "scope": self.scope,
            "stream": self.stream,
            "version": self.version,
            "created_us": self.created_us,
            "kind": self.kind,
            "head": [{"segment": s, "offset": o} for s, o in self.head],
            "segments": [
                {"segment": n.segment_id, "key_low": n.key_low, "key_high": n.key_high,
                 "sealed": n.sealed, "predecessors": list(n.predecessors),
                 "successors": list(n.successors)}
                for n in self.segments
            ],
            "files": [
                {"segment": f.segment_id, "name": f.name, "first": f.first, "end": f.end,
                 "events": f.events, "size": f.size, "min_write_us": f.min_write_us,
                 "max_write_us": f.max_write_us}
                for f in self.files
            ],
        }
        return json.dumps(doc, sort_keys=True, separators=(",", ":"), allow_nan=False).encode()

    @classmethod
    def parse(cls, data: bytes, where: str) -> "Manifest":
        """The manifest in ``data`` read from ``where`` (a URL, for messages); invariant 2."""
        if len(data) > MAX_MANIFEST_BYTES:
            raise CorruptDataError(f"tier-2 manifest {where} is larger than {MAX_MANIFEST_BYTES:,} bytes")
        try:
            doc = json.loads(bytes(data).decode("utf-8"), parse_constant=_no_constant)
        except (ValueError, RecursionError) as exc:  # UnicodeDecodeError is a ValueError
            raise CorruptDataError(f"tier-2 manifest {where} is not valid JSON ({exc}): it is "
                                   "damaged; the previous version is still readable") from exc
        try:
            return _decode(doc)
        except PravegaEmbeddedError as exc:
            if isinstance(exc, FormatVersionError):
                raise FormatVersionError(f"tier-2 manifest {where}: {exc}") from None
            raise CorruptDataError(f"tier-2 manifest {where} is damaged: {exc}") from None


def _no_constant(name: str) -> None:
    raise ValueError(f"{name} is not allowed")


def _get(obj: object, key: str, kind: type | tuple[type, ...]) -> object:
    if not isinstance(obj, dict):
        raise CorruptDataError(f"expected an object holding {key!r}, got {type(obj).__name__}")
    if key not in obj:
        raise CorruptDataError(f"{key!r} is missing")
    v = obj[key]
    if isinstance(v, bool) and kind is not bool:
        raise CorruptDataError(f"{key!r} is a boolean")
    if not isinstance(v, kind):
        raise CorruptDataError(f"{key!r} is a {type(v).__name__}")
    return v


def _int(obj: object, key: str, low: int = 0) -> int:
    v = _get(obj, key, int)
    assert isinstance(v, int)
    if not low <= v <= _MAX:
        raise CorruptDataError(f"{key!r} = {v} is out of range")
    return v


def _ints(obj: object, key: str) -> tuple[int, ...]:
    v = _get(obj, key, list)
    assert isinstance(v, list)
    if any(isinstance(x, bool) or not isinstance(x, int) or not 0 <= x <= _MAX for x in v):
        raise CorruptDataError(f"{key!r} holds something other than segment ids")
    return tuple(v)


def _key(obj: object, key: str) -> float:
    v = _get(obj, key, (int, float))
    assert isinstance(v, (int, float))
    if isinstance(v, int) and not 0 <= v <= 1:  # (float() of a huge int would overflow)
        raise CorruptDataError(f"{key!r} = {v!r} is not in [0, 1]")
    if not (math.isfinite(v) and 0.0 <= v <= 1.0):
        raise CorruptDataError(f"{key!r} = {v!r} is not in [0, 1]")
    return float(v)


def _decode(doc: object) -> Manifest:
    fmt = _get(doc, "format", int)
    if fmt != LAYOUT_VERSION:
        if isinstance(fmt, int) and fmt > LAYOUT_VERSION:
            raise FormatVersionError(f"layout version {fmt} is newer than this library's "
                                     f"({LAYOUT_VERSION}): upgrade pravega_embedded to read it")
        raise CorruptDataError(f"unknown layout version {fmt!r}")
    try:
        scope = validate_scope(_get(doc, "scope", str))
        stream = validate_stream(_get(doc, "stream", str))
    except PravegaEmbeddedError as exc:
        raise CorruptDataError(str(exc)) from None
    segments = []
    for n in _get(doc, "segments", list):  # type: ignore[union-attr]
        low, high = _key(n, "key_low"), _key(n, "key_high")
        if not low < high:
            raise CorruptDataError(f"segment key range [{low}, {high}) is empty")
        sealed = _get(n, "sealed", bool)
        segments.append(SegmentNode(_int(n, "segment"), low, high, bool(sealed),
                                    _ints(n, "predecessors"), _ints(n, "successors")))
    ids = {n.segment_id for n in segments}
    if len(ids) != len(segments):
        raise CorruptDataError("a segment is listed twice")
    for n in segments:
        if any(p not in ids or p >= n.segment_id for p in n.predecessors) or \
                any(s not in ids or s <= n.segment_id for s in n.successors):
            raise CorruptDataError(f"segment {n.segment_id} names a predecessor or successor that "
                                   "is not listed or not of an earlier or later epoch")
    files = [_decode_file(f) for f in _get(doc, "files", list)]  # type: ignore[union-attr]
    _check_files(files, ids)
    head = []
    for h in _get(doc, "head", list):  # type: ignore[union-attr]
        s = _int(h, "segment")
        if s not in ids:
            raise CorruptDataError(f"the head names segment {s}, which is not listed")
        head.append((s, _int(h, "offset")))
    if len({s for s, _ in head}) != len(head):
        raise CorruptDataError("the head names a segment twice")
    kind = doc.get("kind", "events")  # type: ignore[union-attr]  # absent: written before kinds
    if kind not in ("events", "bytes"):
        raise CorruptDataError(f"unknown stream kind {kind!r}")
    return Manifest(scope, stream, _int(doc, "version", 1), tuple(segments), tuple(files),
                    tuple(sorted(head)), _int(doc, "created_us"), kind)


def _decode_file(f: object) -> TieredFile:
    tf = TieredFile(_int(f, "segment"), _int(f, "first"), _int(f, "end"), _int(f, "events"),
                    _int(f, "size"), _int(f, "min_write_us"), _int(f, "max_write_us"))
    if not tf.first < tf.end:
        raise CorruptDataError(f"file range [{tf.first}, {tf.end}) is empty")
    if tf.events < 1 or tf.size < 1:
        raise CorruptDataError(f"file {tf.name}: a tiered file holds at least one event and byte")
    if tf.min_write_us > tf.max_write_us:
        raise CorruptDataError(f"file {tf.name}: write times out of order")
    if _get(f, "name", str) != tf.name:
        raise CorruptDataError(f"file name {f['name']!r} does not match its range")  # type: ignore[index]
    return tf


def _check_files(files: list[TieredFile], ids: set[int]) -> None:
    prev_seg, prev_end = -1, 0
    for f in files:
        if f.segment_id not in ids:
            raise CorruptDataError(f"file {f.name} is on segment {f.segment_id}, which is not listed")
        if f.segment_id < prev_seg:
            raise CorruptDataError(f"the files are not sorted by segment at segment {f.segment_id}")
        if f.segment_id == prev_seg and f.first < prev_end:
            raise CorruptDataError(f"file {f.name} of segment {f.segment_id} overlaps or precedes "
                                   "the one before it")
        prev_seg, prev_end = f.segment_id, f.end


# ---------------------------------------------------------------------------- in a target
def latest_manifest(target: Tier2Target, scope: str, stream: str) -> Manifest | None:
    """The highest-versioned manifest of ``scope/stream`` in ``target`` (None: none yet)."""
    rel_dir = manifest_dir(scope, stream)
    versions = [v for v in map(parse_manifest_name, target.list(rel_dir)) if v is not None]
    if not versions:
        return None
    v = max(versions)
    rel = f"{rel_dir}/{manifest_name(v)}"
    data = target.read(rel, MAX_MANIFEST_BYTES)
    if data is None:
        raise CorruptDataError(f"tier-2 manifest {target.where(rel)} was listed but cannot be "
                               "found: is another process deleting this tier-2 folder?")
    m = Manifest.parse(data, target.where(rel))
    if (m.scope, m.stream, m.version) != (scope, stream, v):
        raise CorruptDataError(f"tier-2 manifest {target.where(rel)} is of {m.scope}/{m.stream} "
                               f"version {m.version}: it was copied or renamed by hand")
    return m


def publish_manifest(target: Tier2Target, manifest: Manifest) -> None:
    """Write ``manifest`` as its version, once (invariant 1); AlreadyExistsError if that version
    exists (another owner wrote it)."""
    rel = f"{manifest_dir(manifest.scope, manifest.stream)}/{manifest_name(manifest.version)}"
    try:
        target.put(rel, manifest.to_json(), exclusive=True)
    except AlreadyExistsError:
        raise AlreadyExistsError(f"tier-2 manifest {target.where(rel)} exists already: another "
                                 "store writes to this tier-2 folder") from None
