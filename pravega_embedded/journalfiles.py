"""Journal files and reclaiming them: which segments have data in which file, and deleting the
files that hold nothing live.

Owns: the files table (per journal file, the segments with data in it and the segment offset
where that data ends; LMDB table ``files``, mirrored in memory), the pins (journal positions
whose files must stay: data staged for a merge that no segment references yet), and deciding
which files to delete.

Invariants:
  1. Every section before the checkpoint's position is accounted for in the row of the file
     holding it: ``rows_for`` gives the rows a checkpoint writes with the entries it indexes.
  2. A file is deleted only when it lies wholly before the last checkpoint position (recovery
     never reads it), it is not the file being written, no pin is at or before its end, and
     every segment with data in it is dead there (``is_dead(uid, end)``: the segment no longer
     exists, or its head is at or past that end). Its row goes after the unlink, so a crash in
     between leaves a row for a missing file.
  3. At open, a row whose file is missing is dropped only if all its data is dead (a deletion a
     crash interrupted, invariant 2); a missing file that held live data is CorruptDataError,
     raised before anything is written.
  4. Staged data is pinned from before its first byte is written until the merge that
     references it has updated the rows in memory (``rows_for``), which protect it from then on.

Thread-safety: ``pinned`` and ``rows_for`` from any thread; ``reclaim`` is called with the
store's topology lock held (so no segment dies or is created meanwhile); ``load`` at open.
"""

from __future__ import annotations

import itertools
import os
import threading
from bisect import bisect_right
from contextlib import contextmanager
from typing import TYPE_CHECKING, Callable, Iterable, Iterator

from .errors import CorruptDataError
from .failstop import ENGINE_LOG
from .journal import Journal, file_name

if TYPE_CHECKING:
    from .metadata import Metadata
    from .segindex import IndexEntry
    from .segment import Segment

__all__ = ["JournalFiles"]

IsDead = Callable[[int, int], bool]


class JournalFiles:
    """The files table, pins and reclamation of one store's journal (module docstring)."""

    def __init__(self, journal: Journal, meta: "Metadata") -> None:
        self._journal = journal
        self._meta = meta
        self._lock = threading.Lock()
        self._ends: dict[int, dict[int, int]] = {}  # file base -> {segment uid: end offset}
        self._pins: dict[int, int] = {}
        self._missing: list[int] = []
        self._pin_ids = itertools.count(1)
        self.files_deleted = 0
        self.bytes_reclaimed = 0

    def load(self, is_dead: IsDead) -> None:
        """Read the files table at open (building it for stores that predate it) and check it
        against the files on disk (invariant 3). Writes nothing but the rebuild of a missing
        table: the rows of missing dead files go at ``settle``, once the whole store checked out."""
        bases = set(self._journal.files())
        ends = self._meta.files()
        if ends is None:
            ends = self._meta.rebuild_files(sorted(bases))
        missing = sorted(b for b in ends if b not in bases)
        for base in missing:
            live = {uid: end for uid, end in ends[base].items() if not is_dead(uid, end)}
            if live:
                uid, end = next(iter(live.items()))
                raise CorruptDataError(
                    f"journal file {file_name(base)} is missing but holds live data (segment uid "
                    f"{uid} up to offset {end}, and {len(live) - 1} more): restore it from a "
                    "backup; the store was not changed")
        for base in missing:
            del ends[base]
        self._ends = ends
        self._missing = missing

    def settle(self) -> None:
        """Drop the rows of the missing files ``load`` found dead (a deletion a crash cut short)."""
        if self._missing:
            ENGINE_LOG.info("journal: dropping the rows of %d files deleted before a crash",
                            len(self._missing))
            self._meta.drop_files(self._missing)
            self._missing = []

    @contextmanager
    def pinned(self) -> Iterator[None]:
        """Keep every journal file from the current write position on (invariant 4)."""
        key = next(self._pin_ids)
        at = self._journal.written()
        with self._lock:
            self._pins[key] = at
        try:
            yield
        finally:
            with self._lock:
                self._pins.pop(key, None)

    def rows_for(self, entries: Iterable[tuple["Segment", "IndexEntry"]]) -> dict[int, dict[int, int]]:
        """The rows changed by indexing ``entries`` (invariant 1), applied in memory too."""
        entries = list(entries)
        if not entries:
            return {}
        bases = self._journal.files()
        rows: dict[int, dict[int, int]] = {}
        with self._lock:
            for seg, e in entries:
                i = bisect_right(bases, e.pos) - 1
                if i < 0:
                    continue
                base = bases[i]
                row = rows.get(base)
                if row is None:
                    row = rows[base] = dict(self._ends.get(base, {}))
                if e.end > row.get(seg.uid, 0):
                    row[seg.uid] = e.end
            self._ends.update(rows)
        return rows

    def reclaim(self, applied_pos: int, is_dead: IsDead) -> int:
        """Delete the files that hold nothing live (invariant 2); returns the bytes freed."""
        journal = self._journal
        bases = journal.files()
        current = journal.status().file_base
        with self._lock:
            pin = min(self._pins.values(), default=None)
            ends = dict(self._ends)
        doomed = []
        for base, nxt in zip(bases, bases[1:]):
            if base >= current or nxt > applied_pos or (pin is not None and nxt > pin):
                break  # staged data from ``pin`` on is referenced by no segment yet
            if all(is_dead(uid, end) for uid, end in ends.get(base, {}).items()):
                doomed.append(base)
        freed = 0
        for base in doomed:
            try:
                freed += os.path.getsize(journal.path(base))
            except FileNotFoundError:
                pass
        if doomed:
            journal.drop_files(doomed)  # one fsync of the directory for them all
            with self._lock:
                for base in doomed:
                    self._ends.pop(base, None)
            self._meta.drop_files(doomed)
            self.files_deleted += len(doomed)
            self.bytes_reclaimed += freed
            ENGINE_LOG.debug("journal: reclaimed %d files, %d bytes", len(doomed), freed)
        return freed
