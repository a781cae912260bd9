"""Random damage to the LMDB file (issue: "in 40 random LMDB damages, 9 raised non-library
exceptions (UnicodeDecodeError, lmdb.BadTxnError) and one served 12,800 of 20,000
acknowledged events with no error").

A seeded loop of PE_DAMAGE_TRIALS trials (default 100; PE_DAMAGE_SEED picks another seed):
each damages a fresh copy of a reference store's meta/data.mdb (the cleanly closed store on even
trials, the crash snapshot on odd ones) in one of these ways:

* ``flip``: 1..8 random bits anywhere in the file;
* ``overwrite``: a run of 1..64 random bytes anywhere in the file;
* ``page-header``: random bytes over the 16-byte header of a random page (page number, flags,
  free-space bounds: what LMDB trusts most);
* ``meta``: a bit flip in one of the two meta pages' first 136 bytes (root pages, txn ids);
* ``zero-page``: a whole random page zeroed (a lost write);

and opens it in its own child interpreter. Allowed: a refused open (a PravegaEmbeddedError
naming meta/ or data.mdb, nothing on disk changed), an open that gives exactly the recorded
content, or a library CorruptDataError naming meta/ while the data is read. Everything else (a
crash, another exception, different content: fewer events, a lower writer sequence, a lost
transaction or checkpoint) fails, with the trial's seed. A summary of the outcomes is printed
(``pytest -s`` shows it).
"""

from __future__ import annotations

import collections
import random
import struct
from pathlib import Path

import pytest

import damage_helpers as h

TRIALS = h.env_int("PE_DAMAGE_TRIALS", 100)
SEED = h.env_int("PE_DAMAGE_SEED", 1)
KINDS = ("flip", "overwrite", "page-header", "meta", "zero-page")
PAGE = 4096


def damage(path: Path, rng: random.Random, kind: str) -> str:
    """Damage data.mdb at ``path``; returns a description."""
    data = bytearray(path.read_bytes())
    n = len(data)
    if kind == "flip":
        spots = []
        for _ in range(rng.randint(1, 8)):
            off, bit = rng.randrange(n), rng.randrange(8)
            data[off] ^= 1 << bit
            spots.append(f"{off}.{bit}")
        what = "bits " + ",".join(spots)
    elif kind == "overwrite":
        k = rng.randint(1, 64)
        off = rng.randrange(n - k)
        data[off:off + k] = rng.randbytes(k)
        what = f"{k} random bytes at {off}"
    elif kind == "page-header":
        page = rng.randrange(n // PAGE)
        data[page * PAGE:page * PAGE + 16] = rng.randbytes(16)
        what = f"header of page {page}"
    elif kind == "meta":
        page, off, bit = rng.randrange(2), rng.randrange(16, 136), rng.randrange(8)
        data[page * PAGE + off] ^= 1 << bit
        what = f"meta page {page} byte {off} bit {bit}"
    else:
        page = rng.randrange(n // PAGE)
        data[page * PAGE:(page + 1) * PAGE] = bytes(PAGE)
        what = f"page {page} zeroed"
    path.write_bytes(bytes(data))
    return what


@pytest.mark.slow
def test_random_lmdb_damage(single, tmp_path):
    crash, clean = single
    tally: collections.Counter[str] = collections.Counter()
    failures = []
    for i in range(TRIALS):
        rng = random.Random(SEED * 1_000_003 + i)
        ref = clean if i % 2 == 0 else crash
        kind = KINDS[rng.randrange(len(KINDS))]
        s = h.fresh_copy(ref, tmp_path / "trial")
        what = damage(s / "meta" / "data.mdb", rng, kind)
        damaged = (s / "meta" / "data.mdb").read_bytes()
        expect = h.Expect(ref.full, True, ("data.mdb", str(s / "meta")), ("CorruptDataError",))
        out = h.check_case(s, ref, expect)
        label = out.kind if out.ok else f"FAIL {out.kind}"
        tally[label] += 1
        if not out.ok:
            kept = tmp_path / f"failed-trial-{i}-{ref.name}-data.mdb"
            kept.write_bytes(damaged)  # the damaged file, for a closer look
            failures.append(f"trial {i} (PE_DAMAGE_SEED={SEED}, {ref.name}, {kind}: {what}; "
                            f"kept as {kept}): {out}")
    print(f"\nrandom LMDB damage, {TRIALS} trials, seed {SEED}:")
    for label, n in tally.most_common():
        print(f"  {n:4d}  {label}")
    for f in failures:
        print("  " + f[:1500])
    assert not failures, f"{len(failures)} of {TRIALS} trials failed:\n" + "\n".join(
        f[:1500] for f in failures)


def test_damage_reaches_used_pages(single):
    """Damage at random offsets mostly lands in pages LMDB has allocated (up to the meta page's
    last page number), not in slack at the end of the file."""
    _, clean = single
    data = (clean.path / "meta" / "data.mdb").read_bytes()
    # MDB_meta after the 16-byte page header: magic, version, address, mapsize, 2 x MDB_db
    # (48 bytes), last page, txn id (the same layout metadata.py reads)
    meta = struct.Struct("<16xII8x8x48x48xQQ")
    metas = [meta.unpack_from(data, p * PAGE) for p in (0, 1)]
    assert all(m[0] == 0xBEEFC0DE for m in metas)
    last_pg = max(metas, key=lambda m: m[3])[2]
    assert (last_pg + 1) * PAGE >= 0.9 * len(data), (last_pg, len(data))
