"""examples/sensor_bookmarks.py: bookmarking episodes with reader-group StreamCuts, storing the
slices in a second stream and replaying them (the "Play it again, Sam" sample application)."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "sensor_bookmarks.py"


def _load():
    spec = importlib.util.spec_from_file_location("sensor_bookmarks", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["sensor_bookmarks"] = mod  # dataclasses look the module up by name
    spec.loader.exec_module(mod)
    return mod


ex = _load()


@pytest.fixture(scope="module")
def run():
    """A store with the sensor data, bookmarked once: (store, ground truth, slices)."""
    with pe.open_temporary() as store:
        truth = ex.write_sensor_data(store)
        slices = ex.bookmark(store)
        yield store, truth, slices


def _covering(reports, episode):
    return [r for r in reports
            if r["sensor"] == episode["sensor"] and set(episode["negative_seqs"]) <= set(r["negative_seqs"])]


def test_ground_truth_matches_the_written_data(run):
    store, truth, _ = run
    readings = [e.event for e in store.read_slice("iot", "sensors", serializer="json")]
    assert len(readings) == ex.NUM_SENSORS * ex.READINGS_PER_SENSOR
    negative = sorted((r["sensor"], r["seq"]) for r in readings if r["value"] < 0)
    assert negative == sorted((t["sensor"], q) for t in truth for q in t["negative_seqs"])
    assert len(truth) == len(ex.EPISODES) and all(t["negative_seqs"] for t in truth)


def test_every_negative_reading_of_every_episode_is_inside_its_slice(run):
    store, truth, slices = run
    assert len(slices) == len(truth)  # the episodes are far apart: one slice each
    reports = ex.replay(store)
    for t in truth:
        assert len(_covering(reports, t)) == 1, f"episode {t} is not inside exactly one slice"
    # and the slices hold nothing below 0 that is not an episode of their sensor
    negative = {(t["sensor"], q) for t in truth for q in t["negative_seqs"]}
    for rep in reports:
        assert rep["negative_seqs"]
        assert {(rep["sensor"], q) for q in rep["negative_seqs"]} <= negative


def test_slice_events_are_exactly_the_bounded_read_between_the_cuts(run):
    store, _, slices = run
    for sl in slices:
        rep = ex.replay_slice(store, sl)
        start, end = sl.start.as_dict(), sl.end.as_dict()
        evs = list(store.read_slice("iot", "sensors", start=sl.start, end=sl.end))
        assert len(evs) == rep["slice_events"] > 0
        assert all(start[e.segment_id] <= e.offset < end[e.segment_id] for e in evs)


def test_each_slice_start_is_before_its_end(run):
    _, _, slices = run
    for sl in slices:
        assert (sl.start.scope, sl.start.stream) == (sl.end.scope, sl.end.stream) == ("iot", "sensors")
        assert sl.start <= sl.end and sl.start != sl.end


def test_the_slices_stream_round_trips_the_cut_text(run):
    store, _, slices = run
    # routing key = sensor id: per sensor the slices come back in write order; different
    # sensors have no order between them (docs/concepts/routing.md), so compare per sensor
    def by_sensor(items, sensor_of):
        out = {}
        for x in items:
            out.setdefault(sensor_of(x), []).append(x)
        return out

    raw = [e.event for e in store.read_slice("iot", "slices", serializer="json")]
    expected = [{"sensorId": sl.sensor_id, "start": sl.start.to_text(), "end": sl.end.to_text()}
                for sl in slices]
    assert by_sensor(raw, lambda d: d["sensorId"]) == by_sensor(expected, lambda d: d["sensorId"])
    got = by_sensor(ex.read_slices(store), lambda sl: sl.sensor_id)
    assert got == by_sensor(slices, lambda sl: sl.sensor_id)
    for d in raw:
        start, end = pe.StreamCut.from_text(d["start"]), pe.StreamCut.from_text(d["end"])
        assert (start.to_text(), end.to_text()) == (d["start"], d["end"])
        assert ex.SensorStreamSlice(d["sensorId"], start, end) in slices


def test_replay_is_deterministic(run):
    store, _, _ = run
    first, second = ex.replay(store), ex.replay(store)
    assert first == second
    assert json.dumps(first) == json.dumps(second)


@pytest.mark.parametrize("every", [1, 7, 333, 10_000])
def test_checkpoint_interval_only_changes_the_precision(every):
    """Checkpoints every event, often, rarely, or never (the slices span the whole job):
    every episode stays inside a slice of its sensor."""
    with pe.open_temporary() as store:
        truth = ex.write_sensor_data(store)
        slices = ex.bookmark(store, checkpoint_every=every)
        reports = ex.replay(store)
        for t in truth:
            assert _covering(reports, t), f"episode {t} is in no slice (checkpoint every {every})"
        for sl in slices:
            assert sl.start <= sl.end
        if every == 1:  # a cut after every event: the start is the one just before the first dip
            for rep in reports:
                assert rep["sensor_readings"][0][0] == rep["negative_seqs"][0]
        if every == 10_000:  # no checkpoint completed during the job: head to tail
            info = store.stream_info("iot", "sensors")
            assert all((sl.start, sl.end) == (info.head, info.tail) for sl in slices)


def test_bookmarks_replay_the_same_after_reopening_the_store(tmp_path):
    path = tmp_path / "store"
    with pe.open(path, durability="os") as store:
        ex.write_sensor_data(store)
        ex.bookmark(store)
        before = ex.replay(store)
    with pe.open(path, durability="os") as store:
        assert ex.replay(store) == before


def test_main_with_a_store_directory_replays_the_stored_bookmarks(tmp_path, capsys):
    path = str(tmp_path / "store")
    assert ex.main(["--store", path]) == 0
    first = capsys.readouterr().out
    assert ex.main(["--store", path]) == 0
    second = capsys.readouterr().out
    assert "already holds bookmarks" in second
    replayed = lambda out: [ln for ln in out.splitlines() if ln.startswith("  sensor-")]  # noqa: E731
    assert replayed(first) == replayed(second) and len(replayed(first)) == len(ex.EPISODES)


def test_the_script_runs():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "examples/sensor_bookmarks.py"], cwd=REPO, env=env,
                       capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "every episode is inside its slice" in p.stdout
