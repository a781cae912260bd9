"""Copying segment data to tier 2, one Parquet file at a time, with its state in LMDB.

Owns: the copy of a committed range of a segment to tier 2 and the publication of the stream's
manifest after it, the tiering state in LMDB (metadata's ``tiering`` table: each segment's
tiered end and copy in progress, each tiered file, each stream's manifest versions), and the
clean-up at open of what a crash left (docs/tiering.md, "How data moves").

Invariants:
  1. A copy goes through four steps, in order: (1) LMDB records it as started, (2) the file is
     published complete to tier 2 and checked from its footer, (3) one LMDB transaction records
     the file, moves the segment's tiered end and takes the stream's next manifest version,
     (4) that manifest is published and LMDB records it published.
  2. ``recover`` (at open, before any copy) deletes the file of every copy left started and
     forgets the copy, and publishes every manifest version taken but not published: after it
     no file of tier 2 is outside LMDB and the manifests, and no event is in two files.
  3. A copy starts at the later of the segment's tiered end and its head (data past retention
     is never uploaded) and ends at the end the caller gives, an event boundary, but never past
     the segment's visible length once the journal is made durable (``make_durable``): only
     durable, committed data is copied, in every durability mode. The files of a segment never
     overlap, and a data file is never written over another (exclusive puts).
  4. A failed copy leaves nothing behind: its file is deleted (or, if that fails too, left to
     ``recover`` as a started copy) and the error reaches the caller. Once the transaction
     recording the file has been attempted the file is never deleted by the copy: a failure
     there (a failed sync after the commit) leaves the started copy to the next copy or open.
  5. ``claim_root`` runs before ``recover``: a root owned by another store (layout invariant
     5) is refused before anything is written or deleted there.

Thread-safety: one copy at a time per store (``lock``); ``recover`` runs before any copy.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import TYPE_CHECKING

from ..errors import AlreadyExistsError, CorruptDataError, InvalidConfigurationError, StreamNotFoundError
from .layout import (LAYOUT_VERSION, OWNER_NAME, file_name, manifest_dir, parse_manifest_name,
                     segment_dir)
from .manifest import Manifest, SegmentNode, TieredFile, latest_manifest, publish_manifest
from .parquetfile import verify_segment_file, write_segment_file
from .rows import segment_rows
from .target import Tier2Target

if TYPE_CHECKING:
    from ..engine import Engine
    from ..segment import Segment
    from ..stream import StreamState

__all__ = ["Copier"]

LOG = logging.getLogger("pravega_embedded.tiering")
MAX_OWNER_BYTES = 64 << 10  # the owner file is a few hundred bytes; anything larger is not ours


class Copier:
    """Copies ranges of segments to ``target`` (module docstring)."""

    def __init__(self, engine: "Engine", target: Tier2Target) -> None:
        self._engine = engine
        self.target = target
        self.lock = threading.Lock()

    # ------------------------------------------------------------------ state
    def tiered_end(self, seg: "Segment") -> int:
        """Where ``seg``'s tiered data ends (0: nothing tiered)."""
        return self._engine.meta.tiering_segment(seg.uid)[0]

    def files(self, seg: "Segment") -> list[TieredFile]:
        """``seg``'s tiered files in offset order."""
        return [TieredFile(seg.segment_id, *row) for row in self._engine.meta.tiered_files(seg.uid)]

    def manifest(self, st: "StreamState", version: int) -> Manifest:
        """Manifest ``version`` of ``st`` as LMDB and the stream are now."""
        segs = sorted(st.segments.values(), key=lambda s: s.segment_id)
        nodes = tuple(SegmentNode(s.segment_id, s.low, s.high, bool(s.sealed), tuple(s.preds),
                                  tuple(s.succs)) for s in segs)
        ids = {s.segment_id for s in segs}
        files = tuple(f for s in segs for f in self.files(s))
        head = tuple(sorted((sid, off) for sid, off in st.head.items() if sid in ids))
        return Manifest(st.scope, st.name, version, nodes, files, head, time.time_ns() // 1000,
                        st.kind)

    # ------------------------------------------------------------------ copying
    def copy(self, st: "StreamState", seg: "Segment", end: int) -> TieredFile | None:
        """Copy ``seg``'s committed data from where its tiered data ends (or its head) to
        ``end`` (at most its durable visible length) as one file and publish the stream's
        manifest (invariants 1, 3); None if there is nothing to copy or the stream was
        deleted meanwhile."""
        e = self._engine
        meta = e.meta
        with self.lock:
            # only durable data goes to tier 2, whatever the durability mode (invariant 3)
            e.journal.make_durable(e.journal.written(), f"tier-2 copy of {st.key}")
            end = min(end, e.index.visible_length(seg, e.journal.acked()))
            tiered, left = meta.tiering_segment(seg.uid)
            if left is not None:  # a copy that failed and could not be undone then
                self.delete_copy(st, seg.segment_id, left)
                meta.tiering_abort(seg.uid, tiered)
            start = max(tiered, st.head.get(seg.segment_id, 0))
            if end <= start or st.deleted or not meta.tiering_begin(seg.uid, st.key, tiered, (start, end)):
                return None  # (1: the copy is recorded as started)
            finishing = False
            try:
                rows = segment_rows(e, seg, start, end, fallback_ns=seg.created_ns)
                f = write_segment_file(self.target, st.scope, st.name, seg.segment_id, rows)  # 2
                if (f.first, f.end) != (start, end):
                    raise CorruptDataError(f"tier-2 copy of segment {seg.name}: the file holds "
                                           f"[{f.first}, {f.end}), not [{start}, {end})")
                verify_segment_file(self.target, st.scope, st.name, f)
                finishing = True  # from here LMDB may record the file: it is never deleted
                version = meta.tiering_finish(seg.uid, st.key, (f.first, f.end, f.events,  # 3
                                                                f.size, f.min_write_us,
                                                                f.max_write_us))
                if not version:
                    raise StreamNotFoundError(f"stream {st.key} was deleted during a tier-2 copy")
                e.tiered[seg.uid] = f.end  # reads before it may go to tier 2 from now on
            except BaseException as exc:
                if isinstance(exc, StreamNotFoundError):
                    self.forget(seg, tiered, (start, end), st)
                    return None
                if not finishing:
                    self.forget(seg, tiered, (start, end), st)
                # else: whether LMDB recorded the file is unknown (a failed sync after its
                # commit); the started copy left otherwise is cleaned by the next copy or open
                raise
            self.publish(st, version)  # 4
            LOG.debug("tiered %s/%s segment %d [%d, %d): %d events, %d bytes", st.scope, st.name,
                      seg.segment_id, f.first, f.end, f.events, f.size)
            return f

    def forget(self, seg: "Segment", tiered: int, copy: tuple[int, int], st: "StreamState") -> None:
        """Undo a failed copy (invariant 4): delete its file, then forget it in LMDB."""
        try:
            self.delete_copy(st, seg.segment_id, copy)
            self._engine.meta.tiering_abort(seg.uid, tiered)
        except Exception:  # noqa: BLE001 - the copy's own error is the one to raise
            LOG.warning("the failed tier-2 copy of %s/%s segment %d [%d, %d) could not be undone; "
                        "the next open cleans it up", st.scope, st.name, seg.segment_id, *copy,
                        exc_info=True)

    def delete_copy(self, st: "StreamState", segment_id: int, copy: tuple[int, int]) -> None:
        """Delete a copy's file and any staged piece of it left by a crash."""
        name = file_name(*copy)
        rel_dir = segment_dir(st.scope, st.name, segment_id)
        for entry in self.target.list(rel_dir):
            if entry == name or (entry.startswith("_stage.") and entry.endswith(f".{name}.partial")):
                self.target.delete(f"{rel_dir}/{entry}")

    def publish_pending(self, st: "StreamState") -> None:
        """Publish ``st``'s latest manifest if LMDB took its version but it is not in tier 2
        yet (an earlier publication failed)."""
        with self.lock:
            version, published = self._engine.meta.manifest_versions(st.key)
            if version > published and not st.deleted:
                self.publish(st, version)

    def publish(self, st: "StreamState", version: int, *, after_crash: bool = False) -> None:
        """Publish manifest ``version`` of ``st`` and record it published. After a crash the
        version may be in tier 2 already (published, not recorded): then it is only recorded,
        if it lists the files LMDB does; any other manifest of that version is not ours
        (AlreadyExistsError)."""
        m = self.manifest(st, version)
        try:
            publish_manifest(self.target, m)
        except AlreadyExistsError:
            there = latest_manifest(self.target, st.scope, st.name) if after_crash else None
            if there is None or there.version != version or there.files != m.files:
                raise
            LOG.info("tier-2 manifest %d of %s was published before a crash", version, st.key)
        self._engine.meta.manifest_published(st.key, version)

    # ------------------------------------------------------------------ the root's owner
    def claim_root(self) -> None:
        """Make sure this store owns the tier-2 root (layout invariant 5): write the owner file
        if there is none and read it back, else check it names this store (of two stores
        claiming at once one wins; on an object store, where the claim is a look then a PUT,
        two claims in the same instant can both pass: start stores on a fresh root one at a
        time). Another store's root is InvalidConfigurationError: two stores tiering
        to one root would overwrite and delete each other's streams."""
        e = self._engine
        store_id = e.meta.store_id() or ""
        mine = json.dumps({"format": LAYOUT_VERSION, "store_id": store_id, "store_path": e.path},
                          sort_keys=True).encode()
        for _ in range(3):
            data = self.target.read(OWNER_NAME, MAX_OWNER_BYTES)
            if data is None:
                try:
                    # exclusive: atomic on a local folder; on an object store a look then a PUT,
                    # so it is read back below (a claim that lost a race sees the other one)
                    self.target.put(OWNER_NAME, mine, exclusive=True)
                except AlreadyExistsError:
                    pass  # another store claimed it meanwhile: read whose it is
                continue
            try:
                owner = json.loads(data)
                theirs, where = str(owner["store_id"]), str(owner.get("store_path", "?"))
            except (ValueError, KeyError, TypeError) as exc:
                raise CorruptDataError(f"tier-2 owner file {self.target.where(OWNER_NAME)} is "
                                       f"damaged ({exc}): restore it or delete it") from exc
            if theirs != store_id:
                raise InvalidConfigurationError(
                    f"tier-2 root {self.target.url} belongs to another store (id {theirs}, at "
                    f"{where}; this is {store_id} at {e.path}): two stores must not share a "
                    "tier-2 root, as each would overwrite and delete the other's streams; give "
                    f"this store its own tier2=..., or delete {OWNER_NAME} there if that store "
                    "and its tier-2 data are gone")
            return
        raise CorruptDataError(f"tier-2 owner file {self.target.where(OWNER_NAME)} could neither "
                               "be written nor read")

    # ------------------------------------------------------------------ after a crash
    def recover(self) -> None:
        """Clean up what a crash left (invariant 2)."""
        e = self._engine
        meta = e.meta
        with self.lock:
            for uid, (end, copy) in sorted(meta.tiering_segments().items()):
                seg = e.segment(uid)
                if copy is None:
                    continue
                if seg is None:  # its stream was deleted: its tier-2 data goes with the stream
                    meta.tiering_abort(uid, end)
                    continue
                LOG.info("removing the unfinished tier-2 copy of %s segment %d [%d, %d)",
                         seg.stream.key, seg.segment_id, *copy)
                self.delete_copy(seg.stream, seg.segment_id, copy)
                meta.tiering_abort(uid, end)
            for st in list(e.streams.values()):
                version, published = meta.manifest_versions(st.key)
                if version > published:
                    rel_dir = manifest_dir(st.scope, st.name)
                    for entry in self.target.list(rel_dir):
                        if entry.startswith("_stage.") and parse_manifest_name(entry) is None:
                            self.target.delete(f"{rel_dir}/{entry}")
                    self.publish(st, version, after_crash=True)
