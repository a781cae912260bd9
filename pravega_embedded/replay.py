"""Replay: applying the journal records written after the last checkpoint, at open.

Owns: turning EVENTS, BYTES and MERGE records (parsed by ``journal``/``records``) back into
segment lengths, pending index entries and writer sequences, and noting which transactions a
MERGE committed (``transactions`` finishes them).

Invariants:
  1. Records are applied in journal order; a section must start at its segment's length, else
     the journal and the metadata disagree and CorruptDataError is raised (nothing is guessed).
  2. Records of segments that no longer exist (a deleted stream, an aborted or committed
     transaction's staging segment, a large event's staged chunks) are skipped.
  3. A MERGE's parts are applied whole; the sections it references were written before it.

Thread-safety: called once, by the store's open, before any other thread exists.
"""

from __future__ import annotations

import uuid
from typing import Any

from .errors import CorruptDataError
from .journal import EventsRecord
from .records import NO_SEQUENCE, BytesRecord, MergeRecord
from .staging import apply_parts

__all__ = ["replay"]


def _at_length(seg: Any, offset: int, nbytes: int, pos: int) -> None:
    if offset != seg.length:
        raise CorruptDataError(
            f"journal record at {pos} puts {nbytes} bytes at offset {offset} of segment "
            f"{seg.name}, whose length is {seg.length}"
        )


def _seq(store: Any, stream_key: str, writer_id: str, seq: int) -> None:
    wk = (stream_key, writer_id)
    if seq > store._writer_seqs.get(wk, -1):
        store._writer_seqs[wk] = seq
        store._dirty_writers[wk] = seq


def replay(store: Any, records: list[Any]) -> list[uuid.UUID]:
    """Apply journal records after the last checkpoint (metadata invariant 1); returns the ids
    of the transactions whose MERGE was found."""
    segs = store._seg_by_uid
    committed = []
    for rec in records:
        if type(rec) is EventsRecord:
            stream_key = None
            for sec in rec.sections:
                seg = segs.get(sec.segment_uid)
                if seg is None:
                    continue  # invariant 2
                _at_length(seg, sec.segment_offset, sec.n_bytes, rec.pos)
                entry = seg.add_section(sec.segment_offset, sec.n_bytes, sec.data_pos, None,
                                        None, sec.n_events)
                store._idx_pending.append((seg, entry, sec.n_events))
                seg.length += sec.n_bytes
                store._dirty_lengths.add(seg.uid)
                stream_key = seg.stream.key
            if stream_key is not None and rec.writer_id:  # "" writes a transaction's staging
                _seq(store, stream_key, rec.writer_id, rec.last_seq)
        elif type(rec) is BytesRecord:
            seg = segs.get(rec.segment_uid)
            if seg is None:
                continue
            _at_length(seg, rec.segment_offset, rec.n_bytes, rec.pos)
            entry = seg.add_section(rec.segment_offset, rec.n_bytes, rec.data_pos, None, None,
                                    rec.n_events)
            store._idx_pending.append((seg, entry, rec.n_events))
            seg.length += rec.n_bytes
            store._dirty_lengths.add(seg.uid)
        elif type(rec) is MergeRecord:
            parts = []
            for part in rec.parts:
                seg = segs.get(part.segment_uid)
                if seg is None:
                    continue
                _at_length(seg, part.segment_offset, part.n_bytes, rec.pos)
                parts.append((seg, list(part.refs)))
            apply_parts(store, parts, None)
            if rec.txn_id is not None:
                committed.append(rec.txn_id)
            if parts and rec.writer_id and rec.last_seq != NO_SEQUENCE:
                _seq(store, parts[0][0].stream.key, rec.writer_id, rec.last_seq)
    return committed
