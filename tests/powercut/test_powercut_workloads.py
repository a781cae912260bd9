"""Power cuts at random moments, on LazyFS, for every workload of pc_child.py.

Each test runs a loop on one store (which accumulates history across cuts): start the child,
wait until it acknowledged something, and at a random moment after that SIGKILL it and drop
every write LazyFS holds un-fsynced (the power cut); unmount, remount, reopen the store
(durability "fsync") and check the workload's guarantees (pc_check.py) against what the child
acknowledged. Every third cut is a process crash first: the child is SIGKILLed without a cut,
started again (recovering from what LazyFS still caches, as from the page cache after kill -9)
and the power is cut a random moment (< 0.1 s) after it opened the store. Cuts per test: the
default below times PE_POWERCUT_CUTS.
"""

from __future__ import annotations

import pytest

from lazyfs import requires_lazyfs
from pc_common import WORKLOADS
from pc_loop import PowerCutLoop, n_cuts

CUTS = {"writes": 5, "scaling": 5, "txn": 5, "truncate": 5, "large": 4, "bytes": 5, "createdelete": 5}
CACHE = {"large": "1536mb", "bytes": "1gb"}  # LazyFS keeps all data written during a mount
MAX_DELAY = {"large": 1.0}


@pytest.mark.slow
@requires_lazyfs
@pytest.mark.parametrize("workload", WORKLOADS)
def test_power_cuts_at_random_moments(workload, lazyfs_factory, tmp_path):
    loop = PowerCutLoop(lazyfs_factory(CACHE.get(workload, "512mb")), tmp_path, workload,
                        f"random-{workload}")
    for i in range(n_cuts(CUTS[workload])):
        if i % 3 == 2:
            loop.restart_cut()
        else:
            loop.random_cut(max_delay=MAX_DELAY.get(workload, 0.8))
    loop.finish()
