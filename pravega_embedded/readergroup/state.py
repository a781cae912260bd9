"""Reader-group state: one revisioned JSON document per group, kept in the store's LMDB.

Owns: the state document of a group (layout in docs/format.md, "Reader groups"), the pure
transitions on it (add/remove reader, begin/record/complete checkpoints), and
:class:`GroupState`, the synchronizer every reader and group handle updates it through.

The document::

    {"format": 1, "name": str, "revision": int, "generation": int, "created_ns": int,
     "config": ReaderGroupConfig.to_json(),
     "start": {seg: offset},                   # where the group (or its last reset) started
     "ends": {seg: offset},                    # end offsets from the end cuts (bounded reads)
     "readers": {reader_id: {"session": str, "segments": {seg: offset}}},
     "unassigned": {seg: offset}, "completed": {seg: offset},
     "checkpoints": [{"id", "name", "silent", "ns", "pending": [reader_id], "known": {seg: offset},
                      "positions": {seg: offset}}],          # outstanding, oldest first
     "done": [{"id", "name", "silent", "ns", "cuts": {seg: offset}}],   # the last 64 completed
     "next_cp": int, "last_auto_ns": int,
     "retention_cut": {seg: offset}}          # optional: update_retention_cut (manual retention)

``seg`` is ``"scope/stream/segment_id"``. A reader's ``segments`` offsets are where it stands as
of its last checkpoint (or where it acquired the segment): releasing a reader "at its last
checkpoint" puts exactly these offsets back.

Invariants:
  1. Every segment the group has reached is in at most one of: one reader's ``segments``,
     ``unassigned``, ``completed``; together they are the group's frontier (a StreamCut per
     stream, see ``topology``), so checkpoint cuts stay valid across scalings.
  2. ``revision`` grows by one per committed update. An update is optimistic: it is computed
     from a snapshot outside any lock and committed only if the revision is still the
     snapshot's (in memory and in LMDB), else recomputed from the newer state.
  3. A reader listed in a checkpoint's ``pending`` neither acquires, releases nor completes a
     segment; so every segment's checkpointed offset is the one where the reader holding it
     stood when it recorded the checkpoint, or its offset in ``known`` (unassigned or completed
     when the checkpoint began). The cut is ``known`` overlaid with ``positions``.
  4. A checkpoint completes in the update that empties its ``pending`` list.
  5. ``generation`` grows on every reset; a reader of an older generation must be re-created.
  6. A successor segment enters ``unassigned`` only in the update that completes the last of
     its predecessors (``advance``), so no reader reads it before they are all read; a
     completed segment leaves ``completed`` once all its successors are placed and none of
     its predecessors is still in ``completed`` (one that is waits for another successor, and
     would place this one again: read twice).

Thread-safety: :class:`GroupState` may be used from any thread. ``snap`` is replaced as a whole
(one reference store), so a reader can compare it by identity on its hot path.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from typing import Any, Callable

from ..errors import (
    CheckpointFailedError,
    CorruptDataError,
    FormatVersionError,
    PravegaEmbeddedError,
    ReaderGroupNotFoundError,
)
from ..streamcut import StreamCut
from .config import Checkpoint, ReaderGroupConfig, seg_key, split_seg_key

__all__ = [
    "GroupState",
    "CheckpointFuture",
    "new_state",
    "remove_reader",
    "begin_checkpoint",
    "record_checkpoint",
    "checkpoint_from",
    "advance",
    "end_of",
    "DONE_KEPT",
    "dumps",
    "parse_state",
]

STATE_FORMAT = 1
DONE_KEPT = 64


def _offsets(where: str, d: Any) -> None:
    if not isinstance(d, dict):
        raise ValueError(f"{where} is not an object")
    for k, off in d.items():
        split_seg_key(k)
        if isinstance(off, bool) or not isinstance(off, int) or off < 0:
            raise ValueError(f"{where}[{k!r}] is not an offset")


def _int(where: str, v: Any) -> None:
    if isinstance(v, bool) or not isinstance(v, int) or v < 0:
        raise ValueError(f"{where} is not a non-negative int")


def parse_state(name: str, raw: bytes) -> dict[str, Any]:
    """The state document in ``raw``, checked field by field and for invariant 1; anything
    else raises CorruptDataError (FormatVersionError for a newer format)."""
    try:
        s = json.loads(raw)
        if not isinstance(s, dict):
            raise ValueError("not an object")
        fmt = s.get("format")
        if isinstance(fmt, int) and not isinstance(fmt, bool) and fmt > STATE_FORMAT:
            raise FormatVersionError(
                f"reader group {name!r} has state format {fmt}; this release reads 1..{STATE_FORMAT}"
            )
        if fmt != STATE_FORMAT or s.get("name") != name:
            raise ValueError("wrong format or name")
        for f in ("revision", "generation", "created_ns", "next_cp", "last_auto_ns"):
            _int(f, s.get(f))
        ReaderGroupConfig.from_json(s["config"])
        for f in ("start", "ends", "unassigned", "completed"):
            _offsets(f, s.get(f))
        if "retention_cut" in s:
            _offsets("retention_cut", s["retention_cut"])
        readers = s.get("readers")
        if not isinstance(readers, dict):
            raise ValueError("readers is not an object")
        seen: set[str] = set()
        places = [s["unassigned"], s["completed"]]
        for rid, r in readers.items():
            if not isinstance(r, dict) or not isinstance(r.get("session", ""), str):
                raise ValueError(f"reader {rid!r} is malformed")
            _offsets(f"readers[{rid!r}].segments", r.get("segments"))
            places.append(r["segments"])
        for place in places:
            for k in place:
                if k in seen:
                    raise ValueError(f"segment {k} is in two places")
                seen.add(k)
        for key, fields in (("checkpoints", ("known", "positions")), ("done", ("cuts",))):
            if not isinstance(s.get(key), list):
                raise ValueError(f"{key} is not a list")
            for cp in s[key]:
                if not isinstance(cp, dict) or not isinstance(cp.get("name"), str) \
                        or not isinstance(cp.get("silent"), bool):
                    raise ValueError(f"a {key} entry is malformed")
                _int("checkpoint id", cp.get("id"))
                _int("checkpoint ns", cp.get("ns"))
                for f in fields:
                    _offsets(f"checkpoint {f}", cp.get(f))
                if key == "checkpoints" and not (isinstance(cp.get("pending"), list)
                                                 and all(isinstance(x, str) for x in cp["pending"])):
                    raise ValueError("a checkpoint's pending list is malformed")
        return s
    except FormatVersionError:
        raise
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError,
            PravegaEmbeddedError) as exc:
        raise CorruptDataError(f"the state of reader group {name!r} in the metadata store is "
                               f"damaged: {exc}") from None


def dumps(s: dict[str, Any]) -> bytes:
    return json.dumps(s, separators=(",", ":")).encode()


def new_state(name: str, config: dict[str, Any], start: dict[str, int], ends: dict[str, int],
              *, generation: int = 0, previous: dict[str, Any] | None = None,
              segments_of: Callable[[str], Any] | None = None) -> dict[str, Any]:
    """A group with no readers, every segment of the ``start`` frontier unassigned (or
    completed if it starts at its end, or is scaled away and read), then ``advance``d.
    ``previous``: the state being reset (its checkpoint ids go on)."""
    unassigned, completed = {}, {}
    for k, off in start.items():
        end = ends.get(k)
        skey, sid = split_seg_key(k)
        segs = None if segments_of is None else segments_of(skey)
        seg = None if segs is None else segs.get(sid)
        finished = seg is not None and seg.sealed and bool(seg.succs) and off >= seg.length
        (completed if (end is not None and off >= end) or finished else unassigned)[k] = off
    s = {
        "format": STATE_FORMAT, "name": name, "revision": 0, "generation": generation,
        "created_ns": time.time_ns(), "config": config, "start": dict(start), "ends": dict(ends),
        "readers": {}, "unassigned": unassigned, "completed": completed, "checkpoints": [],
        "done": [],  # a reset starts a new history: cuts of older generations no longer apply
        "next_cp": 1 if previous is None else previous["next_cp"],
        "last_auto_ns": time.time_ns(),
    }
    if segments_of is not None:
        advance(s, segments_of)
    return s


def end_of(s: dict[str, Any], k: str) -> int | None:
    """The end offset of segment ``k``: from the end cut, 0 for a segment created after the
    end cut of a bounded stream, None (no end) for a stream without an end cut."""
    e = s["ends"].get(k)
    if e is None:
        skey = split_seg_key(k)[0]
        if any(split_seg_key(x)[0] == skey for x in s["ends"]):
            return 0
    return e


def advance(s: dict[str, Any], segments_of: Callable[[str], Any]) -> bool:
    """After segments completed: make unassigned every successor whose predecessors are all
    completed at their ends, and drop completed segments whose successors are all placed
    (invariant 6). ``segments_of(stream_key)`` is that stream's ``{segment_id: Segment}`` or
    None. True if anything changed."""
    placed = set(s["unassigned"]) | set(s["completed"])
    for r in s["readers"].values():
        placed |= set(r["segments"])
    completed = s["completed"]
    changed, any_change = True, False
    while changed:
        changed = False
        for k, off in list(completed.items()):
            skey, sid = split_seg_key(k)
            segs = segments_of(skey)
            seg = None if segs is None else segs.get(sid)
            if seg is None or not seg.succs or not seg.sealed or off < seg.length:
                continue  # not scaled away, or completed at an end cut: nothing follows
            for t in seg.succs:
                tk = seg_key(skey, t)
                if tk in placed or t not in segs:
                    continue
                if all(completed.get(seg_key(skey, p), -1) >= segs[p].length and segs[p].sealed
                       for p in segs[t].preds):
                    s["unassigned"][tk] = 0
                    placed.add(tk)
                    changed = any_change = True
            # a predecessor still in completed would place this segment again once it left
            if all(seg_key(skey, t) in placed for t in seg.succs) and \
                    not any(seg_key(skey, p) in completed for p in seg.preds):
                del completed[k]
                changed = any_change = True
    return any_change


def remove_reader(s: dict[str, Any], rid: str, final: dict[str, int] | None) -> None:
    """Take ``rid`` out of the group: its segments become unassigned at ``final`` (its exact
    position) or, if None, at the offsets of its last checkpoint; pending checkpoints count
    those offsets as its answer (a leaving reader never blocks a checkpoint)."""
    me = s["readers"].pop(rid)
    offsets = {k: (off if final is None else final[k]) for k, off in me["segments"].items()}
    s["unassigned"].update(offsets)
    for cp in s["checkpoints"]:
        if rid in cp["pending"]:
            cp["pending"].remove(rid)
            cp["positions"].update(offsets)


def begin_checkpoint(s: dict[str, Any], name: str, silent: bool) -> int:
    """Add an outstanding checkpoint that every current reader must answer; returns its id."""
    cid = s["next_cp"]
    s["next_cp"] = cid + 1
    known = dict(s["unassigned"])
    known.update(s["completed"])
    s["checkpoints"].append({
        "id": cid, "name": name, "silent": silent, "ns": time.time_ns(),
        "pending": sorted(s["readers"]), "known": known, "positions": {},
    })
    return cid


def record_checkpoint(s: dict[str, Any], rid: str, cid: int, positions: dict[str, int]) -> bool:
    """Reader ``rid`` answers checkpoint ``cid`` at ``positions`` (all its segments); its
    release offsets become these. False if it was not pending there."""
    for cp in s["checkpoints"]:
        if cp["id"] == cid and rid in cp["pending"]:
            cp["pending"].remove(rid)
            cp["positions"].update(positions)
            s["readers"][rid]["segments"].update(positions)
            return True
    return False


def _settle(s: dict[str, Any]) -> None:
    """Complete every checkpoint whose pending list is empty (invariant 4)."""
    still = []
    for cp in s["checkpoints"]:
        if cp["pending"]:
            still.append(cp)
            continue
        cuts = dict(cp["known"])
        cuts.update(cp["positions"])
        s["done"].append({"id": cp["id"], "name": cp["name"], "silent": cp["silent"],
                          "ns": time.time_ns(), "cuts": cuts})
    if len(still) != len(s["checkpoints"]):
        s["checkpoints"] = still
        del s["done"][:-DONE_KEPT]


def checkpoint_from(entry: dict[str, Any], streams: list[str]) -> Checkpoint:
    """The Checkpoint value of a ``done`` entry (or of the start positions)."""
    per: dict[str, dict[int, int]] = {k: {} for k in streams}
    for k, off in entry["cuts"].items():
        skey, sid = split_seg_key(k)
        per.setdefault(skey, {})[sid] = off
    cuts = {}
    for skey, pos in per.items():
        scope, stream = skey.split("/", 1)
        if pos:
            cuts[(scope, stream)] = StreamCut.of(scope, stream, pos)
    return Checkpoint(name=entry["name"], stream_cuts=cuts)


class CheckpointFuture(concurrent.futures.Future):  # type: ignore[type-arg]
    """A checkpoint in progress: ``result(timeout)`` returns the Checkpoint once every reader
    has answered (raises TimeoutError if it has not by then, CheckpointFailedError if the
    group was reset or deleted first). ``name`` is the checkpoint's name."""

    def __init__(self, name: str, cid: int) -> None:
        super().__init__()
        self.name = name
        self.checkpoint_id = cid

    def __repr__(self) -> str:
        return f"<CheckpointFuture {self.name!r} {self._state.lower()}>"


class GroupState:
    """The synchronizer of one group's state (see the module invariants)."""

    def __init__(self, meta: Any, name: str, raw: bytes) -> None:
        self.meta = meta
        self.name = name
        state = parse_state(name, raw)
        self.snap: tuple[int, dict[str, Any]] = (state["revision"], state)
        self._raw = raw
        self._lock = threading.Lock()
        self.cond = threading.Condition(threading.Lock())
        self.deleted = False
        self.readers: dict[str, Any] = {}  # live reader objects of this process, by id
        self._futures: dict[int, CheckpointFuture] = {}
        self.conflicts = 0  # optimistic updates that lost a race and were recomputed

    @property
    def state(self) -> dict[str, Any]:
        """The current state (read-only: copy before changing anything)."""
        return self.snap[1]

    @property
    def revision(self) -> int:
        return self.snap[0]

    def update(self, fn: Callable[[dict[str, Any]], bool]) -> dict[str, Any] | None:
        """Apply ``fn`` to a private copy of the current state and commit it (invariant 2).
        ``fn`` returns False for "no change" (nothing is written) and may raise to abort; it is
        called again on a newer state when another update won the race. Returns the committed
        state, or None."""
        while True:
            rev, raw = self.snap[0], self._raw
            if self.deleted:
                raise ReaderGroupNotFoundError(f"reader group {self.name!r} was deleted")
            s = json.loads(raw)
            if not fn(s):
                return None
            _settle(s)
            s["revision"] = rev + 1
            out = dumps(s)
            with self._lock:
                if self.snap[0] != rev or self.deleted:
                    self.conflicts += 1
                    continue
                if not self.meta.put_group(self.name, out, rev):
                    raise ReaderGroupNotFoundError(
                        f"reader group {self.name!r} changed or vanished in the metadata store"
                    )
                self._raw = out
                self.snap = (rev + 1, s)
            self.resolve()
            with self.cond:
                self.cond.notify_all()
            return s

    def mark_deleted(self) -> None:
        with self._lock:
            self.deleted = True
            self.snap = (self.snap[0], self.snap[1])  # a new identity: readers look again
        self.resolve()
        with self.cond:
            self.cond.notify_all()

    # ------------------------------------------------------------------ checkpoint futures
    def watch(self, fut: CheckpointFuture) -> CheckpointFuture:
        self._futures[fut.checkpoint_id] = fut
        self.resolve()
        return fut

    def resolve(self) -> None:
        """Complete or fail the futures of checkpoints that are done or gone."""
        if not self._futures:
            return
        s = self.snap[1]
        done = {d["id"]: d for d in s["done"]}
        outstanding = {c["id"] for c in s["checkpoints"]}
        for cid in list(self._futures):
            if cid in done and not self.deleted:
                fut = self._futures.pop(cid, None)  # only the thread that pops it completes it
                if fut is not None:
                    fut.set_result(checkpoint_from(done[cid], s["config"]["streams"]))
            elif cid not in outstanding or self.deleted:
                fut = self._futures.pop(cid, None)
                if fut is not None:
                    why = "the group was deleted" if self.deleted else "it was cancelled or the group was reset"
                    fut.set_exception(CheckpointFailedError(
                        f"checkpoint {fut.name!r} of reader group {self.name!r} cannot complete: {why}"))
