"""Targeted power cuts on LazyFS: LazyFS drops its un-fsynced data and exits right before or
after a chosen operation on a chosen file (``lazyfs::crash``), or persists only some of the
un-fsynced writes to the journal file being written (``torn-seq``: later writes without earlier
ones; ``torn-op``: parts of one write) and exits. Then the child is killed, LazyFS remounted,
and the store checked (pc_check.py), as after a random cut.

Regexes (``from_rgx``) are matched against the path LazyFS sees: ``/tmp/pc-XXXXXXXX/s/...``
(see lazyfs.py). ``file=`` of torn faults is the exact path of the newest journal file, under
ROOT. The store's directory is ``s`` in the mount; its journal files ``s/journal/<base>.pej``
and its LMDB ``s/meta/data.mdb``. Torn faults run with 64 MiB journal files (PC_ROLL_BYTES) so
that the file they aim at is still the one being written when they fire, and with the writers
at 4 times their usual rate (PC_RATE_FACTOR) or unpaced; the process-crash variants run them
unpaced (PC_RATE_FACTOR=0): the journal then nearly always holds writes not yet fsynced, which
is what these faults are about. Variants whose child runs with durability "os" (PC_DURABILITY)
check what every cut must leave in any mode: the store opens, holds a prefix of what was
written, and every acknowledgement of the "fsync" runs before is still there.

Each variant runs its default number of cuts (1 for crashes, 2 or 3 for the others; times
PE_POWERCUT_CUTS) on one store; a cut whose fault did not fire within FAULT_TIMEOUT falls back to
a plain cut, and a variant fails if none of its faults fired (except ``rename``: the library
renames nothing, so that fault is given 3 s and not required to fire; and torn-seq-1,3-txn).
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from lazyfs import LazyFS, requires_lazyfs
from pc_loop import FAULT_TIMEOUT, PowerCutLoop, n_cuts

JOURNAL = r"s/journal/[0-9]+\.pej"
DATA_MDB = r"s/meta/data\.mdb"
STORE_DIR = r"/s/"
UNPACED = {"PC_RATE_FACTOR": "0"}  # writers never sleep: the journal nearly always has un-fsynced data

# id: (workload, timing, op, regex, faults must fire)
CRASHES = {
    "before-fsync-data.mdb": ("writes", "before", "fsync", DATA_MDB, True),
    "after-fsync-data.mdb": ("txn", "after", "fsync", DATA_MDB, True),
    "after-write-data.mdb": ("scaling", "after", "write", DATA_MDB, True),
    "before-fsync-journal": ("writes", "before", "fsync", JOURNAL, True),
    "after-fsync-journal": ("bytes", "after", "fsync", JOURNAL, True),
    "before-write-journal": ("large", "before", "write", JOURNAL, True),
    "after-write-journal": ("txn", "after", "write", JOURNAL, True),
    "before-create-journal": ("writes", "before", "create", JOURNAL, True),
    "after-create-journal": ("large", "after", "create", JOURNAL, True),
    "before-unlink-journal": ("truncate", "before", "unlink", JOURNAL, True),
    "after-unlink-journal": ("truncate", "after", "unlink", JOURNAL, True),
    "after-create-store-dir": ("createdelete", "after", "create", STORE_DIR, True),
    "before-rename-store-dir": ("createdelete", "before", "rename", STORE_DIR, False),
}
# id: (workload, durability of the run that crashes, fault) -- a process crash (SIGKILL, no
# power cut), a restart (durability "fsync") whose open recovers from what LazyFS still caches,
# then this fault. A crashed "os" run nearly always leaves whole records not yet fsynced; a
# crashed "fsync" run only now and then (its group commit syncs within 0.5 ms).
RESTARTS = {
    "restart-then-before-fsync-journal": ("writes", "fsync", "before", "fsync", JOURNAL),
    "restart-then-before-fsync-journal-txn": ("txn", "fsync", "before", "fsync", JOURNAL),
    "os-restart-then-before-fsync-journal": ("writes", "os", "before", "fsync", JOURNAL),
}
# id: (workload, fault kind, arguments after file=PATH, cuts, environment, must fire). The
# kernel hands LazyFS a write that crosses a page boundary as two writes (up to the boundary,
# then the rest), so most journal records are two "writes": persist=2 keeps the second half of
# a record without its first (a torn tail: recovery must cut it); 1,3 and 3,4 keep, when the
# run of writes holds more than one record, a whole record after a lost piece (a hole, then
# valid records: every write after the last fsync was un-acknowledged, so this is a state a
# power cut may leave). torn-seq fires only if the first run of writes between two fsyncs of
# the file after the command is long enough (3 or 4 writes here): with durability "fsync" group
# commit keeps runs short (1,3 in the txn workload fired in 1 to 3 cuts of 3, depending on the
# library version, so it is not required to fire); with durability "os" the journal is synced
# only by checkpoints (every 50 ms here) and 3,4 fires nearly always. The "os" variant starts
# with one plain cut in "fsync" mode, so that there are durable acknowledgements to check.
TORN_ENV = {"PC_ROLL_BYTES": str(64 << 20), "PC_RATE_FACTOR": "4"}  # one file; 4x the usual rates
OS_ENV = {"PC_ROLL_BYTES": str(64 << 20), "PC_DURABILITY": "os", **UNPACED}
TORN = {
    "torn-seq-2-writes": ("writes", "torn-seq", "persist=2", 2, TORN_ENV, True),
    "torn-seq-1,3-txn": ("txn", "torn-seq", "persist=1,3", 3, TORN_ENV, False),
    "torn-seq-3,4-writes-os": ("writes", "torn-seq", "persist=3,4", 2, OS_ENV, True),
    "torn-op-2of2-writes": ("writes", "torn-op", "parts=2::persist=2", 2, TORN_ENV, True),
    "torn-op-1,3of3-bytes": ("bytes", "torn-op", "parts=3::persist=1,3", 2, TORN_ENV, True),
    "torn-op-1of2-createdelete": ("createdelete", "torn-op", "parts=2::persist=1", 2, TORN_ENV, True),
}
TORN_TIMEOUT = 8.0  # torn-seq fires only if the first run of writes between fsyncs is long enough
EXTRA_TRIES = 4  # more cuts while none of a torn variant's faults fired
CACHE = {"large": "1536mb", "bytes": "1gb"}


def crash(timing: str, op: str, rgx: str) -> str:
    return f"lazyfs::crash::timing={timing}::op={op}::from_rgx={rgx}"


def newest_journal_file(lfs: LazyFS) -> str:
    """The path (as LazyFS sees it) of the journal file being written now."""
    files = sorted((lfs.root / "s" / "journal").glob("*.pej"))
    assert files, "no journal file yet"
    return lfs.fault_path(files[-1])


def torn(lfs: LazyFS, kind: str, args: str) -> Callable[[], str]:
    def make() -> str:
        if kind == "torn-seq":
            return f"lazyfs::torn-seq::op=write::file={newest_journal_file(lfs)}::{args}"
        return f"lazyfs::torn-op::file={newest_journal_file(lfs)}::{args}"
    return make


@pytest.mark.slow
@requires_lazyfs
@pytest.mark.parametrize("variant", list(CRASHES))
def test_crash_at_an_operation(variant, lazyfs_factory, tmp_path):
    workload, timing, op, rgx, must_fire = CRASHES[variant]
    loop = PowerCutLoop(lazyfs_factory(CACHE.get(workload, "512mb")), tmp_path, workload, variant)
    for _ in range(n_cuts(1)):
        loop.fault_cut(lambda: crash(timing, op, rgx), timeout=FAULT_TIMEOUT if must_fire else 3.0)
    loop.finish(min_fired=1 if must_fire else 0)


@pytest.mark.slow
@requires_lazyfs
@pytest.mark.parametrize("variant", list(RESTARTS))
def test_process_crash_then_crash_at_an_operation(variant, lazyfs_factory, tmp_path):
    workload, first, timing, op, rgx = RESTARTS[variant]
    loop = PowerCutLoop(lazyfs_factory(CACHE.get(workload, "512mb")), tmp_path, workload, variant,
                        env=UNPACED)
    loop.random_cut()  # durable history first (an "os" run acknowledges nothing durably)
    for _ in range(n_cuts(2)):
        loop.restart_cut(lambda: crash(timing, op, rgx), first_env={"PC_DURABILITY": first})
    loop.finish(min_fired=1)


@pytest.mark.slow
@requires_lazyfs
@pytest.mark.parametrize("variant", list(TORN))
def test_torn_journal_writes(variant, lazyfs_factory, tmp_path):
    workload, kind, args, cuts, env, must_fire = TORN[variant]
    # the writers fill a 512 MB cache within TORN_TIMEOUT when a torn-seq does not fire
    lfs = lazyfs_factory("1536mb" if kind == "torn-seq" else CACHE.get(workload, "512mb"))
    loop = PowerCutLoop(lfs, tmp_path, workload, variant)
    if env.get("PC_DURABILITY", "fsync") != "fsync":
        loop.random_cut()  # durable history first: a run in "os" mode acknowledges nothing durably
    loop.env = env
    for _ in range(n_cuts(cuts)):
        loop.fault_cut(torn(lfs, kind, args), timeout=TORN_TIMEOUT)
    for _ in range(EXTRA_TRIES if must_fire else 0):  # torn-seq does not always fire: try longer
        if any(c.fired for c in loop.cuts):
            break
        loop.fault_cut(torn(lfs, kind, args), timeout=TORN_TIMEOUT)
    loop.finish(min_fired=1 if must_fire else 0)
