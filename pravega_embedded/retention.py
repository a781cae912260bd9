"""Retention: truncating streams by time, size or consumption, and giving the disk back.

Owns: the retention marks of each stream (its tail cut, total bytes and time, recorded every
``retention_interval`` seconds, kept in LMDB), the choice of the truncation cut from a stream's
policy and its subscribed reader groups, and reclaiming disk after truncation (deleting journal
files whose every section is truncated or belongs to a deleted stream).

The rule (docs/retention.md). Let ``keep`` be the newest mark that still leaves at least
``min`` (seconds or bytes) after it, and ``force`` the newest mark that leaves at least ``max``:

- no subscribers: truncate at ``keep`` (``by_time``/``by_size``); ``by_consumption`` waits;
- subscribers (groups with ``retention="last_checkpoint"`` or ``"manual"``): truncate at the
  slowest subscriber's cut, but not past ``keep`` and at least at ``force``. A subscriber that
  has no cut yet holds truncation back (up to ``force``).

Invariants:
  1. Truncation only moves a stream's head forward (element-wise max of full maps) and is
     committed through ``Store.truncate_stream``'s path (journal durable first).
  2. Disk is given back by ``JournalFiles.reclaim`` (journalfiles invariant 2) once a
     truncation is committed and checkpointed.
  3. Marks are ordered by time; marks at or behind the head are dropped, at most ``MAX_MARKS``
     are kept per stream (thinned evenly).

Thread-safety: ``tick`` runs on the store's maintenance thread.
"""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Any

from .topology import expand, frontier, lower_bound, upper_bound

if TYPE_CHECKING:
    from .engine import Engine
    from .stream import StreamState

__all__ = ["Retention", "MAX_MARKS"]

MAX_MARKS = 1000


class Retention:
    """Marks and policy evaluation of one store."""

    def __init__(self, engine: "Engine", interval: float) -> None:
        self.engine = engine
        self.interval = interval
        self.marks: dict[str, list[tuple[int, int, dict[int, int]]]] = {}
        for key, marks in engine.meta.retention_marks():
            self.marks[key] = [(int(ns), int(total), {int(k): int(v) for k, v in cut.items()})
                               for ns, total, cut in marks]
        self._last_mark = 0.0
        self.truncations = 0  # truncations done by retention (for tests and the CLI)

    # ------------------------------------------------------------------ marks
    def record_marks(self, now_ns: int) -> None:
        """Record the tail of every stream that has a retention policy."""
        engine = self.engine
        changed = {}
        for st in list(engine.streams.values()):
            if st.config.retention.kind == "none" or st.deleted:
                continue
            with engine.append_lock:
                segs = dict(st.segments)
                full = {sid: s.length for sid, s in segs.items()}
            total = sum(full.values())
            marks = self.marks.setdefault(st.key, [])
            if marks and marks[-1][1] == total:
                continue  # nothing written since the last mark
            marks.append((now_ns, total, frontier(segs, full)))
            self._prune(st, marks)
            changed[st.key] = marks
        if changed:
            engine.sync_all("retention marks")  # a mark never names bytes a power cut could lose
            engine.meta.put_retention_marks(changed)

    def _prune(self, st: "StreamState", marks: list[tuple[int, int, dict[int, int]]]) -> None:
        head_total = sum(st.head.get(sid, 0) for sid in st.segments)
        # keep the newest mark at or behind the head (a later truncation may still use it)
        while len(marks) > 1 and marks[1][1] <= head_total:
            del marks[0]
        if len(marks) > MAX_MARKS:
            marks[:] = marks[:-1:2] + [marks[-1]]

    def forget(self, stream_key: str) -> None:
        self.marks.pop(stream_key, None)

    # ------------------------------------------------------------------ policy
    def target(self, st: "StreamState", now_ns: int) -> dict[int, int] | None:
        """The full map to truncate ``st`` at now, or None (module docstring)."""
        policy = st.config.retention
        if policy.kind == "none":
            return None
        segs = dict(st.segments)
        total = sum(s.length for s in segs.values())
        marks = self.marks.get(st.key, [])

        def newest(ok: Any) -> dict[int, int] | None:
            best = None
            for ns, tot, cut in marks:
                if ok(ns, tot) and all(sid in segs and off <= segs[sid].length for sid, off in cut.items()):
                    best = cut
            return None if best is None else expand(segs, best)

        if policy.kind == "time":
            keep = newest(lambda ns, _t: ns <= now_ns - policy.min * 1e9)
            force = None if policy.max is None else newest(lambda ns, _t: ns <= now_ns - policy.max * 1e9)
        elif policy.kind == "size":
            keep = newest(lambda _n, tot: total - tot >= policy.min)
            force = None if policy.max is None else newest(lambda _n, tot: total - tot >= policy.max)
        else:  # consumption
            keep = {sid: s.length for sid, s in segs.items()}
            force = None
        subs = self.engine.subscribers(st.key)
        if not subs:
            return None if policy.kind == "consumption" else keep
        slowest: dict[int, int] | None = None
        for cut in subs:
            if cut is None or not all(sid in segs for sid in cut):
                slowest = None
                break
            full = expand(segs, cut)
            slowest = full if slowest is None else lower_bound(slowest, full)
        target = None
        if slowest is not None and keep is not None:
            target = lower_bound(slowest, keep)
        if force is not None:
            target = force if target is None else upper_bound(target, force)
        return target

    def tick(self) -> None:
        """Record marks when due, truncate streams whose policy says so, reclaim disk."""
        engine = self.engine
        now = time.monotonic()
        now_ns = time.time_ns()
        if now - self._last_mark >= self.interval:
            self._last_mark = now
            self.record_marks(now_ns)
        truncated = False
        for st in list(engine.streams.values()):
            if st.config.retention.kind == "none" or st.deleted:
                continue
            target = self.target(st, now_ns)
            if target is None:
                continue
            head = st.full_head()
            if all(target.get(sid, 0) <= off for sid, off in head.items()):
                continue
            if engine.truncate(st, target, "retention"):
                self.truncations += 1
                truncated = True
        if truncated:
            engine.checkpoint()  # so every file before the one being written can be judged now
            engine.reclaim()
