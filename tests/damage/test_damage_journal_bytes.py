"""Damaged bytes inside journal records and file headers, end to end.

For each reference (one or three journal files; crash snapshot or cleanly closed), each journal
file and each sampled record (the first two, the last three, those around the applied position,
twelve seeded random ones; PE_DAMAGE_EXHAUSTIVE=1: every record), one byte of its 24-byte
header and one byte anywhere inside it are changed (separately) (XOR with a random non-zero value; every byte of a record is
covered by its CRC), and separately one byte of each file's header. What must happen
(damage_helpers.expect_damaged, from journal.py's recovery rules):

* damage recovery scans (at or after the applied position, in the file holding it or later):
  in a file that is not the newest, or before a position known durable (the applied position,
  or a durable mark of a later valid record), the open is refused (a CorruptDataError naming
  the file, nothing on disk changed); after it, in the newest file, it is a torn tail and the
  store opens with exactly the records before the damaged one;
* damage in applied data (not scanned at open): a refusal, a correct open, or a CorruptDataError
  naming the file when the damaged section is read (its CRC). Never other content: not one
  event lost, changed or duplicated without an error.

The opens run in one worker interpreter (a crash ends only its case); a failing case is re-run
in a fresh interpreter before it is reported.
"""

from __future__ import annotations

import collections
import random

import pytest

import damage_helpers as h

SEED = h.env_int("PE_DAMAGE_SEED", 1)
VARIANTS = ("single-crash", "single-clean", "rolled-crash", "rolled-clean")
TYPES = {h.T_EVENTS: "EVENTS", h.T_BYTES: "BYTES", h.T_MERGE: "MERGE", h.T_ROLL: "ROLL"}


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_damaged_journal_bytes(refs, tmp_path, variant):
    ref = refs[variant]
    rng = random.Random(SEED * 7 + 3)
    worker = h.Worker()
    tally: collections.Counter[str] = collections.Counter()
    failures = []
    try:
        for i, base in enumerate(ref.bases):
            which = f"file {i + 1} of {len(ref.bases)} ({h.file_name(base)})"
            recs = ref.records[base]
            cases: list[tuple[h.JRecord | None, int]] = [(None, base + rng.randrange(28))]
            for r in h.sample_records(recs, rng, 12, keep=[ref.applied]):
                # one byte of the record header (24 bytes) and one anywhere in the record
                cases.append((r, r.pos + rng.randrange(24)))
                cases.append((r, rng.randrange(r.pos, r.end)))
            for rec, at in cases:
                s = h.fresh_copy(ref, tmp_path / "s")
                path = s / "journal" / h.file_name(base)
                data = bytearray(path.read_bytes())
                data[at - base] ^= rng.randrange(1, 256)
                path.write_bytes(bytes(data))
                expect = h.expect_damaged(ref, rec, base)
                out = h.check_case(s, ref, expect, worker=worker)
                where = "the file header" if rec is None else \
                    f"{TYPES.get(rec.type, rec.type)} record {rec.pos}..{rec.end}"
                want = ("refuse" if expect.content is None else
                        "refuse, open whole or read error" if expect.refuse else "open as prefix")
                tally[f"{want}: {'ok' if out.ok else 'FAIL'} {out.kind}"] += 1
                if not out.ok:
                    failures.append(f"{which}: byte {at} of {where} damaged (applied "
                                    f"{ref.applied}; want {want}): {out}")
    finally:
        worker.close()
    print(f"\n{variant}: damaged bytes")
    for label, n in sorted(tally.items()):
        print(f"  {n:4d}  {label}")
    for f in failures:
        print("  " + f[:1200])
    assert not failures, f"{len(failures)} damages failed:\n" + "\n".join(f[:1200] for f in failures[:20])
