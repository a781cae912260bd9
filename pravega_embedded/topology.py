"""Topology: the history of a stream's segments as a graph, and what a StreamCut means in it.

Owns: the pure functions over a stream's segment graph (each segment knows its predecessors and
successors): turning a StreamCut into a position for *every* segment and back, validating cuts,
and validating a scaling request.

Two forms of one position:

- a **frontier** (what a :class:`StreamCut` holds): offsets for a set of segments whose key
  ranges together cover [0, 1). It stays valid in every later epoch.
- a **full map**: an offset for every segment of the stream. ``expand`` gives each strict
  ancestor of a named segment its length (read completely), each named segment its offset and
  every other segment 0 (not reached). ``frontier`` is the inverse: it names the segments that
  are reached (every predecessor read completely, recursively) and not passed (read completely
  with all successors reached).

Invariants:
  1. Segment ids grow with the epoch (``epoch << 32 | number``), and a segment's predecessors
     were created in earlier epochs, so ascending segment id is a topological order.
  2. A valid full map is *consistent*: a segment with an offset > 0 has every predecessor at
     its length. The element-wise min and max of two consistent full maps are consistent (so a
     head only moves forward and a slowest-reader bound is a cut).
  3. ``expand(frontier(full)) == full`` for every consistent full map ``full``.
  4. The successors of a sealed segment cover its key range exactly (``check_scale``), so a
     reader that reads a successor only after all its predecessors keeps per-key order.

Thread-safety: pure functions; the caller passes a stable view of the segments (the store calls
them under its locks, readers with segments whose predecessors never change).
"""

from __future__ import annotations

from typing import Any, Iterable, Mapping, Sequence

from .errors import InvalidConfigurationError, InvalidStreamCutError
from .streamcut import format_segment_id

__all__ = [
    "expand",
    "frontier",
    "check_cut",
    "check_scale",
    "union",
    "ancestors",
    "lower_bound",
    "upper_bound",
]


def ancestors(segs: Mapping[int, Any], sids: Iterable[int]) -> set[int]:
    """Every strict ancestor (predecessor, recursively) of the segments ``sids``."""
    out: set[int] = set()
    stack = [p for s in sids for p in segs[s].preds]
    while stack:
        p = stack.pop()
        if p not in out:
            out.add(p)
            stack.extend(segs[p].preds)
    return out


def expand(segs: Mapping[int, Any], named: Mapping[int, int]) -> dict[int, int]:
    """The full map of a frontier (module docstring): ancestors at their length, the named
    segments at their offsets, every other segment at 0."""
    full = dict.fromkeys(segs, 0)
    for a in ancestors(segs, named):
        full[a] = segs[a].length
    full.update(named)
    return full


def frontier(segs: Mapping[int, Any], full: Mapping[int, int]) -> dict[int, int]:
    """The frontier of a full map (module docstring): reached and not passed segments."""
    reached: dict[int, bool] = {}
    done: dict[int, bool] = {}
    for sid in sorted(segs):
        seg = segs[sid]
        off = full.get(sid, 0)
        done[sid] = seg.sealed and off >= seg.length
        reached[sid] = all(reached.get(p, False) and done.get(p, False) for p in seg.preds)
    out = {}
    for sid in sorted(segs):
        if not reached[sid]:
            continue
        succs = segs[sid].succs
        if done[sid] and succs and all(reached.get(t, False) for t in succs):
            continue
        out[sid] = full.get(sid, 0)
    return out


def union(ranges: Iterable[tuple[float, float]]) -> list[tuple[float, float]]:
    """Sorted ranges merged where they touch or overlap."""
    out: list[list[float]] = []
    for lo, hi in sorted(ranges):
        if out and lo <= out[-1][1]:
            out[-1][1] = max(out[-1][1], hi)
        else:
            out.append([lo, hi])
    return [(lo, hi) for lo, hi in out]


def check_cut(segs: Mapping[int, Any], named: Mapping[int, int], what: str, name: str) -> dict[int, int]:
    """Validate a frontier against the stream's segments; return its full map. Raises
    InvalidStreamCutError naming the problem (unknown segment, key space not covered, offset
    past a segment's end, or a segment read while a predecessor is not read completely)."""
    for sid, off in named.items():
        seg = segs.get(sid)
        if seg is None:
            raise InvalidStreamCutError(
                f"{what}: the StreamCut names segment {format_segment_id(sid)}, which {name} does "
                f"not have (segments: {', '.join(format_segment_id(s) for s in sorted(segs))})"
            )
        if off > seg.length:
            raise InvalidStreamCutError(
                f"{what}: offset {off} is beyond the end ({seg.length}) of segment {seg.name}"
            )
    covered = union((segs[s].low, segs[s].high) for s in named)
    if covered != [(0.0, 1.0)]:
        gaps = _gaps(covered)
        raise InvalidStreamCutError(
            f"{what}: the StreamCut's segments do not cover the key space of {name}; missing "
            + ", ".join(f"[{lo:.6g}, {hi:.6g})" for lo, hi in gaps)
        )
    full = expand(segs, named)
    complete: dict[int, bool] = {}
    for sid in sorted(segs):
        seg = segs[sid]
        preds_complete = all(complete[p] for p in seg.preds)
        complete[sid] = preds_complete and full[sid] >= seg.length
        if full[sid] > 0 and not preds_complete:
            raise InvalidStreamCutError(
                f"{what}: the StreamCut is past the start of segment {seg.name} but not at the "
                f"end of all its predecessors ({', '.join(segs[p].name for p in seg.preds)})"
            )
    return full


def _gaps(covered: Sequence[tuple[float, float]]) -> list[tuple[float, float]]:
    gaps = []
    at = 0.0
    for lo, hi in covered:
        if lo > at:
            gaps.append((at, lo))
        at = max(at, hi)
    if at < 1.0:
        gaps.append((at, 1.0))
    return gaps


def lower_bound(a: Mapping[int, int], b: Mapping[int, int]) -> dict[int, int]:
    """Element-wise min of two full maps (consistent by invariant 2)."""
    return {s: min(a.get(s, 0), b.get(s, 0)) for s in set(a) | set(b)}


def upper_bound(a: Mapping[int, int], b: Mapping[int, int]) -> dict[int, int]:
    """Element-wise max of two full maps (consistent by invariant 2)."""
    return {s: max(a.get(s, 0), b.get(s, 0)) for s in set(a) | set(b)}


def check_scale(open_segments: Mapping[int, Any], seal: Sequence[int],
                new_ranges: Sequence[tuple[float, float]], name: str) -> list[tuple[float, float]]:
    """Validate a scaling request: ``seal`` names distinct open segments, and ``new_ranges``
    are non-empty, non-overlapping ranges in [0, 1) that cover exactly the sealed segments' key
    ranges. Returns the new ranges sorted. Raises InvalidConfigurationError."""
    if isinstance(seal, (str, bytes)) or not isinstance(seal, Sequence) or not seal:
        raise InvalidConfigurationError(f"scale {name}: seal must be a non-empty list of segment ids")
    if len(set(seal)) != len(seal):
        raise InvalidConfigurationError(f"scale {name}: a segment is named twice in seal")
    for sid in seal:
        if isinstance(sid, bool) or not isinstance(sid, int) or sid not in open_segments:
            shown = format_segment_id(sid) if isinstance(sid, int) and not isinstance(sid, bool) \
                and 0 <= sid < (1 << 64) else repr(sid)
            raise InvalidConfigurationError(
                f"scale {name}: {shown} is not an open segment (open: "
                f"{', '.join(format_segment_id(s) for s in sorted(open_segments))})"
            )
    if isinstance(new_ranges, (str, bytes)) or not isinstance(new_ranges, Sequence) or not new_ranges:
        raise InvalidConfigurationError(f"scale {name}: new_ranges must be a non-empty list of (low, high)")
    ranges = []
    for r in new_ranges:
        if not (isinstance(r, Sequence) and len(r) == 2
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) for x in r)):
            raise InvalidConfigurationError(f"scale {name}: a new range must be (low, high), got {r!r}")
        lo, hi = float(r[0]), float(r[1])
        if not 0.0 <= lo < hi <= 1.0:
            raise InvalidConfigurationError(
                f"scale {name}: range ({lo}, {hi}) must satisfy 0 <= low < high <= 1"
            )
        ranges.append((lo, hi))
    ranges.sort()
    for (_, h1), (l2, _) in zip(ranges, ranges[1:]):
        if l2 < h1:
            raise InvalidConfigurationError(f"scale {name}: new ranges overlap at {l2}")
    sealed = union((open_segments[s].low, open_segments[s].high) for s in seal)
    if union(ranges) != sealed:
        raise InvalidConfigurationError(
            f"scale {name}: the new ranges {_fmt(union(ranges))} do not cover exactly the sealed "
            f"segments' key ranges {_fmt(sealed)}"
        )
    return ranges


def _fmt(ranges: Sequence[tuple[float, float]]) -> str:
    return " + ".join(f"[{lo!r}, {hi!r})" for lo, hi in ranges)
