"""Child process of test_large_event_memory.py: one large-event operation in a fresh process,
with the peak RSS (getrusage ru_maxrss, KiB on Linux) before and after it.

Usage: python large_rss_child.py MODE STORE_DIR SIZE_BYTES [POINTER_HEX]

MODE is one of
  write  create mem/big, write b"before", the SIZE-byte event (key "k") and b"after"; flush;
  read   a standalone reader reads the three events;
  fetch  store.fetch_event of the pointer (EventPointer.to_bytes() in hex);
  slice  iterate store.read_slice over the stream.

Prints one line of JSON: baseline_kib (RSS just before the operation; for write, before the
event was allocated), maxrss_before_kib (the high-water mark then), peak_kib (ru_maxrss after
it), hwm_kib (/proc's VmHWM at the end, for comparison), the sha256 of the event written or
read, and (read) the event's pointer in hex. Each mode runs in its own process so each peak is
its own.
"""

from __future__ import annotations

import gc
import hashlib
import json
import os
import resource
import sys

import pravega_embedded as pe
from pravega_embedded.events import EventPointer

SCOPE, STREAM, KEY = "mem", "big", "k"


def maxrss_kib() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss


def _status(field: str) -> int | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return int(line.split()[1])
    except OSError:
        pass
    return None


def baseline_kib() -> int:
    """The RSS now (VmRSS), not the high-water mark: what the operation starts from. An
    earlier transient peak (imports, opening the store) would otherwise hide growth."""
    return _status("VmRSS") or maxrss_kib()


def main() -> None:
    mode, store_dir, size = sys.argv[1], sys.argv[2], int(sys.argv[3])
    out: dict[str, object] = {"mode": mode}
    store = pe.open(store_dir)  # durability "fsync"
    gc.collect()
    if mode == "write":
        store.create_scope(SCOPE, exist_ok=True)
        store.create_stream(SCOPE, STREAM, exist_ok=True)
        w = store.create_writer(SCOPE, STREAM, writer_id="mem-writer")
        w.write_event(b"before", routing_key=KEY)
        w.flush()
        out["baseline_kib"] = baseline_kib()
        out["maxrss_before_kib"] = maxrss_kib()
        event = os.urandom(size)
        seq = w.write_event(event, routing_key=KEY)
        durable = w.flush()
        out["peak_kib"] = maxrss_kib()
        assert durable == seq == 1, (durable, seq)
        out["sha256"] = hashlib.sha256(event).hexdigest()
        del event
        w.write_event(b"after", routing_key=KEY)
        w.close()
    elif mode == "read":
        out["baseline_kib"] = baseline_kib()
        out["maxrss_before_kib"] = maxrss_kib()
        with store.create_reader(SCOPE, STREAM) as r:
            got = [r.read_next_event(timeout=5) for _ in range(3)]
            out["peak_kib"] = maxrss_kib()
        assert all(e is not None for e in got)
        assert [got[0].event, got[2].event] == [b"before", b"after"]
        assert [e.routing_key for e in got] == [KEY] * 3
        out["len"] = len(got[1].event)
        out["sha256"] = hashlib.sha256(got[1].event).hexdigest()
        out["pointer"] = got[1].event_pointer.to_bytes().hex()
    elif mode == "fetch":
        out["baseline_kib"] = baseline_kib()
        out["maxrss_before_kib"] = maxrss_kib()
        ev = store.fetch_event(EventPointer.from_bytes(bytes.fromhex(sys.argv[4])))
        out["peak_kib"] = maxrss_kib()
        out["len"] = len(ev.event)
        out["sha256"] = hashlib.sha256(ev.event).hexdigest()
    elif mode == "slice":
        out["baseline_kib"] = baseline_kib()
        out["maxrss_before_kib"] = maxrss_kib()
        lens, sha = [], None
        for ev in store.read_slice(SCOPE, STREAM):
            lens.append(len(ev.event))
            if len(ev.event) == size:
                sha = hashlib.sha256(ev.event).hexdigest()
        out["peak_kib"] = maxrss_kib()
        out["lens"], out["len"], out["sha256"] = lens, size, sha
    else:
        raise SystemExit(f"unknown mode {mode}")
    out["hwm_kib"] = _status("VmHWM") or out["peak_kib"]
    store.close()
    print(json.dumps(out), flush=True)


if __name__ == "__main__":
    main()
