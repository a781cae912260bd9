"""SIGKILL at random points of tiering: a writer process tiers small files often (flushes tier
2 now and then, and truncates the stream at a cut taken a few batches before, so tier-2 files
are left out and rewritten) and is killed again and again. After all of it, every acknowledged event
is read exactly once through the store and exactly once by a plain Parquet reader, tier 2 holds
no orphan and no staged leftover, the manifests agree with LMDB, and reclaiming kept the
journal small."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import textwrap
import time
from collections import Counter
from pathlib import Path

import duckdb

import pravega_embedded as pe
from pravega_embedded.tiering.copier import Copier
from pravega_embedded.tiering.layout import OWNER_NAME, segment_dir
from pravega_embedded.tiering.manifest import latest_manifest
from pravega_embedded.tiering.target import Tier2Target

REPO = Path(__file__).resolve().parents[2]
KILLS = int(os.environ.get("PE_TIER_KILLS", "20"))
OPTS = dict(roll_bytes=1 << 20, tier2_file_bytes=64 << 10, tier2_file_age=0.05, tail_cache_bytes=0,
            tier2_delete_grace=0)

CHILD = textwrap.dedent("""
    import os, sys
    import pravega_embedded as pe
    path, acks, run = sys.argv[1], sys.argv[2], int(sys.argv[3])
    opts = dict(roll_bytes=1 << 20, tier2_file_bytes=64 << 10, tier2_file_age=0.05,
                tail_cache_bytes=0, tier2_delete_grace=0)
    s = pe.open(path, **opts)
    s.create_scope("iot", exist_ok=True)
    s.create_stream("iot", "s", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)),
                    exist_ok=True)
    w = s.create_writer("iot", "s")
    pad = b"p" * 400
    with open(acks, "a") as log:
        # a cut taken a few batches before it is applied: truncating there cuts inside files
        cut = s.stream_info("iot", "s").tail  # every event acknowledged so far is before it
        log.write("C\\n")
        batch = 0
        while True:
            for i in range(100):
                w.write_event(b"r%04db%05di%03d-" % (run, batch, i) + pad, routing_key="k%d" % (i % 4))
            w.flush()
            log.write("%d %d\\n" % (run, batch))
            log.flush()
            os.fsync(log.fileno())
            batch += 1
            if batch % 7 == 0:
                s.flush_tier2()
            if batch % 3 == 0:
                s.truncate_stream("iot", "s", cut)
                cut = s.stream_info("iot", "s").tail  # every event acknowledged so far is before it
                log.write("C\\n")
                log.flush()
                os.fsync(log.fileno())
""")


def _acked(acks: Path) -> tuple[set[bytes], set[bytes]]:
    """(events acknowledged after the last cut taken: never truncated, so read exactly once;
    events acknowledged before it: truncated or not, read at most once)."""
    sure: set[bytes] = set()
    maybe: set[bytes] = set()
    for line in acks.read_text().splitlines():
        if line == "C":  # a cut was taken here; it may have been applied later
            maybe |= sure
            sure = set()
            continue
        run, batch = (int(x) for x in line.split())
        sure.update(b"r%04db%05di%03d-" % (run, batch, i) for i in range(100))
    return sure, maybe


def _lines(acks: Path) -> int:
    return sum(ln != "C" for ln in acks.read_text().splitlines()) if acks.exists() else 0


def test_sigkill_at_random_points_of_tiering_loses_and_duplicates_nothing(tmp_path):
    path, acks = tmp_path / "data", tmp_path / "acks"
    rnd = random.Random(int(os.environ.get("PE_TIER_SEED", "1313")))
    for run in range(KILLS):
        before = _lines(acks)
        child = subprocess.Popen([sys.executable, "-c", CHILD, str(path), str(acks), str(run)],
                                 cwd=REPO, stderr=subprocess.PIPE)
        deadline = time.monotonic() + 120
        while _lines(acks) <= before + rnd.randrange(0, 12):  # some progress, then a random moment
            assert child.poll() is None, child.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the child made no progress"
            time.sleep(0.01)
        time.sleep(rnd.uniform(0, 0.3))
        child.send_signal(signal.SIGKILL)
        child.wait(60)
        child.stderr.close()
    acked, maybe = _acked(acks)
    assert len(acked | maybe) >= KILLS * 100
    with pe.open(path, **OPTS) as store:
        with store.create_reader("iot", "s") as r:
            seen = Counter()
            while (ev := r.read_next_event(timeout=0)) is not None:
                seen[bytes(ev.event[:16])] += 1
        assert acked <= set(seen), f"{len(acked - set(seen))} acknowledged events lost"
        assert max(seen.values()) == 1, "an event was read twice"
        assert maybe - set(seen), "no truncation ever happened"
        store.flush_tier2()
        root = path / "tier2"
        rows = duckdb.sql(f"SELECT event FROM read_parquet('{root}/**/*.parquet', "
                          "hive_partitioning=1)").fetchall()
        plain = Counter(bytes(r[0][:16]) for r in rows)
        assert plain == seen, "plain Parquet readers do not see exactly the store's events"
        st = store._engine.streams["iot/s"]
        copier = Copier(store._engine, Tier2Target(str(root)))
        want = {root / segment_dir("iot", "s", seg.segment_id) / f.name: f
                for seg in st.segments.values() for f in copier.files(seg)}
        on_disk = {p for p in root.rglob("*") if p.is_file() and "_manifest" not in p.parts
                   and p != root / OWNER_NAME}
        assert on_disk == set(want), "orphans or leftovers in tier 2"
        m = latest_manifest(Tier2Target(str(root)), "iot", "s")
        assert m is not None and set(m.files) == set(want.values())
        assert not list(root.rglob("_stage.*")), "staged leftovers"
        journal = sum(p.stat().st_size for p in (path / "journal").glob("*.pej"))
    assert journal <= 3 << 20, f"the journal kept {journal} bytes after everything was tiered"
