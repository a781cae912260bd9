"""Memory bound of large events: a 100 MiB event is written and read with a few MiB of buffer
beyond the event itself (largeevents invariant 3), on a durable (fsync) store.

Each operation runs in a fresh child process (large_rss_child.py) that reports its peak RSS
(ru_maxrss) before and after, so each figure is that operation's own high-water mark.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

CHILD = Path(__file__).with_name("large_rss_child.py")
MiB = 1 << 20
SIZE = 100 * MiB
SLACK = 48 * MiB  # allowed growth beyond the event itself


# ru_maxrss survives fork and exec (Linux keeps the parent's high-water mark in the child's
# signal struct), and the pytest process may be big by now: the child is started by a small
# launcher process, whose own small mark is what the child inherits.
LAUNCH = [sys.executable, "-c", "import subprocess, sys; sys.exit(subprocess.call(sys.argv[1:]))"]


def _run(mode: str, store_dir: Path, *extra: str) -> dict:
    proc = subprocess.run([*LAUNCH, sys.executable, str(CHILD), mode, str(store_dir), str(SIZE), *extra],
                          check=False, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, f"{mode} child failed:\n{proc.stdout}\n{proc.stderr}"
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _growth_mib(res: dict) -> float:
    """Peak growth beyond the event's own 100 MiB, in MiB."""
    return (res["peak_kib"] * 1024 - res["baseline_kib"] * 1024 - SIZE) / MiB


@pytest.mark.slow
def test_100_mib_event_round_trip_peak_rss(tmp_path):
    store_dir = tmp_path / "store"
    w = _run("write", store_dir)
    r = _run("read", store_dir)
    f = _run("fetch", store_dir, r["pointer"])
    s = _run("slice", store_dir)
    figures = {m["mode"]: (m["baseline_kib"] // 1024, m["peak_kib"] // 1024, m["hwm_kib"] // 1024,
                           round(_growth_mib(m), 1)) for m in (w, r, f, s)}
    print("RSS (baseline MiB, ru_maxrss peak MiB, VmHWM MiB, growth beyond the 100 MiB event MiB):",
          figures)
    # the event came back whole and identical through every read path
    assert r["len"] == f["len"] == SIZE
    assert r["sha256"] == f["sha256"] == s["sha256"] == w["sha256"]
    assert s["lens"] == [6, SIZE, 5]
    for m in (w, r, f, s):
        assert m["maxrss_before_kib"] * 1024 < m["baseline_kib"] * 1024 + SLACK, (
            f"{m['mode']}: the high-water mark before the operation ({m['maxrss_before_kib']} KiB) "
            "is far above the RSS then: it was inherited, the figures mean nothing")
        assert m["peak_kib"] * 1024 <= m["baseline_kib"] * 1024 + SIZE + SLACK, (
            f"{m['mode']}: peak RSS {m['peak_kib'] // 1024} MiB is more than the baseline "
            f"{m['baseline_kib'] // 1024} MiB + the 100 MiB event + {SLACK // MiB} MiB")
