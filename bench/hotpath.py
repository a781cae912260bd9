"""The writer hot path and catch-up reads alone, for alternating builds.

    python bench/hotpath.py [--events 1000000] [label]

One run: ``write_event`` of N distinct 100 B payloads over 64 routing keys into a ``fixed(4)``
stream of a fresh store (default durability), one ``flush()``; then a fresh reader reads them
back with ``read_next_event(0)``. Prints events/s of both. Run it from two checkouts in turn
(``PYTHONPATH=<checkout> python bench/hotpath.py before``) to compare builds on the same machine.
It imports ``pravega_embedded`` from the path it is given, not through ``bench/run.py`` (which
puts its own checkout first), so one copy of this script measures any build.
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time

import pravega_embedded as pe


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("label", nargs="?", default=os.path.dirname(pe.__file__))
    ap.add_argument("--events", type=int, default=1_000_000)
    args = ap.parse_args()
    evs = [os.urandom(100) for _ in range(4096)]
    keys = [f"sensor-{i}" for i in range(64)]
    work = tempfile.mkdtemp(prefix="hotpath-")
    try:
        with pe.open(os.path.join(work, "s")) as s:
            s.create_scope("b")
            s.create_stream("b", "x", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)))
            with s.create_writer("b", "x") as w:
                we = w.write_event
                t = time.perf_counter()
                for i in range(args.events):
                    we(evs[i & 4095], keys[i & 63])
                w.flush()
                wdt = time.perf_counter() - t
            r = s.create_reader("b", "x")
            rn = r.read_next_event
            n = 0
            t = time.perf_counter()
            while rn(0) is not None:
                n += 1
            rdt = time.perf_counter() - t
            r.close()
    finally:
        shutil.rmtree(work, ignore_errors=True)
    if n != args.events:
        print(f"read back {n} events of {args.events}", file=sys.stderr)
        return 1
    print(f"{args.label}: write_event {args.events / wdt:,.0f} ev/s  read {n / rdt:,.0f} ev/s", flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
