"""Bookmarking, slicing and replaying a sensor stream with StreamCuts ("Play it again, Sam").

The sample application of the Flink Forward 2018 talk by Raúl Gracia, with an embedded store
instead of Flink and a Pravega cluster::

    python examples/sensor_bookmarks.py                 # a temporary store
    python examples/sensor_bookmarks.py --store ./data  # a store on disk (re-runs replay it)

Three jobs, each an importable function (``tests/readergroup/test_example_bookmarks.py`` calls
them):

1. :func:`write_sensor_data` writes readings of 8 sensors to ``iot/sensors`` (4 segments,
   routing key = sensor id, so each sensor's readings stay in order). Readings hover around
   20; in a few known *episodes* a sensor's value dips below 0 for a while.

2. :func:`bookmark` is the bookmarking job. One reader of the reader group ``bookmarker`` reads
   the stream in order per sensor, up to the tail as it was when the job started. Every
   ``checkpoint_every`` events it initiates a checkpoint, which plays the role of Flink's
   checkpoint: its StreamCut (a consistent position across *all* segments) is the bookmark,
   and the checkpoint interval is the precision of the slices.

   How a cut is obtained with one reader thread: ``group.initiate_checkpoint(name)`` returns a
   future; the reader returns the checkpoint marker from a later ``read_next_event`` call, and
   records its position at the *next* call (Pravega's semantics: the application saves its
   state between the marker and that call). So after the call following the marker,
   ``future.result()`` is the completed Checkpoint. Its cut is exactly the boundary between
   the events returned before the marker and those returned after it, in every segment.

   Per sensor (the talk's ``Bookmarker``):

   - first reading < 0: remember the *current* cut (the last completed checkpoint, which is
     before this reading) as the start;
   - a reading >= 0 again: the current cut may not hold all the readings of interest yet, so
     wait for the *next* checkpoint and take its cut as the end; it is after every reading
     returned so far, so ``[start, end)`` holds at least the whole episode. (A reading < 0
     before that checkpoint just continues the episode.)
   - an episode still open when the job reaches its end cut ends at that cut.

   Each pair is written as a ``SensorStreamSlice`` JSON event (``{"sensorId", "start", "end"}``,
   cuts as their text form) to a second stream, ``iot/slices``.

3. :func:`replay` is the replay job: it reads every SensorStreamSlice from ``iot/slices``, reads
   exactly that slice of ``iot/sensors`` (``store.read_slice(start=, end=)``, a bounded read
   between the two cuts), keeps the slice's sensor's readings, and reports the episode.
"""

from __future__ import annotations

import argparse
import math
import random
import sys
import time
from dataclasses import dataclass
from typing import Any

import pravega_embedded as pe

SCOPE = "iot"
SENSORS = "sensors"
SLICES = "slices"
GROUP = "bookmarker"

NUM_SENSORS = 8
READINGS_PER_SENSOR = 500
SEED = 2018
# (sensor number, first reading, number of readings below 0): the known episodes.
EPISODES: tuple[tuple[int, int, int], ...] = (
    (1, 40, 12),
    (1, 300, 5),
    (3, 120, 20),
    (4, 5, 3),
    (5, 250, 1),
    (6, 400, 30),
    (7, 480, 20),  # still below 0 at the end of the data
)


def sensor_id(n: int) -> str:
    return f"sensor-{n}"


@dataclass(frozen=True)
class SensorStreamSlice:
    """A bookmark pair: the readings of ``sensor_id`` of interest lie between the two cuts."""

    sensor_id: str
    start: pe.StreamCut
    end: pe.StreamCut

    def to_json(self) -> dict[str, str]:
        return {"sensorId": self.sensor_id, "start": self.start.to_text(), "end": self.end.to_text()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "SensorStreamSlice":
        return cls(d["sensorId"], pe.StreamCut.from_text(d["start"]), pe.StreamCut.from_text(d["end"]))


# ---------------------------------------------------------------------------- 1. sensor data
def generate_readings(seed: int = SEED) -> list[dict[str, Any]]:
    """The synthetic readings in time order: ``{"sensor", "seq", "value"}``. Deterministic:
    values are >= 1 except inside :data:`EPISODES`, where they are <= -1."""
    rnd = random.Random(seed)
    dips = {(s, first + i) for s, first, n in EPISODES for i in range(n)}
    out = []
    for seq in range(READINGS_PER_SENSOR):
        for n in range(NUM_SENSORS):
            base = 20 + 5 * math.sin((seq + 7 * n) / 25)
            if (n, seq) in dips:
                value = -1 - rnd.random() * 9
            else:
                value = max(1.0, base + rnd.gauss(0, 1))
            out.append({"sensor": sensor_id(n), "seq": seq, "value": round(value, 3)})
    return out


def expected_episodes(seed: int = SEED) -> list[dict[str, Any]]:
    """Ground truth: per episode, the sensor and the seq numbers of its readings below 0."""
    readings = generate_readings(seed)
    neg: dict[str, list[int]] = {}
    for r in readings:
        if r["value"] < 0:
            neg.setdefault(r["sensor"], []).append(r["seq"])
    out = []
    for s, first, n in EPISODES:
        seqs = [q for q in neg[sensor_id(s)] if first <= q < first + n]
        out.append({"sensor": sensor_id(s), "negative_seqs": seqs})
    return out


def create_streams(store: pe.Store) -> None:
    store.create_scope(SCOPE, exist_ok=True)
    store.create_stream(SCOPE, SENSORS, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)),
                        exist_ok=True)
    store.create_stream(SCOPE, SLICES, pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(1)),
                        exist_ok=True)


def write_sensor_data(store: pe.Store, seed: int = SEED) -> list[dict[str, Any]]:
    """Job 1: write the readings to iot/sensors (routing key = sensor id). Returns the
    ground truth of :func:`expected_episodes`."""
    create_streams(store)
    with store.create_writer(SCOPE, SENSORS, writer_id="gateway", serializer="json") as w:
        for r in generate_readings(seed):
            w.write_event(r, routing_key=r["sensor"])
        w.flush()
    return expected_episodes(seed)


# ---------------------------------------------------------------------------- 2. bookmarking
def bookmark(store: pe.Store, *, checkpoint_every: int = 100, group_name: str = GROUP,
             timeout: float = 10.0) -> list[SensorStreamSlice]:
    """Job 2: read iot/sensors with a reader group up to its current tail, bookmark the
    episodes below 0 with checkpoint StreamCuts, write the slices to iot/slices, return them."""
    create_streams(store)
    tail = store.stream_info(SCOPE, SENSORS).tail
    if group_name in store.list_reader_groups():
        store.delete_reader_group(group_name)  # a re-run bookmarks from the start again
    group = store.create_reader_group(group_name, pe.ReaderGroupConfig(
        streams=[(SCOPE, SENSORS)], end=[tail], automatic_checkpoint_interval=None))
    reader = group.create_reader("bookmarker-1", serializer="json")

    current = group.get_stream_cuts()[(SCOPE, SENSORS)]  # no checkpoint yet: the group's start
    open_: dict[str, pe.StreamCut] = {}      # sensor -> start cut, episode below 0 going on
    closing: dict[str, pe.StreamCut] = {}    # sensor -> start cut, back >= 0, waiting for a cut
    slices: list[SensorStreamSlice] = []
    future: pe.CheckpointFuture | None = None
    marker_seen = False
    since = 0
    n_checkpoints = 0

    def new_cut(cut: pe.StreamCut) -> None:
        nonlocal current
        current = cut
        for s, start in sorted(closing.items()):
            slices.append(SensorStreamSlice(s, start, cut))
        closing.clear()

    deadline = time.monotonic() + timeout
    try:
        while True:
            ev = reader.read_next_event(timeout=0.5)
            if marker_seen:
                # This call recorded the reader's position for the checkpoint (before it
                # returned ``ev``): the checkpoint is complete.
                assert future is not None
                new_cut(future.result(timeout).stream_cut(SCOPE, SENSORS))
                n_checkpoints += 1
                future, marker_seen = None, False
            if ev is None:
                if time.monotonic() > deadline:
                    raise TimeoutError("the bookmarking job made no progress")
                continue
            deadline = time.monotonic() + timeout
            if ev.is_read_completed:
                break
            if ev.is_checkpoint:
                marker_seen = future is not None and ev.checkpoint_name == future.name
                continue
            r = ev.event
            s = r["sensor"]
            if r["value"] < 0:
                if s in closing:
                    open_[s] = closing.pop(s)   # dipped again before the end cut: same episode
                elif s not in open_:
                    open_[s] = current          # first reading < 0: the current bookmark
            elif s in open_:
                closing[s] = open_.pop(s)       # back >= 0: the end is the next cut
            since += 1
            if since >= checkpoint_every and future is None:
                future = group.initiate_checkpoint(f"bookmark-{n_checkpoints + 1}")
                since = 0
        # The end of the job: episodes still waiting or open end at the group's end cut.
        closing.update(open_)
        open_.clear()
        new_cut(tail)
    finally:
        reader.close()
        group.close()

    with store.create_writer(SCOPE, SLICES, writer_id="bookmarker", serializer="json") as w:
        for sl in slices:
            w.write_event(sl.to_json(), routing_key=sl.sensor_id)
        w.flush()
    return slices


# ---------------------------------------------------------------------------- 3. replay
def read_slices(store: pe.Store) -> list[SensorStreamSlice]:
    """Every SensorStreamSlice recorded in iot/slices. The routing key is the sensor id, so
    each sensor's slices come back in the order written (different sensors' slices have no
    order between them)."""
    return [SensorStreamSlice.from_json(e.event)
            for e in store.read_slice(SCOPE, SLICES, serializer="json")]


def replay_slice(store: pe.Store, sl: SensorStreamSlice) -> dict[str, Any]:
    """Replay one slice: the bounded read of iot/sensors between its cuts, filtered to its
    sensor. Returns a small report (the readings are in write order: one routing key)."""
    readings = [e.event for e in store.read_slice(SCOPE, SENSORS, start=sl.start, end=sl.end,
                                                  serializer="json")]
    mine = [r for r in readings if r["sensor"] == sl.sensor_id]
    neg = [r for r in mine if r["value"] < 0]
    return {
        "sensor": sl.sensor_id,
        "start": sl.start.to_text(),
        "end": sl.end.to_text(),
        "slice_events": len(readings),
        "sensor_readings": [(r["seq"], r["value"]) for r in mine],
        "negative_seqs": [r["seq"] for r in neg],
        "min_value": min((r["value"] for r in mine), default=None),
    }


def replay(store: pe.Store) -> list[dict[str, Any]]:
    """Job 3: replay every slice recorded in iot/slices."""
    return [replay_slice(store, sl) for sl in read_slices(store)]


def format_report(rep: dict[str, Any]) -> str:
    seqs = rep["negative_seqs"]
    span = f"seq {seqs[0]}..{seqs[-1]}" if seqs else "none"
    mine = rep["sensor_readings"]
    return (f"{rep['sensor']}: {len(seqs)} reading{'s' * (len(seqs) != 1)} below 0 ({span}, min {rep['min_value']}); "
            f"slice of {rep['slice_events']} events, {len(mine)} of this sensor "
            f"(seq {mine[0][0]}..{mine[-1][0]})")


# ---------------------------------------------------------------------------- main
def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--store", help="store directory (default: a temporary store)")
    ap.add_argument("--checkpoint-every", type=int, default=100,
                    help="events between bookmarking checkpoints (the slices' precision)")
    args = ap.parse_args(argv)

    store = pe.open(args.store) if args.store else pe.open_temporary()
    with store:
        create_streams(store)
        if store.stream_info(SCOPE, SENSORS).tail == store.stream_info(SCOPE, SENSORS).head:
            truth = write_sensor_data(store)
            print(f"wrote {NUM_SENSORS * READINGS_PER_SENSOR} readings of {NUM_SENSORS} sensors "
                  f"to {SCOPE}/{SENSORS}")
        else:
            truth = expected_episodes()
            print(f"{SCOPE}/{SENSORS} already holds data: reusing it")

        if store.stream_info(SCOPE, SLICES).tail == store.stream_info(SCOPE, SLICES).head:
            slices = bookmark(store, checkpoint_every=args.checkpoint_every)
            print(f"bookmarked {len(slices)} slices into {SCOPE}/{SLICES}")
        else:
            print(f"{SCOPE}/{SLICES} already holds bookmarks: replaying them")

        reports = replay(store)
        print(f"replayed {len(reports)} slices:")
        for rep in reports:
            print("  " + format_report(rep))

        missing = [t for t in truth
                   if not any(rep["sensor"] == t["sensor"] and set(t["negative_seqs"]) <= set(rep["negative_seqs"])
                              for rep in reports)]
        for t in missing:
            print(f"MISSING: {t['sensor']} seq {t['negative_seqs']} is in no slice", file=sys.stderr)
        print("every episode is inside its slice" if not missing else f"{len(missing)} episodes missing")
        return 1 if missing else 0


if __name__ == "__main__":
    sys.exit(main())
