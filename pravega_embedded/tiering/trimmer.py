"""Truncation and retention in tier 2: dropping what lies before a stream's head.

Owns: keeping each stream's tier-2 files in step with its head (moved by ``truncate_stream``
or a retention policy): files wholly before the head leave LMDB and the manifest, a file that
straddles the head is rewritten from the head on, and the files left out are deleted from
tier 2 once ``delete_grace`` seconds have passed (so a reader of an older manifest, such as a
Spark job that listed it, can finish).

Invariants:
  1. A plain reader never sees a truncated event once the grace has passed: the manifest and
     the files left lose every row before the head. A straddling file is replaced by a file of
     the same rows from the head on (for a byte stream, the chunk holding the head is cut
     there), written and checked like a copy before LMDB swaps the two.
  2. Crash safety as the copier's: the rewrite is recorded as a copy in progress first (the
     next open deletes its file if LMDB never recorded it); one LMDB transaction forgets the
     old files, records the new one, schedules the old ones for deletion (``g`` rows) and takes
     the next manifest version; the manifest is published after it (or at the next open). A
     scheduled deletion is removed from LMDB only after the file is gone.
  3. Nothing is deleted from tier 2 while it fails: a failed deletion stays scheduled and is
     tried again next round.

Thread-safety: runs under the copier's lock (one copy or trim at a time per store).
"""

from __future__ import annotations

import logging
import time
from typing import TYPE_CHECKING, Callable

import pyarrow as pa
import pyarrow.compute as pc

from ..errors import CorruptDataError, StreamNotFoundError
from .manifest import TieredFile
from .parquetfile import (SegmentRows, file_rel, read_segment_file, rows_table,
                          verify_segment_file, write_segment_file)

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment
    from ..stream import StreamState
    from .copier import Copier

__all__ = ["Trimmer"]

LOG = logging.getLogger("pravega_embedded.tiering")


class Trimmer:
    """Applies stream heads to tier 2 (module docstring)."""

    def __init__(self, engine: "Engine", copier: "Copier", delete_grace: float,
                 on_changed: Callable[[int], None]) -> None:
        self._engine = engine
        self._copier = copier
        self.delete_grace = delete_grace
        self._on_changed = on_changed  # segment uid whose files changed (cold reads forget them)

    def trim(self, st: "StreamState") -> bool:
        """Apply ``st``'s head to its tier-2 files (invariants 1, 2); True if anything changed."""
        changed = False
        with self._copier.lock:
            for seg in list(st.segments.values()):
                if st.deleted:
                    return changed
                changed |= self._trim_segment(st, seg)
        return changed

    def _trim_segment(self, st: "StreamState", seg: "Segment") -> bool:
        head = st.head.get(seg.segment_id, 0)
        files = self._copier.files(seg)
        doomed = [f for f in files if f.end <= head]
        straddle = next((f for f in files if f.first < head < f.end), None)
        if not doomed and straddle is None:
            return False
        meta = self._engine.meta
        tiered, left = meta.tiering_segment(seg.uid)
        if left is not None:  # a failed copy not undone yet: undo it first (its marker is ours)
            self._copier.delete_copy(st, seg.segment_id, left)
            meta.tiering_abort(seg.uid, tiered)
        new: TieredFile | None = None
        if straddle is not None:
            if not meta.tiering_begin(seg.uid, st.key, tiered, (head, straddle.end)):
                return False  # deleted meanwhile
            try:
                new = self._rewrite(st, straddle, head)
            except BaseException:
                self._copier.forget(seg, tiered, (head, straddle.end), st)
                raise
        gone = doomed + ([straddle] if straddle is not None else [])
        due = time.time_ns() + int(self.delete_grace * 1e9)
        version = meta.tiering_replace(
            seg.uid, st.key, [f.first for f in gone],
            None if new is None else (new.first, new.end, new.events, new.size, new.min_write_us,
                                      new.max_write_us),
            [file_rel(st.scope, st.name, f) for f in gone], due)
        self._on_changed(seg.uid)  # cold reads look the files up afresh
        if not version:
            raise StreamNotFoundError(f"stream {st.key} was deleted during a tier-2 truncation")
        LOG.info("tier 2 of %s segment %d: %d files before the head %d left out%s", st.key,
                 seg.segment_id, len(gone), head, "" if new is None else ", one rewritten")
        self._copier.publish(st, version)
        return True

    def _rewrite(self, st: "StreamState", f: TieredFile, head: int) -> TieredFile:
        """The rows of ``f`` from ``head`` on as a new file (invariant 1)."""
        target = self._copier.target
        t = read_segment_file(target, st.scope, st.name, f)
        offs = t.column("offset")
        first = pc.index(pc.greater_equal(offs, head), True).as_py()  # -1: none
        i = len(t) if first < 0 else first
        if st.kind == "bytes" and i > 0 and (i == len(t) or offs[i].as_py() > head):
            i -= 1  # the chunk holding the head: cut it there
            row = t.slice(i, 1)
            cut = head - offs[i].as_py()
            chunk = rows_table([head], [None], [row.column("event")[0].as_py()[cut:]],
                               row.column("write_time").cast(pa.int64()).to_pylist())
            table = pa.concat_tables([chunk, t.slice(i + 1)])
        elif i == len(t) or offs[i].as_py() != head:
            raise CorruptDataError(f"tier-2 file {target.where(file_rel(st.scope, st.name, f))}: "
                                   f"no event starts at the head {head}")
        else:
            table = t.slice(i)
        rows = SegmentRows.from_table(table, f.end)
        new = write_segment_file(target, st.scope, st.name, f.segment_id, rows)
        verify_segment_file(target, st.scope, st.name, new)
        return new

    def sweep(self) -> int:
        """Delete the tier-2 files whose grace has passed (invariants 2, 3); returns how many."""
        meta = self._engine.meta
        target = self._copier.target
        n = 0
        for key, rel in meta.tier2_graced(time.time_ns()):
            target.delete(rel)
            meta.tier2_graced_done(key)
            n += 1
        return n
