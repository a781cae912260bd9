"""Journal ranges: where a run of a segment's events lies in the journal files, so that another
process on the machine reads the bytes itself (a client of a shared store, docs/multiprocess.md).

Owns: ``JournalRange`` (a segment's offsets [start, stop) as pieces of journal sections),
planning one in the owner (``plan_range``: from the segment index, no byte read), its JSON form
on the wire, and reading one in the client (``RangeFiles``: the files opened by name, each
section checked against its CRC as the owner's own reads do, its events made a section at a time).

Invariants:
  1. A planned range starts and ends at event boundaries: its start is the reader's position,
     its end a section's end or the visible limit, and it never holds a section that begins a
     large event (a frame longer than its section) nor one of its continuations; a range that
     would start with one is not planned (the owner reads it itself).
  2. Only visible sections are planned (the caller bounds the range by the visible length), so
     their bytes are in the files (acknowledged <= written in every durability mode), and no
     section whose journal file was reclaimed (it is read from tier 2 by the owner).
  3. A range read in the client is read and checked a section at a time as its events are
     taken (the bytes still in the CPU's cache when parsed, one section's buffer alive):
     every section's length and CRC-32C (journal format 2 on), the pieces' total against
     ``stop - start`` (``from_json``); a damaged section raises CorruptDataError when it is
     reached, as an in-process reader's read of it does; a file gone, cut short or
     unreadable raises ``RangeGone`` naming the offset of the first event not made, and the
     caller asks the owner for the events from there to ``stop``.
  4. ``from_json`` accepts only what ``to_json`` makes, within ``MAX_PIECES`` pieces and
     ``MAX_SECTION`` bytes a section: anything else is ProtocolError before any allocation.

Thread-safety: ``plan_range`` may run on any thread (the index and journal take their locks);
a RangeFiles is used by one thread at a time.
"""

from __future__ import annotations

import errno as _errno
import os
from bisect import bisect_right
from itertools import chain
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Iterator

from .errors import ProtocolError, StorageError, storage_error
from .events import EventRead
from .frames import FrameParser
from .journal import FILE_HEADER_SIZE, SECTION_HEADER_SIZE, check_section, file_name, file_version
from .segsource import event_runs

if TYPE_CHECKING:
    from .segsource import SegmentSource

__all__ = ["JournalRange", "RangePiece", "RangeFiles", "RangeGone", "plan_range", "MAX_PIECES",
           "MAX_SECTION"]

MAX_PIECES = 8192  # the most sections one range may name ...
MAX_SECTION = 64 << 20  # ... and the most bytes one of them may have (a record is far less)
FILES_OPEN = 8  # journal files a RangeFiles keeps open
RUN_EVENTS = 256  # events a RangeFiles makes at a time (segsource.event_runs)


@dataclass(frozen=True, slots=True)
class RangePiece:
    """Bytes [lo, hi) of the section whose ``nbytes`` of data begin at journal position ``pos``
    in the file named ``base``."""

    base: int
    pos: int
    nbytes: int
    lo: int
    hi: int


@dataclass(frozen=True, slots=True)
class JournalRange:
    """A segment's offsets [start, stop), as the journal pieces that hold them, in order."""

    start: int
    stop: int
    pieces: tuple[RangePiece, ...]

    def to_json(self) -> dict[str, object]:
        return {"start": self.start, "stop": self.stop,
                "p": [[p.base, p.pos, p.nbytes, p.lo, p.hi] for p in self.pieces]}

    @staticmethod
    def from_json(value: object) -> "JournalRange":
        """Invariant 4: a range as ``to_json`` wrote it, else ProtocolError."""
        if not isinstance(value, dict) or not isinstance(value.get("p"), list):
            raise ProtocolError("a journal range is a map with its pieces")
        start, stop, raw = value.get("start"), value.get("stop"), value["p"]
        if not _ints(start, stop) or not 0 <= start <= stop or not 0 < len(raw) <= MAX_PIECES:
            raise ProtocolError("a journal range has bad bounds or too many pieces")
        pieces = []
        total = 0
        for p in raw:
            if not isinstance(p, list) or len(p) != 5 or not _ints(*p):
                raise ProtocolError("a journal range's piece is five integers")
            base, pos, nbytes, lo, hi = p
            if not (0 <= base and base + FILE_HEADER_SIZE + SECTION_HEADER_SIZE <= pos
                    and 0 < nbytes <= MAX_SECTION and 0 <= lo < hi <= nbytes):
                raise ProtocolError(f"a journal range's piece {p} is out of bounds")
            pieces.append(RangePiece(base, pos, nbytes, lo, hi))
            total += hi - lo
        if total != stop - start:
            raise ProtocolError("a journal range's pieces do not add up to its bounds")
        return JournalRange(start, stop, tuple(pieces))


def _ints(*values: object) -> bool:
    return all(type(v) is int for v in values)


def plan_range(src: "SegmentSource", offset: int, limit: int, max_bytes: int) -> JournalRange | None:
    """The range of ``src``'s segment from ``offset`` (an event boundary) towards ``limit``
    (visible, an event boundary), about ``max_bytes`` long and of at most MAX_PIECES sections
    (a writer that flushes every event makes a section per event); None if its first section
    cannot be in one (invariants 1, 2, 4)."""
    engine, seg = src.engine, src.seg
    tiered = engine.tiered.get(seg.uid, 0) if engine.cold is not None else 0
    pieces: list[RangePiece] = []
    bases: list[int] | None = None
    at, size = offset, 0
    while at < limit:
        entry, _ = src.section(at)
        if entry.n_events == 0:  # a large event's continuation: the section before began it
            if pieces:
                size -= pieces[-1].hi - pieces[-1].lo
                at -= pieces[-1].hi - pieces[-1].lo
                pieces.pop()
            break
        if size >= max_bytes or len(pieces) >= MAX_PIECES or (
                at < tiered and not engine.journal.holds(entry.pos)):
            break  # full (the next section was looked at: invariant 1), or only in tier 2
        if bases is None:
            bases = engine.journal.bases()
        i = bisect_right(bases, entry.pos) - 1
        if i < 0:
            break
        hi = min(entry.end, limit) - entry.start
        pieces.append(RangePiece(bases[i], entry.pos, entry.nbytes, at - entry.start, hi))
        size += hi - (at - entry.start)
        at = entry.start + hi
    if not pieces:
        return None
    return JournalRange(offset, at, tuple(pieces))


class RangeGone(Exception):
    """A range's journal file is gone, shorter than the range (reclaimed after it was
    planned) or unreadable: the events from ``at`` (an event boundary) to ``stop`` of the
    range read with context ``names`` are to be asked of the owner."""

    def __init__(self, message: str, at: int = 0, stop: int = 0, names: object = None) -> None:
        super().__init__(message)
        self.at, self.stop, self.names = at, stop, names


class RangeFiles:
    """Reads journal ranges from the files of the journal directory ``journal_dir``."""

    def __init__(self, journal_dir: str) -> None:
        self.dir = journal_dir
        self._fds: dict[int, tuple[int, int]] = {}  # base -> (fd, format version)
        self._frames = FrameParser(RUN_EVENTS)

    def runs(self, rng: JournalRange, segment_id: int, names: Any) -> Iterator[list[EventRead]]:
        """The events of ``rng`` (a range of segment ``segment_id``) as EventRead tuples whose
        context is ``names``, payloads as bytes, in runs of at most RUN_EVENTS made as they
        are taken, each section read and checked just before its first run (invariant 3;
        RangeGone and CorruptDataError come from ``next``)."""
        starts = [rng.start]
        for p in rng.pieces[:-1]:
            starts.append(starts[-1] + p.hi - p.lo)
        what = f"read of segment {segment_id} from the journal files"
        frames = self._frames

        def piece_events(p: RangePiece, at: int) -> Iterator[list[EventRead]]:
            try:
                data, lo, hi = self._piece(p)
            except (RangeGone, StorageError) as exc:
                raise RangeGone(str(exc), at, rng.stop, names) from exc
            return event_runs(data, at, segment_id, names, frames, what, lo, hi)
        return chain.from_iterable(map(piece_events, rng.pieces, starts))

    def _piece(self, p: RangePiece) -> tuple[bytes, int, int]:
        """The piece's section as read and checked (invariant 3), with the bounds of the
        piece's frames in it: parsed in place, not copied out."""
        fd, version = self._file(p.base)
        head = SECTION_HEADER_SIZE if version >= 2 else 0
        want = head + p.nbytes
        try:
            data = os.pread(fd, want, p.pos - head - p.base)
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "read journal file",
                                path=os.path.join(self.dir, file_name(p.base))) from exc
        if len(data) != want:
            raise RangeGone(f"journal {file_name(p.base)} ends before position {p.pos + p.nbytes}")
        if head:
            view = memoryview(data)
            check_section(view[:head], view[head:], file_name(p.base), p.pos)
        return data, head + p.lo, head + p.hi

    def _file(self, base: int) -> tuple[int, int]:
        got = self._fds.get(base)
        if got is not None:
            return got
        path = os.path.join(self.dir, file_name(base))
        try:
            fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
        except FileNotFoundError:
            raise RangeGone(f"journal file {path} is gone") from None
        except OSError as exc:
            raise storage_error(exc.errno or _errno.EIO, "open journal file", path=path) from exc
        try:
            try:
                head = os.pread(fd, FILE_HEADER_SIZE, 0)
            except OSError as exc:
                raise storage_error(exc.errno or _errno.EIO, "read journal file", path=path) from exc
            version = file_version(head, base, path)
        except BaseException:
            os.close(fd)
            raise
        while len(self._fds) >= FILES_OPEN:  # the oldest file goes first: reads move forward
            os.close(self._fds.pop(min(self._fds))[0])
        self._fds[base] = (fd, version)
        return fd, version

    def close(self) -> None:
        """Close the files. Idempotent."""
        fds, self._fds = self._fds, {}
        for fd, _ in fds.values():
            os.close(fd)

    def __enter__(self) -> "RangeFiles":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
