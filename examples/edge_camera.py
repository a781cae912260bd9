"""Camera frames plus a time index, replayed by time range (the edge journey's video player).

Like the video player of the Pravega talk, with an embedded store instead of a cluster::

    python examples/edge_camera.py                        # a temporary store, 300 frames
    python examples/edge_camera.py --store ./data         # on disk: re-runs record more frames
    python examples/edge_camera.py --frames 50            # fewer frames

Three jobs, each an importable function (``tests/eventtime/test_example_edge_camera.py`` calls
them):

1. :func:`record` is the camera. It writes frames to the stream ``video/<camera>`` (one segment,
   routing key = the camera id, so the frames stay in capture order). Each event is a 24-byte
   header (magic, frame number, capture time in ms) followed by the frame: synthetic bytes of
   64 KiB – 1 MiB, a deterministic pattern of the camera and frame number
   (:func:`frame_bytes`), so every byte can be checked later. The frame rate varies between 10
   and 30 fps of *simulated* time (:func:`capture_times`; nothing sleeps). The frame number is
   the writer's ``sequence``, so a camera restarted with the same writer id resumes at
   ``last_sequence + 1`` and a frame re-sent after a crash is dropped, not stored twice. Before
   each frame the writer calls ``note_time(capture_ms)`` ("every frame from now on was captured
   at or after this"), which the store turns into watermarks: a reader of the frames gets a
   time window (``reader.get_current_time_window()``, docs/event-time.md). The camera flushes
   after every batch of frames (a batch is acknowledged: durable).

2. :func:`index` is the indexer. A writer does not return where its event landed, so the
   indexer reads the frames back: from where it stopped last time to the frame stream's tail
   (``store.read_slice(start=, end=)``), and for every frame writes an index event
   ``{"t": capture_ms, "frame": n, "ptr": EventPointer bytes as hex, "cut": StreamCut text}`` to
   ``video/<camera>-index``. ``cut`` is the frame stream's position just after that frame: the
   indexer's resume point is the ``cut`` of the last index event in the index stream, so the
   position is stored atomically with the entries it covers (an entry written means its frame
   is indexed; a crash before an entry reached the store re-indexes that frame, once). As a
   second guard the index writer uses the frame number as its ``sequence``, so an entry sent
   twice is dropped by the store. Run it as often as you like: it adds only new frames.

3. :func:`replay` is the player: it reads the index stream, selects the entries with
   ``t0 <= t < t1``, fetches exactly those frames (``store.fetch_event(pointer)``, one read each)
   and yields ``(capture_ms, frame bytes)`` in time order.

Frames may be larger than ``pe.MAX_EVENT_SIZE`` (8 MiB): the store writes those as large events
(docs/large-events.md), atomically, and reads and fetches them whole like any event, so the
camera, the indexer and the player need nothing special for them. A frame event (header +
frame) must fit the store's ``large_event_limit`` (1 GiB by default).

Limits kept on purpose (this is an example): the indexer and the player scan the whole index
stream (small events, ~150 bytes a frame); the frame stream has one segment, which is what makes
the per-frame cut exact.
"""

from __future__ import annotations

import argparse
import hashlib
import struct
import sys
import time
from collections.abc import Iterator
from typing import Any

import pravega_embedded as pe

SCOPE = "video"
CAMERA = "cam-0"
START_MS = 1_700_000_000_000  # capture time of frame 0 (ms since the Unix epoch)
MIN_FRAME = 64 << 10
MAX_FRAME = 1 << 20
BATCH = 15  # frames per flushed batch

HEADER = struct.Struct("<4sQq4x")  # magic, frame number, capture time (ms), padding: 24 bytes
MAGIC = b"FRM1"


def index_stream(camera: str) -> str:
    return f"{camera}-index"


def create_streams(store: pe.Store, camera: str = CAMERA) -> None:
    one = pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1))
    store.create_scope(SCOPE, exist_ok=True)
    store.create_stream(SCOPE, camera, one, exist_ok=True)
    store.create_stream(SCOPE, index_stream(camera), one, exist_ok=True)


# ---------------------------------------------------------------------------- the frames
def frame_size(n: int, camera: str = CAMERA, min_size: int = MIN_FRAME, max_size: int = MAX_FRAME) -> int:
    h = hashlib.sha256(f"{camera}/size/{n}".encode()).digest()
    return min_size + int.from_bytes(h[:4], "little") % (max_size - min_size + 1)


def frame_bytes(n: int, camera: str = CAMERA, min_size: int = MIN_FRAME, max_size: int = MAX_FRAME) -> bytes:
    """The synthetic frame ``n`` of ``camera``: deterministic bytes, 64 KiB – 1 MiB by default."""
    size = frame_size(n, camera, min_size, max_size)
    return hashlib.shake_128(f"{camera}/frame/{n}".encode()).digest(size)


def capture_times(count: int, start_ms: int = START_MS) -> list[int]:
    """Capture times (ms) of frames 0..count-1: the rate drifts between 10 and 30 fps, so the
    gap between frames is 33–100 ms; strictly increasing."""
    out, t = [], start_ms
    for n in range(count):
        out.append(t)
        fps = 20 + 10 * ((n // 40) % 3 - 1) + (n % 7) - 3  # base 10/20/30 fps every 40 frames, +-3 jitter
        t += 1000 // max(10, min(30, fps))
    return out


def pack_frame(n: int, t_ms: int, frame: bytes) -> bytes:
    return HEADER.pack(MAGIC, n, t_ms) + frame


def unpack_frame(payload: bytes) -> tuple[int, int, bytes]:
    """(frame number, capture ms, frame bytes) of a frame event."""
    magic, n, t_ms = HEADER.unpack_from(payload)
    if magic != MAGIC:
        raise ValueError("not a frame event")
    return n, t_ms, bytes(payload[HEADER.size:])


# ---------------------------------------------------------------------------- 1. the camera
def record(store: pe.Store, camera: str = CAMERA, frames: int = 300, *, batch: int = BATCH,
           start_ms: int = START_MS, min_size: int = MIN_FRAME, max_size: int = MAX_FRAME,
           pace: float = 0.0) -> list[tuple[int, int]]:
    """Job 1: capture ``frames`` more frames of ``camera`` and write them to ``video/<camera>``,
    flushing every ``batch`` frames. A re-created camera (same writer id) continues at the next
    frame number. ``pace``: real seconds to wait after each batch, so the store's maintenance
    thread (every ``maintenance_interval``) turns each batch's time note into its own watermark
    (0: no sleeping; the notes still become watermarks, just fewer of them).

    Returns ``[(frame number, capture ms)]`` of the frames written by this call."""
    if max_size + HEADER.size > store.large_event_limit:
        raise ValueError(f"frame events (a {HEADER.size}-byte header + the frame) must fit the store's "
                         f"large_event_limit of {store.large_event_limit} bytes")
    create_streams(store, camera)
    written = []
    with store.create_writer(SCOPE, camera, writer_id=f"camera-{camera}") as w:
        first = w.last_sequence + 1  # 0 on the first run; after a restart: resume
        times = capture_times(first + frames, start_ms)
        for n in range(first, first + frames):
            t = times[n]
            w.note_time(t)  # every frame from now on was captured at or after t
            w.write_event(pack_frame(n, t, frame_bytes(n, camera, min_size, max_size)),
                          routing_key=camera, sequence=n)
            written.append((n, t))
            if (n - first + 1) % batch == 0 or n == first + frames - 1:
                w.flush()  # the batch is acknowledged: durable
                if pace:
                    time.sleep(pace)
    return written


# ---------------------------------------------------------------------------- 2. the indexer
def read_index(store: pe.Store, camera: str = CAMERA) -> list[dict[str, Any]]:
    """Every entry of ``video/<camera>-index``, in write order (one segment, one key)."""
    create_streams(store, camera)
    return [e.event for e in store.read_slice(SCOPE, index_stream(camera), serializer="json")]


def indexed_position(store: pe.Store, camera: str = CAMERA) -> pe.StreamCut:
    """Where the indexer stopped: the cut of the last index entry (the head of the frame stream
    if there is none)."""
    entries = read_index(store, camera)
    if entries:
        return pe.StreamCut.from_text(entries[-1]["cut"])
    return store.stream_info(SCOPE, camera).head


def index(store: pe.Store, camera: str = CAMERA) -> int:
    """Job 2: index the frames written since the last run; returns how many entries it added."""
    create_streams(store, camera)
    start = indexed_position(store, camera)
    end = store.stream_info(SCOPE, camera).tail
    pos = start.as_dict()
    added = 0
    with store.create_writer(SCOPE, index_stream(camera), writer_id=f"indexer-{camera}",
                             serializer="json") as w:
        for e in store.read_slice(SCOPE, camera, start=start, end=end):
            n, t, _ = unpack_frame(e.event)
            pos[e.segment_id] = e.next_offset
            entry = {"t": t, "frame": n, "ptr": e.event_pointer.to_bytes().hex(),
                     "cut": pe.StreamCut.of(SCOPE, camera, pos).to_text()}
            before = w.duplicates_dropped
            w.write_event(entry, routing_key=camera, sequence=n)
            added += w.duplicates_dropped == before
        w.flush()
    return added


# ---------------------------------------------------------------------------- 3. the player
def replay(store: pe.Store, camera: str = CAMERA, t0_ms: int = 0, t1_ms: int = 1 << 62) -> Iterator[tuple[int, bytes]]:
    """Job 3: the frames captured in ``[t0_ms, t1_ms)``, as ``(capture ms, frame bytes)`` in
    time order, each fetched by its EventPointer from the index."""
    chosen = sorted((d["t"], d["frame"], d["ptr"]) for d in read_index(store, camera)
                    if t0_ms <= d["t"] < t1_ms)
    for t, n, ptr in chosen:
        ev = store.fetch_event(pe.EventPointer.from_bytes(bytes.fromhex(ptr)))
        fn, ft, frame = unpack_frame(ev.event)
        if (fn, ft) != (n, t):
            raise RuntimeError(f"index entry of frame {n} at {t} points to frame {fn} at {ft}")
        yield t, frame


# ---------------------------------------------------------------------------- main
def time_window_at(store: pe.Store, camera: str, cut: pe.StreamCut) -> pe.TimeWindow:
    """The event-time window of a reader of the frames positioned at ``cut`` (e.g. an index
    entry's cut: just after its frame). A reader created at the cut: the window is that
    position's alone, whatever another reader read before."""
    with store.create_reader(SCOPE, camera, start=cut) as r:
        return r.get_current_time_window()


def show_time_windows(store: pe.Store, camera: str, samples: int = 4) -> None:
    """Print the time window of a reader of the frames at a few positions (each an index cut)."""
    entries = read_index(store, camera)
    head = store.stream_info(SCOPE, camera).head
    for m in sorted({round(i * len(entries) / samples) for i in range(samples + 1)}):
        cut = pe.StreamCut.from_text(entries[m - 1]["cut"]) if m else head
        tw = time_window_at(store, camera, cut)
        last = f"last read captured at {entries[m - 1]['t']}" if m else "nothing read"
        nxt = f"next captured at {entries[m]['t']}" if m < len(entries) else "no next frame"
        print(f"  after {m:4d} frames: {tw} ({last}, {nxt})")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="store directory (default: a temporary store)")
    ap.add_argument("--frames", type=int, default=300, help="frames to record in this run")
    ap.add_argument("--camera", default=CAMERA, help="camera id: the stream video/<camera>")
    args = ap.parse_args(argv)

    # A short maintenance interval so the time notes become watermarks while recording.
    opts = {"maintenance_interval": 0.02}
    store = pe.open(args.store, **opts) if args.store else pe.open_temporary(**opts)
    with store:
        cam = args.camera
        written = record(store, cam, args.frames, pace=0.05)
        nbytes = sum(frame_size(n, cam) for n, _ in written)
        if written:
            span = (written[-1][1] - written[0][1]) / 1000
            print(f"recorded frames {written[0][0]}..{written[-1][0]} of {cam} "
                  f"({nbytes / (1 << 20):.1f} MiB, {span:.1f} s of capture time) to {SCOPE}/{cam}")
        added = index(store, cam)
        again = index(store, cam)
        entries = read_index(store, cam)
        print(f"indexed {added} new frames into {SCOPE}/{index_stream(cam)} "
              f"({len(entries)} entries; a second indexer run added {again})")
        if not entries:
            return 0
        first = pe.EventPointer.from_bytes(bytes.fromhex(entries[0]["ptr"]))
        print(f"  first entry: t={entries[0]['t']} frame {entries[0]['frame']} -> {first}")

        time.sleep(0.05)  # let the last note become a watermark
        print(f"time windows of a reader of {SCOPE}/{cam}:")
        show_time_windows(store, cam)

        lo, hi = entries[0]["t"], entries[-1]["t"]
        t0, t1 = lo + (hi - lo) // 3, lo + 2 * (hi - lo) // 3
        got = list(replay(store, cam, t0, t1))
        expected = [(d["t"], d["frame"]) for d in entries if t0 <= d["t"] < t1]
        ok = (len(got) == len(expected)
              and all(t == et and frame == frame_bytes(n, cam) for (t, frame), (et, n) in zip(got, expected)))
        size = sum(len(f) for _, f in got)
        print(f"replayed [{t0}, {t1}) ({(t1 - t0) / 1000:.1f} s): {len(got)} frames, "
              f"{size / (1 << 20):.1f} MiB" + (f", frames {expected[0][1]}..{expected[-1][1]}" if expected else ""))
        print("every replayed frame is byte-exact and in time order" if ok else "REPLAY MISMATCH")
        return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
