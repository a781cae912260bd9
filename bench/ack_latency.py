"""Durable-acknowledgement latency alone and beside a busy writer, against raw write+fdatasync.

    python bench/ack_latency.py [--rounds 2] [--samples 3000]

``bench/run.py``'s latency measure on its own, so that rounds can alternate between builds:
each round, in a fresh store on the same file system, raw = a buffered write of one framed
event and an fdatasync; raw busy = the same beside a thread that frames 100 events of 100 bytes
every 0.5 ms and writes them to the same file (raw's own framing); alone = ``write_event`` of
100 bytes then ``flush()``; busy = the same while another writer writes 100 events of 100 bytes
every 0.5 ms without flushing. Prints the p50 and p99 of each, ours alone p99 / raw p99, and
ours busy p99 / raw busy p99 and / raw p99 (issue 12's goal: <= 2).
"""

from __future__ import annotations

import argparse
import shutil
import tempfile
from pathlib import Path

from run import ack_latency, pe, raw_ack_latency


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--dir", help="where to put the stores (default: a temporary directory)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ack-", dir=args.dir))
    try:
        for k in range(args.rounds):
            r50, r99 = raw_ack_latency(work / f"raw{k}", args.samples)
            rb50, rb99 = raw_ack_latency(work / f"rawbusy{k}", args.samples, background=True)
            with pe.open(str(work / f"store{k}")) as store:
                store.create_scope("bench")
                a50, a99 = ack_latency(store, args.samples, False)
                b50, b99 = ack_latency(store, args.samples, True)
            print(f"round {k + 1}: raw p50 {r50 * 1e3:.3f} p99 {r99 * 1e3:.3f} ms | raw busy p50 "
                  f"{rb50 * 1e3:.3f} p99 {rb99 * 1e3:.3f} ms | alone p50 {a50 * 1e3:.3f} p99 "
                  f"{a99 * 1e3:.3f} ms ({a99 / r99:.2f}x raw) | busy p50 {b50 * 1e3:.3f} p99 "
                  f"{b99 * 1e3:.3f} ms ({b99 / rb99:.2f}x raw busy, {b99 / r99:.2f}x raw)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
