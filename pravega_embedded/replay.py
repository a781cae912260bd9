"""Replay: applying the journal records written after the last checkpoint, at open.

Owns: turning EVENTS, BYTES and MERGE records (parsed by ``journal``/``records``) back into
segment sections, lengths and writer sequences, and noting which transactions a MERGE committed
(``transactions`` finishes them).

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
from typing import Iterable

from .errors import CorruptDataError
from .journal import EventsRecord, Record
from .records import NO_SEQUENCE, BytesRecord, MergeRecord
from .segindex import SegmentIndex
from .segment import Segment
from .sequences import WriterSequences

__all__ = ["replay"]


def _at_length(seg: Segment, offset: int, nbytes: int, pos: int) -> None:
    if offset != seg.length:
        raise CorruptDataError(
            f"journal record at {pos} puts {nbytes} bytes at offset {offset} of segment "
            f"{seg.name}, whose length is {seg.length}: the journal and the metadata disagree"
        )


def replay(index: SegmentIndex, seqs: WriterSequences, segs: dict[int, Segment],
           records: Iterable[Record]) -> list[uuid.UUID]:
    """Apply journal records after the last checkpoint (metadata invariant 1); returns the ids
    of the transactions whose MERGE was found."""
    committed = []
    for rec in records:
        if type(rec) is EventsRecord:
            stream_key = None
            for sec in rec.sections:
                seg = segs.get(sec.segment_uid)
                if seg is None:
                    continue  # invariant 2
                _at_length(seg, sec.segment_offset, sec.n_bytes, rec.pos)
                index.append([(seg, sec.n_bytes, sec.data_pos, None, sec.n_events)], 0,
                             rec.timestamp_ns)
                stream_key = seg.stream.key
            if stream_key is not None and rec.writer_id:  # "" writes a transaction's staging
                seqs.note(stream_key, rec.writer_id, rec.last_seq)
        elif type(rec) is BytesRecord:
            seg = segs.get(rec.segment_uid)
            if seg is None:
                continue
            _at_length(seg, rec.segment_offset, rec.n_bytes, rec.pos)
            index.append([(seg, rec.n_bytes, rec.data_pos, None, rec.n_events)], 0,
                         rec.timestamp_ns)
        elif type(rec) is MergeRecord:
            parts = []
            for part in rec.parts:
                seg = segs.get(part.segment_uid)
                if seg is None:
                    continue
                _at_length(seg, part.segment_offset, part.n_bytes, rec.pos)
                parts.append((seg, list(part.refs)))
            index.merge(parts, None, rec.timestamp_ns)
            if rec.txn_id is not None:
                committed.append(rec.txn_id)
            if parts and rec.writer_id and rec.last_seq != NO_SEQUENCE:
                seqs.note(parts[0][0].stream.key, rec.writer_id, rec.last_seq)
    return committed
