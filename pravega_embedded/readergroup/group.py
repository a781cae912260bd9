"""Reader groups: the handle users hold, and the per-store service that creates and finds them.

Owns: creating, finding, listing and deleting groups (their state lives in the store's LMDB,
``groups`` table), the group handle (readers, checkpoints, stream cuts, offline readers, reset,
lag and distribution figures).

Invariants:
  1. One GroupState per group per open store; every handle and reader of the group shares it.
  2. At most one open reader object per reader id per group in this process.
  3. A group's start and end positions are validated against its streams when it is created
     or reset (boundaries, head, end not before start).
  4. A group whose stored state is damaged raises CorruptDataError when used; the other
     groups work, and deleting it is the way out.

Thread-safety: all methods of ReaderGroup and ReaderGroupService are thread-safe.
"""

from __future__ import annotations

import threading
from dataclasses import replace
from typing import TYPE_CHECKING, Any, Iterable, Mapping

from .. import eventcount
from ..errors import (
    CheckpointExistsError,
    CorruptDataError,
    InvalidConfigurationError,
    InvalidPositionError,
    InvalidStreamCutError,
    MaxCheckpointsExceededError,
    ReaderExistsError,
    ReaderGroupClosedError,
    ReaderGroupExistsError,
    ReaderGroupNotFoundError,
    ReaderNotFoundError,
    StreamNotFoundError,
    TruncatedDataError,
)
from ..names import (
    validate_checkpoint_name,
    validate_group_name,
    validate_reader_id,
    validate_scope,
    validate_stream,
)
from ..segsource import SegmentSource, resolve_cut
from ..storecore import keep
from ..streamcut import StreamCut, format_segment_id
from ..timelookup import cut_at
from ..topology import expand, frontier
from .config import (
    Checkpoint,
    Position,
    ReaderGroupConfig,
    SegmentDistribution,
    seg_key,
    split_seg_key,
)
from .reader import GroupReader
from .state import (
    CheckpointFuture,
    GroupState,
    begin_checkpoint,
    checkpoint_from,
    dumps,
    end_of,
    new_state,
    remove_reader,
)

if TYPE_CHECKING:
    from ..engine import Engine
    from ..serializers import Serializer

__all__ = ["ReaderGroup", "ReaderGroupService"]


def _retention_cut(s: dict[str, Any]) -> dict[str, int] | None:
    """A subscribed group's retention cut: its last checkpoint's, or the manual one."""
    kind = s["config"].get("retention", "none")
    if kind == "last_checkpoint":
        return s["done"][-1]["cuts"] if s["done"] else None
    if kind == "manual":
        return s.get("retention_cut") or None
    return None


def _seg_name(k: str) -> str:
    skey, sid = split_seg_key(k)
    return f"{skey}/{format_segment_id(sid)}"


class ReaderGroupService:
    """The reader groups of one open store (``store.create_reader_group`` and friends)."""

    def __init__(self, engine: "Engine") -> None:
        self.engine = engine
        self.lock = threading.RLock()
        self.groups: dict[str, GroupState] = {}
        self.damaged: dict[str, CorruptDataError] = {}  # raised on use; delete_reader_group clears
        for name, raw in engine.meta.groups():
            if isinstance(raw, CorruptDataError):
                self.damaged[name] = raw
                continue
            try:
                self.groups[name] = GroupState(engine.meta, name, raw)
            except CorruptDataError as exc:
                self.damaged[name] = exc

    def initial(self, config: ReaderGroupConfig) -> tuple[dict[str, int], dict[str, int]]:
        """Start and end offsets of every segment of the config's streams (invariant 3)."""
        engine = self.engine
        start: dict[str, int] = {}
        ends: dict[str, int] = {}
        for scope, stream in config.streams:
            st = engine.stream(scope, stream, "events")
            sp = resolve_cut(engine, st, config.start_cut(scope, stream), f"reader group start of {st.key}")
            ep = resolve_cut(engine, st, config.end_cut(scope, stream), f"reader group end of {st.key}")
            segs = dict(st.segments)
            full = st.full_head() if sp is None else sp
            for sid, seg in segs.items():
                head = st.head.get(sid, 0)
                off = full.get(sid, 0)
                if off < head:
                    raise TruncatedDataError(
                        f"start offset {off} of segment {seg.name} is before the stream's head ({head})"
                    )
                if ep is not None:
                    if ep.get(sid, 0) < off:
                        raise InvalidStreamCutError(
                            f"the end cut of {st.key} is before the start in segment {seg.name}"
                        )
                    ends[seg_key(st.key, sid)] = ep.get(sid, 0)
            for sid, off in frontier(segs, full).items():
                start[seg_key(st.key, sid)] = off
        return start, ends

    @staticmethod
    def config_of(config: Any) -> ReaderGroupConfig:
        if isinstance(config, ReaderGroupConfig):
            return config
        if isinstance(config, (list, tuple, str)):
            return ReaderGroupConfig(streams=config)
        raise InvalidConfigurationError(
            f"expected a ReaderGroupConfig or a list of streams, got {type(config).__name__}"
        )

    def create(self, name: str, config: Any, exist_ok: bool, start_ns: int | None = None) -> "ReaderGroup":
        """A new group (``start_ns``: every stream starts at its cut at that time)."""
        validate_group_name(name)
        config = self.config_of(config)
        if start_ns is not None:
            if config.start:
                raise InvalidConfigurationError("give the config's start cuts or starting_timestamp, not both")
            config = replace(config, start=tuple(cut_at(self.engine, sc, st, start_ns) for sc, st in config.streams))
        with self.lock:
            self.engine.check_open()
            if name in self.damaged:
                raise self.damaged[name]
            if name in self.groups:
                if exist_ok:
                    return ReaderGroup(self, self.groups[name])
                raise ReaderGroupExistsError(f"reader group {name!r} already exists")
            start, ends = self.initial(config)
            raw = dumps(new_state(name, config.to_json(), start, ends,
                                  segments_of=self.engine.segments_of))
            if not self.engine.meta.put_group(name, raw, None):
                raise ReaderGroupExistsError(f"reader group {name!r} already exists")
            gs = self.groups[name] = GroupState(self.engine.meta, name, raw)
        return ReaderGroup(self, gs)

    def get(self, name: str) -> "ReaderGroup":
        validate_group_name(name)
        self.engine.check_open()
        gs = self.groups.get(name)
        if gs is None:
            if name in self.damaged:
                raise self.damaged[name]
            raise ReaderGroupNotFoundError(f"reader group {name!r} does not exist")
        return ReaderGroup(self, gs)

    def delete(self, name: str) -> None:
        validate_group_name(name)
        with self.lock:
            self.engine.check_open()
            if self.damaged.pop(name, None) is not None:
                self.engine.meta.delete_group(name)  # the way out of a damaged state
                return
            gs = self.groups.get(name)
            if gs is None:
                raise ReaderGroupNotFoundError(f"reader group {name!r} does not exist")
            self.engine.meta.delete_group(name)
            del self.groups[name]
            gs.mark_deleted()

    def subscriber_cuts(self, stream_key: str) -> list[dict[int, int] | None]:
        """For retention: the cut (a frontier) of every subscribed group reading the stream,
        None for a subscriber without one yet."""
        out: list[dict[int, int] | None] = []
        for gs in list(self.groups.values()):
            s = gs.state
            if gs.deleted or s["config"].get("retention", "none") == "none" \
                    or stream_key not in s["config"]["streams"]:
                continue
            cut = {sid: off for k, off in (_retention_cut(s) or {}).items()
                   for skey, sid in [split_seg_key(k)] if skey == stream_key}
            out.append(cut or None)
        return out  # a damaged group's state cannot be read: it holds nothing back

    def names(self) -> list[str]:
        self.engine.check_open()
        return sorted([*self.groups, *self.damaged])


class ReaderGroup:
    """A handle on one reader group. Get it from ``engine.create_reader_group`` or
    ``engine.get_reader_group``; ``close()`` closes the handle (not its readers)."""

    def __init__(self, service: ReaderGroupService, gs: GroupState) -> None:
        self._svc = service
        self._engine = service.engine
        self._gs = gs
        self.name = gs.name
        self._closed = False

    # ------------------------------------------------------------------ helpers
    def _check(self) -> dict[str, Any]:
        if self._closed:
            raise ReaderGroupClosedError(f"reader group handle {self.name!r} is closed")
        self._engine.check_open()
        if self._gs.deleted:
            raise ReaderGroupNotFoundError(f"reader group {self.name!r} was deleted")
        return self._gs.state

    @property
    def config(self) -> ReaderGroupConfig:
        return ReaderGroupConfig.from_json(self._check()["config"])

    @property
    def closed(self) -> bool:
        return self._closed

    # ------------------------------------------------------------------ readers
    def create_reader(self, reader_id: str, *, serializer: "Serializer | str | None" = None) -> GroupReader:
        """A reader in this group. A reader id the group still lists (its reader crashed or
        the store was closed abruptly) resumes that reader's segments at their last
        checkpointed offsets."""
        validate_reader_id(reader_id)
        gs = self._gs
        with self._svc.lock:
            self._check()
            if reader_id in gs.readers:
                raise ReaderExistsError(f"reader {reader_id!r} is already open in group {self.name!r}")
            r = GroupReader(self._engine, gs, reader_id, serializer)
            r._join()
            gs.readers[reader_id] = r
            self._engine.admit_reader(r)  # closes it again if the store's close has begun
        keep(self, r)  # the group (and the store it came from) stays alive with its reader
        return r

    def reader_offline(self, reader_id: str, position: Position | None = None) -> None:
        """Take a reader out of the group. Its segments go back to the group at ``position``
        (e.g. the ``.position`` of the last event it processed) or, if None, at its last
        checkpoint, so the events after that are read again by the group."""
        validate_reader_id(reader_id)
        if position is not None and not isinstance(position, Position):
            raise InvalidPositionError(f"position must be a Position or None, got {type(position).__name__}")
        final = None if position is None else position.as_dict()
        if final is not None:
            for k, off in final.items():
                if isinstance(off, bool) or not isinstance(off, int) or off < 0:
                    raise InvalidPositionError(f"bad offset {off!r} for {k} in {position}")
        self._check()

        def fn(s: dict[str, Any]) -> bool:
            me = s["readers"].get(reader_id)
            if me is None:
                raise ReaderNotFoundError(f"reader {reader_id!r} is not in group {self.name!r}")
            if final is not None:
                missing = set(me["segments"]) - set(final)
                if missing:
                    raise InvalidPositionError(
                        f"the position does not cover segments {sorted(map(_seg_name, missing))} "
                        f"that reader {reader_id!r} holds"
                    )
                for k in me["segments"]:
                    skey, sid = split_seg_key(k)
                    st = self._engine.streams.get(skey)
                    if st is not None and sid in st.segments and final[k] > st.segments[sid].length:
                        raise InvalidPositionError(f"offset {final[k]} is beyond the end of {_seg_name(k)}")
            remove_reader(s, reader_id, final)
            return True

        self._gs.update(fn)
        self._gs.readers.pop(reader_id, None)

    def online_readers(self) -> list[str]:
        """The ids of the readers in the group (including ones whose process has gone away and
        that were not yet put offline)."""
        return sorted(self._check()["readers"])

    # ------------------------------------------------------------------ checkpoints
    def initiate_checkpoint(self, name: str) -> CheckpointFuture:
        """Ask every reader to return a checkpoint marker and record its position. Returns a
        future: ``.result(timeout)`` is the Checkpoint once all readers have answered."""
        validate_checkpoint_name(name)
        self._check()
        cid = 0

        def fn(s: dict[str, Any]) -> bool:
            nonlocal cid
            if any(c["name"] == name for c in s["checkpoints"]):
                raise CheckpointExistsError(f"checkpoint {name!r} is already outstanding in group {self.name!r}")
            limit = s["config"]["max_outstanding_checkpoints"]
            if sum(not c["silent"] for c in s["checkpoints"]) >= limit:
                raise MaxCheckpointsExceededError(
                    f"group {self.name!r} already has {limit} checkpoints outstanding "
                    f"(max_outstanding_checkpoints); wait for one to complete"
                )
            cid = begin_checkpoint(s, name, False)
            return True

        self._gs.update(fn)
        return self._gs.watch(CheckpointFuture(name, cid))

    def cancel_outstanding_checkpoints(self) -> int:
        """Withdraw every outstanding checkpoint (user, automatic and stream-cut ones); their
        futures raise CheckpointFailedError and readers stop being asked. Returns how many."""
        self._check()
        n = 0

        def fn(s: dict[str, Any]) -> bool:
            nonlocal n
            n = len(s["checkpoints"])
            s["checkpoints"] = []
            return n > 0

        self._gs.update(fn)
        return n

    def outstanding_checkpoints(self) -> list[str]:
        """Names of the user checkpoints not yet completed, oldest first."""
        return [c["name"] for c in self._check()["checkpoints"] if not c["silent"]]

    def last_checkpoint(self) -> Checkpoint | None:
        """The most recently completed checkpoint (automatic ones included), or None."""
        s = self._check()
        return checkpoint_from(s["done"][-1], s["config"]["streams"]) if s["done"] else None

    def update_retention_cut(self, cuts: StreamCut | Checkpoint | Mapping[tuple[str, str], StreamCut] | Iterable[StreamCut]) -> None:
        """Tell the store this group no longer needs data before ``cuts`` (a group created
        with ``retention="manual"``): consumption-based retention may truncate up to the
        slowest subscriber's cut (docs/retention.md)."""
        s = self._check()
        if s["config"].get("retention", "none") != "manual":
            raise InvalidConfigurationError(
                f"reader group {self.name!r} has retention={s['config'].get('retention', 'none')!r}; "
                "update_retention_cut needs a group created with retention='manual'"
            )
        if isinstance(cuts, Checkpoint):
            cuts = cuts.stream_cuts
        config = ReaderGroupConfig.from_json(s["config"]).with_start(cuts)
        named: dict[str, int] = {}
        for cut in config.start:
            st = self._engine.stream(cut.scope, cut.stream)
            resolve_cut(self._engine, st, cut, f"retention cut of group {self.name!r}")
            for sid, off in cut.positions or ():
                named[seg_key(st.key, sid)] = off

        def fn(s2: dict[str, Any]) -> bool:
            current = dict(s2.get("retention_cut") or {})
            for skey in {split_seg_key(k)[0] for k in named}:
                current = {k: v for k, v in current.items() if split_seg_key(k)[0] != skey}
            current.update(named)
            s2["retention_cut"] = current
            return True

        self._gs.update(fn)

    def retention_cuts(self) -> dict[tuple[str, str], StreamCut]:
        """The cuts this group holds its streams' retention at (empty if it is no subscriber or
        has no cut yet)."""
        s = self._check()
        cuts = _retention_cut(s)
        if not cuts:
            return {}
        return dict(checkpoint_from({"name": "", "cuts": cuts}, s["config"]["streams"]).stream_cuts)

    def get_stream_cuts(self) -> dict[tuple[str, str], StreamCut]:
        """One StreamCut per stream: the last completed checkpoint's, or where the group (or
        its last reset) started if none has completed."""
        s = self._check()
        entry = s["done"][-1] if s["done"] else {"name": "", "cuts": s["start"]}
        return dict(checkpoint_from(entry, s["config"]["streams"]).stream_cuts)

    def generate_stream_cuts(self, timeout: float | None = None) -> dict[tuple[str, str], StreamCut]:
        """One StreamCut per stream at the readers' current positions: a silent checkpoint
        that every reader answers on its next read (TimeoutError if not within ``timeout``)."""
        return dict(self.begin_stream_cuts().result(timeout).stream_cuts)

    def begin_stream_cuts(self) -> CheckpointFuture:
        """``generate_stream_cuts`` without the wait: the silent checkpoint's future."""
        self._check()
        cid = 0

        def fn(s: dict[str, Any]) -> bool:
            nonlocal cid
            cid = begin_checkpoint(s, f"_cuts-{s['next_cp']}", True)
            return True

        self._gs.update(fn)
        return self._gs.watch(CheckpointFuture("stream cuts", cid))

    # ------------------------------------------------------------------ reset
    def reset(self, target: ReaderGroupConfig | Checkpoint) -> None:
        """Start the group over from a new config or from a Checkpoint (its streams' cuts as
        the start). Every open reader raises ReinitializationRequiredError once; outstanding
        checkpoints fail with CheckpointFailedError."""
        s = self._check()
        if isinstance(target, Checkpoint):
            config = ReaderGroupConfig.from_json(s["config"]).with_start(target)
        elif isinstance(target, ReaderGroupConfig):
            config = target
        else:
            raise InvalidConfigurationError(
                f"reset takes a ReaderGroupConfig or a Checkpoint, got {type(target).__name__}"
            )
        start, ends = self._svc.initial(config)

        def fn(s2: dict[str, Any]) -> bool:
            fresh = new_state(self.name, config.to_json(), start, ends,
                              generation=s2["generation"] + 1, previous=s2,
                              segments_of=self._engine.segments_of)
            s2.clear()
            s2.update(fresh)
            return True

        self._gs.update(fn)
        self._gs.readers.clear()

    # ------------------------------------------------------------------ figures
    def _positions(self, s: dict[str, Any]) -> dict[str, int]:
        """Where the group stands in each unfinished segment: live reader positions where a
        reader of this process reports one, else the state's offsets."""
        pos = dict(s["unassigned"])
        live = {rid: dict(r.live) for rid, r in list(self._gs.readers.items())}
        for rid, r in s["readers"].items():
            lv = live.get(rid, {})
            for k, off in r["segments"].items():
                pos[k] = lv.get(k, off)
        return pos

    def unread_bytes(self, scope: str | None = None, stream: str | None = None) -> int:
        """Framed bytes of durable events the group has not read yet (up to the end cuts), over
        all its streams or one. Positions are the readers' fetch positions (events fetched but
        not yet returned count as read), or for segments no reader holds, the group's offsets."""
        s = self._check()
        return sum(b for b, _ in self._lag_by_segment(s, self._only(s, scope, stream, "unread_bytes"),
                                                      events=False).values())

    def unread_events(self, scope: str | None = None, stream: str | None = None) -> int:
        """As ``unread_bytes``, in events: the group's lag as Kafka's consumer lag counts it."""
        s = self._check()
        return sum(n for _, n in self._lag_by_segment(s, self._only(s, scope, stream, "unread_events")).values())

    def _only(self, s: dict[str, Any], scope: str | None, stream: str | None, what: str) -> str | None:
        """The one stream (``scope/stream``) a lag is asked for, or None for all of them."""
        if scope is None and stream is None:
            return None
        if scope is None or stream is None:
            raise InvalidConfigurationError(f"{what} takes both scope and stream, or neither")
        only = f"{validate_scope(scope)}/{validate_stream(stream)}"
        if only not in s["config"]["streams"]:
            raise StreamNotFoundError(f"reader group {self.name!r} does not read {only}")
        return only

    def segment_distribution(self) -> SegmentDistribution:
        """Which reader holds which segments, and which segments no reader holds."""
        s = self._check()
        return SegmentDistribution(
            readers={rid: tuple(sorted(map(_seg_name, r["segments"]))) for rid, r in sorted(s["readers"].items())},
            unassigned=tuple(sorted(map(_seg_name, s["unassigned"]))),
        )

    # ------------------------------------------------------------------ closing
    def close(self) -> None:
        """Close this handle (idempotent). Readers created from it stay open."""
        self._closed = True

    def __enter__(self) -> "ReaderGroup":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def __repr__(self) -> str:
        return f"<ReaderGroup {self.name!r}{' closed' if self._closed else ''}>"

    def _lag_by_segment(self, s: dict[str, Any], only: str | None = None, *,
                        events: bool = True) -> dict[str, tuple[int, int]]:
        """(unread bytes, unread events or 0 without ``events``) per segment key of every
        stream or ``only`` one: successors not reached yet count from offset 0."""
        synced = self._engine.journal.acked()
        per: dict[str, dict[int, int]] = {}
        for k, off in {**s["completed"], **self._positions(s)}.items():
            skey, sid = split_seg_key(k)
            if only is None or skey == only:
                per.setdefault(skey, {})[sid] = off
        out: dict[str, tuple[int, int]] = {}
        for skey, named in per.items():
            segs = self._engine.segments_of(skey)
            if segs is None or not all(sid in segs for sid in named):
                continue
            for sid, off in expand(segs, named).items():
                limit = SegmentSource(self._engine, segs[sid]).visible_length(synced)
                end = end_of(s, seg_key(skey, sid))
                limit = limit if end is None else min(limit, end)
                n = eventcount.count(self._engine, segs[sid], off, limit) if events else 0
                out[seg_key(skey, sid)] = (max(0, limit - off), n)
        return out

    def _repr_html_(self) -> str:
        from ..notebook import reader_group_html
        s = self._check()
        held = {rid: tuple(r["segments"]) for rid, r in sorted(s["readers"].items())}
        last = self.last_checkpoint()
        return reader_group_html(self.name, tuple(s["config"]["streams"]), held, self._lag_by_segment(s),
                                 last.name if last is not None else None, self.outstanding_checkpoints())
