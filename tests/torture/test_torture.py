"""Concurrency torture: writers (automatic and explicit sequences), a transactional writer, a
scaler, a truncator, standalone and reader-group readers, Arrow snapshots and checkpoints all
at once on one store, which is closed and reopened under them every few seconds. At the end a
fresh reader's read from the head must hold every acknowledged event exactly once (unless a
truncation removed it), per key in write order, each writer's events a gap-free prefix, no
event of an aborted transaction, and no reader may have seen a duplicate or a reordering.
The threads, the checks and the watchdog are in ``torture_harness.py``.

CI runs 25 s with durability "fsync" and a quarter of that with "os". Longer runs:
``PE_TORTURE_SECONDS=420 .venv/bin/python -m pytest tests/torture -s``. A failure names its
seed: ``PE_TORTURE_SEED`` repeats the run's random choices (what to write, scale, truncate, when
to close), not the threads' interleaving, so a race may need a few runs to show again.
``PE_TORTURE_STALL`` (default 60 s) is how long a thread may make no progress before the run
fails with every thread's stack; ``PE_TORTURE_RATE`` (default 400) is each writer's target
events per second. Failures other than hangs do not stop the run: one run lists every kind.
"""

from __future__ import annotations

import os
import random

import pytest

from torture_harness import report, summary, torture


def _env(name: str, default: float) -> float:
    value = os.environ.get(name)
    return default if value in (None, "") else float(value)


@pytest.mark.slow
@pytest.mark.parametrize("durability", ["fsync", "os"])
def test_concurrency_torture(durability, tmp_path, capsys):
    seconds = _env("PE_TORTURE_SECONDS", 25.0)
    if durability != "fsync":
        seconds = max(6.0, seconds / 4)
    seed = int(os.environ.get("PE_TORTURE_SEED") or random.SystemRandom().randrange(1, 1 << 31))
    run = torture(tmp_path / "store", durability, seconds, seed,
                  stall=_env("PE_TORTURE_STALL", 60.0), rate=_env("PE_TORTURE_RATE", 400.0),
                  artifacts=tmp_path / "artifacts")
    with capsys.disabled():
        print("\n" + summary(run))
    assert not run.failures, report(run)
