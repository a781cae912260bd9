"""Truncated journal files, end to end (issue: "missing / truncated / damaged journal files at
each position — a clear error or a correct open, never an empty store, a crash of the
interpreter, or a silent loss").

For each reference (one or three journal files; crash snapshot or cleanly closed) and each
journal file, the file is cut at record boundaries (the start of a record: the file then ends
with the record before it; for a file's first record that leaves the header alone) and in the
middle of records, and also to zero bytes and inside its header. What must happen is computed
by damage_helpers.expect_truncated from journal.py's recovery rules (see the comment above
``first_scanned`` there):

* cleanly closed store: everything is applied, so every truncation must be refused at open
  (a CorruptDataError naming the file, nothing on disk changed) — also of files older than the
  one recovery scans;
* except: a cut that removes only (part of) the ROLL record ending a file recovery does not
  scan loses no event; there a correct open is as good as a refusal;
* crash snapshot: a truncation before the applied position, of a file that is not the newest,
  or inside the newest file's header must be refused; a truncation of the newest file at or
  after the position known durable (the applied position, or a durable mark carried by a record
  that survives the cut) is a torn tail: the store must open with exactly the records wholly
  before the cut (every event of them once, per-key order, writers' last_sequence of that
  prefix), the file must end at the last whole record and the cut bytes must be saved under
  recovery/.

Records sampled per file: the first two, the last three, those around the applied position and
six seeded random ones (PE_DAMAGE_EXHAUSTIVE=1: every record; PE_DAMAGE_SEED: other random
ones). The opens run in one worker interpreter (damage_helpers.Worker: a crash ends only the
case it hit); a failing case is re-run in a fresh interpreter before it is reported.
"""

from __future__ import annotations

import collections
import os
import random

import pytest

import damage_helpers as h

SEED = h.env_int("PE_DAMAGE_SEED", 1)
VARIANTS = ("single-crash", "single-clean", "rolled-crash", "rolled-clean")


def _cuts(ref: h.Reference, base: int, rng: random.Random) -> list[tuple[int, str]]:
    recs = ref.records[base]
    out = [(base, "to 0 bytes"), (base + 16, "inside the header")]
    for r in h.sample_records(recs, rng, 6, keep=[ref.applied]):
        out.append((r.pos, f"at the start of record {r.pos}"))
        out.append((r.pos + (r.end - r.pos) // 2, f"in the middle of record {r.pos}"))
    last = recs[-1]
    out.append((last.end - 1, "1 byte short"))
    return out


def _post_check(ref: h.Reference, store, base: int, t: int, data: bytes) -> list[str]:
    """After an accepted truncation: the file ends at the last whole record, the cut bytes are
    saved under recovery/ (unless all zero)."""
    problems = []
    kept = [r.end for r in ref.records[base] if r.end <= t]
    valid_end = max(kept, default=base + h.HEADER)
    size = os.path.getsize(store / "journal" / h.file_name(base))
    if size != valid_end - base:
        problems.append(f"the file is {size} bytes after recovery, want {valid_end - base}")
    torn = data[valid_end - base:t - base]
    saved = store / "recovery" / f"torn-{valid_end:020d}.bin"
    if torn.strip(b"\0"):
        if not saved.exists():
            problems.append(f"the {len(torn)} cut bytes were not saved as {saved.name}")
        elif saved.read_bytes() != torn:
            problems.append(f"{saved.name} does not hold the cut bytes")
    return problems


@pytest.mark.slow
@pytest.mark.parametrize("variant", VARIANTS)
def test_truncated_journal_file(refs, tmp_path, variant):
    ref = refs[variant]
    rng = random.Random(SEED)
    worker = h.Worker()
    tally: collections.Counter[str] = collections.Counter()
    failures = []
    try:
        for i, base in enumerate(ref.bases):
            which = f"file {i + 1} of {len(ref.bases)} ({h.file_name(base)})"
            for t, where in _cuts(ref, base, rng):
                s = h.fresh_copy(ref, tmp_path / "s")
                path = s / "journal" / h.file_name(base)
                data = path.read_bytes()
                os.truncate(path, t - base)
                expect = h.expect_truncated(ref, base, t)
                out = h.check_case(s, ref, expect, worker=worker)
                prefix = expect.content is not None and not expect.refuse
                if out.ok and prefix:
                    problems = _post_check(ref, s, base, t, data)
                    if problems:
                        out = h.Outcome(False, "opened", "; ".join(problems), out.verdict)
                want = ("refuse" if expect.content is None else "open as prefix" if prefix
                        else "refuse or open whole")
                tally[f"{want}: {'ok' if out.ok else 'FAIL'} {out.kind}"] += 1
                if not out.ok:
                    failures.append(f"{which} cut {where} (position {t}; applied "
                                    f"{ref.applied}; want {want}): {out}")
    finally:
        worker.close()
    print(f"\n{variant}: truncations")
    for label, n in sorted(tally.items()):
        print(f"  {n:4d}  {label}")
    for f in failures:
        print("  " + f[:1200])
    assert not failures, f"{len(failures)} truncations failed:\n" + "\n".join(f[:1200] for f in failures[:20])
