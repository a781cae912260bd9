"""Durable-acknowledgement latency alone and beside a busy writer, against raw write+fdatasync.

    python bench/ack_latency.py [--rounds 2] [--samples 3000]

Each round, on the same file system and in the same process: raw = a buffered write of one
framed 107-byte event and an fdatasync, ``samples`` times; alone = ``write_event`` of 100 bytes
then ``flush()`` on a writer of the store, ``samples`` times; busy = the same while another
writer of the store writes 100 events of 100 bytes every 0.5 ms without flushing (the shape of
``bench/run.py``'s measure, run on its own so rounds can alternate between builds). Prints the
p50 and p99 of each and the ratios ours p99 / raw p99 (issue 12's goal: <= 2 alone and busy).
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import pravega_embedded as pe  # noqa: E402

EVENT = b"a" * 100
RAW_FRAME = b"\x64\x00\x00\x00\x01\x00k" + EVENT  # u32 length, u16 key length, key, payload


def _pcts(lat: list[float]) -> tuple[float, float]:
    lat.sort()
    return lat[len(lat) // 2], lat[int(len(lat) * 0.99)]


def raw(path: Path, samples: int) -> tuple[float, float]:
    lat = []
    with open(path, "wb") as f:
        for _ in range(samples):
            t = time.perf_counter()
            f.write(RAW_FRAME)
            f.flush()
            os.fdatasync(f.fileno())
            lat.append(time.perf_counter() - t)
    return _pcts(lat)


def ours(store: pe.Store, stream: str, samples: int, busy: bool) -> tuple[float, float]:
    store.create_stream("bench", stream)
    stop = threading.Event()

    def noise() -> None:
        with store.create_writer("bench", stream, writer_id="noise") as w:
            batch = [b"n" * 100] * 100
            while not stop.is_set():
                w.write_events(batch, "noise")
                time.sleep(0.0005)

    t = threading.Thread(target=noise, daemon=True)
    if busy:
        t.start()
    lat = []
    with store.create_writer("bench", stream, writer_id="acker") as w:
        for _ in range(samples):
            t0 = time.perf_counter()
            w.write_event(EVENT, "k")
            w.flush()
            lat.append(time.perf_counter() - t0)
    stop.set()
    if busy:
        t.join()
    return _pcts(lat)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--samples", type=int, default=3000)
    ap.add_argument("--dir", help="where to put the store (default: a temporary directory)")
    args = ap.parse_args()
    work = Path(tempfile.mkdtemp(prefix="ack-", dir=args.dir))
    try:
        with pe.open(str(work / "store")) as store:
            store.create_scope("bench")
            for k in range(args.rounds):
                r50, r99 = raw(work / "raw", args.samples)
                a50, a99 = ours(store, f"alone{k}", args.samples, False)
                b50, b99 = ours(store, f"busy{k}", args.samples, True)
                print(f"round {k + 1}: raw p50 {r50 * 1e3:.3f} p99 {r99 * 1e3:.3f} ms | alone p50 "
                      f"{a50 * 1e3:.3f} p99 {a99 * 1e3:.3f} ms ({a99 / r99:.2f}x raw) | busy p50 "
                      f"{b50 * 1e3:.3f} p99 {b99 * 1e3:.3f} ms ({b99 / r99:.2f}x raw)", flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
