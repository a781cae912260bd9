"""examples/edge_camera.py: a camera writes frames, an indexer maps capture times to
EventPointers in a second stream, a player replays a time range by fetching exactly those frames."""

from __future__ import annotations

import importlib.util
import itertools
import os
import subprocess
import sys
from pathlib import Path

import pytest

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
SCRIPT = REPO / "examples" / "edge_camera.py"
CAM = "cam-0"
FRAMES = 90


def _load():
    spec = importlib.util.spec_from_file_location("edge_camera", SCRIPT)
    mod = importlib.util.module_from_spec(spec)
    sys.modules["edge_camera"] = mod
    spec.loader.exec_module(mod)
    return mod


ex = _load()


@pytest.fixture(scope="module")
def run():
    """A store with FRAMES frames of cam-0, indexed once: (store, [(frame, capture ms)])."""
    with pe.open_temporary() as store:
        written = ex.record(store, CAM, FRAMES)
        assert ex.index(store, CAM) == FRAMES
        yield store, written


def _expected(written, t0, t1, camera=CAM, **sizes):
    return [(t, ex.frame_bytes(n, camera, **sizes)) for n, t in written if t0 <= t < t1]


def test_the_frames_are_as_specified(run):
    store, written = run
    assert [n for n, _ in written] == list(range(FRAMES))
    times = [t for _, t in written]
    gaps = [b - a for a, b in itertools.pairwise(times)]
    assert all(1000 // 30 <= g <= 1000 // 10 for g in gaps)  # 10-30 fps
    assert len(set(gaps)) > 3  # the rate varies
    sizes = [ex.frame_size(n) for n in range(FRAMES)]
    assert all(64 << 10 <= s <= 1 << 20 for s in sizes) and len(set(sizes)) == FRAMES
    evs = list(store.read_slice("video", CAM))
    assert len(evs) == FRAMES and all(e.routing_key == CAM for e in evs)
    for (n, t), e in zip(written, evs):
        assert ex.unpack_frame(e.event) == (n, t, ex.frame_bytes(n))


@pytest.mark.parametrize("first,last", [(0, 1), (10, 40), (37, 38), (50, FRAMES)])
def test_replay_returns_exactly_the_frames_captured_in_the_range(run, first, last):
    """t0 = a frame's capture time (included), t1 = a later frame's (excluded)."""
    store, written = run
    times = [t for _, t in written] + [written[-1][1] + 1]
    t0, t1 = times[first], times[last]
    got = list(ex.replay(store, CAM, t0, t1))
    assert [t for t, _ in got] == [t for _, t in written[first:last]]
    assert got == _expected(written, t0, t1)  # byte-exact, in time order


def test_replay_between_frame_times(run):
    store, written = run
    t0, t1 = written[20][1] + 1, written[30][1] - 1  # frames 21..29
    got = list(ex.replay(store, CAM, t0, t1))
    assert got == _expected(written, t0, t1) and len(got) == 9


def test_empty_ranges(run):
    store, written = run
    first, last = written[0][1], written[-1][1]
    assert list(ex.replay(store, CAM, first, first)) == []
    assert list(ex.replay(store, CAM, first - 10_000, first)) == []
    assert list(ex.replay(store, CAM, last + 1, last + 10_000)) == []
    assert list(ex.replay(store, CAM, written[5][1] + 1, written[6][1])) == []  # between frames
    assert list(ex.replay(store, CAM, last, first)) == []  # t1 < t0


def test_full_range(run):
    store, written = run
    everything = _expected(written, 0, 1 << 62)
    assert len(everything) == FRAMES
    assert list(ex.replay(store, CAM, written[0][1], written[-1][1] + 1)) == everything
    assert list(ex.replay(store, CAM)) == everything


def test_index_entries_point_at_their_frames(run):
    store, written = run
    entries = ex.read_index(store, CAM)
    assert [(d["frame"], d["t"]) for d in entries] == written
    for d in entries:
        ptr = pe.EventPointer.from_bytes(bytes.fromhex(d["ptr"]))
        assert (ptr.scope, ptr.stream) == ("video", CAM)
        assert ex.unpack_frame(store.fetch_event(ptr).event)[:2] == (d["frame"], d["t"])
    # the last entry's cut is the frame stream's tail: where the next run starts
    assert pe.StreamCut.from_text(entries[-1]["cut"]) == store.stream_info("video", CAM).tail


def test_indexing_twice_adds_nothing_and_picks_up_new_frames():
    small = {"min_size": 1 << 10, "max_size": 8 << 10}
    with pe.open_temporary() as store:
        first = ex.record(store, CAM, 30, **small)
        assert ex.index(store, CAM) == 30
        assert ex.index(store, CAM) == 0
        more = ex.record(store, CAM, 25, **small)  # a restarted camera resumes the numbering
        assert [n for n, _ in more] == list(range(30, 55))
        assert more[0][1] > first[-1][1]
        assert ex.index(store, CAM) == 25
        assert ex.index(store, CAM) == 0
        entries = ex.read_index(store, CAM)
        assert [d["frame"] for d in entries] == list(range(55))
        assert list(ex.replay(store, CAM)) == _expected(first + more, 0, 1 << 62, **small)


def test_the_indexer_resumes_after_reopening_the_store(tmp_path):
    path = tmp_path / "store"
    small = {"min_size": 64 << 10, "max_size": 128 << 10}
    with pe.open(path, durability="os") as store:
        first = ex.record(store, CAM, 20, **small)
        assert ex.index(store, CAM) == 20
    with pe.open(path, durability="os") as store:
        assert ex.index(store, CAM) == 0
        more = ex.record(store, CAM, 15, **small)
        assert [n for n, _ in more] == list(range(20, 35))
    with pe.open(path, durability="os") as store:
        assert ex.index(store, CAM) == 15
        assert ex.index(store, CAM) == 0
        entries = ex.read_index(store, CAM)
        assert [d["frame"] for d in entries] == list(range(35))
        written = first + more
        t0, t1 = written[10][1], written[25][1]
        assert list(ex.replay(store, CAM, t0, t1)) == _expected(written, t0, t1, **small)


def test_an_entry_sent_twice_is_dropped():
    """The index writer numbers entries by frame: a frame indexed again (say, the indexer
    crashed before its last entries were read back) is not stored twice."""
    small = {"min_size": 1 << 10, "max_size": 2 << 10}
    with pe.open_temporary() as store:
        ex.record(store, CAM, 10, **small)
        assert ex.index(store, CAM) == 10
        with store.create_writer("video", ex.index_stream(CAM), writer_id=f"indexer-{CAM}",
                                 serializer="json") as w:
            assert w.last_sequence == 9
            w.write_event({"t": 0, "frame": 9, "ptr": "", "cut": ""}, routing_key=CAM, sequence=9)
            assert w.duplicates_dropped == 1
        assert [d["frame"] for d in ex.read_index(store, CAM)] == list(range(10))


def test_frames_over_8_mib_are_large_events_and_round_trip():
    """A frame event up to MAX_EVENT_SIZE is an ordinary event, a larger one a large event:
    the camera, the indexer and the player handle both, byte-exact."""
    with pe.open_temporary() as store:
        biggest = pe.MAX_EVENT_SIZE - ex.HEADER.size  # header + frame: exactly 8 MiB
        large = 9 << 20                               # header + frame: over 8 MiB
        first = ex.record(store, CAM, 1, min_size=biggest, max_size=biggest)
        second = ex.record(store, CAM, 1, min_size=large, max_size=large)
        assert [n for n, _ in first + second] == [0, 1]
        evs = list(store.read_slice("video", CAM))
        assert [len(e.event) for e in evs] == [pe.MAX_EVENT_SIZE, large + ex.HEADER.size]
        assert ex.index(store, CAM) == 2
        (_, t0), (_, t1) = first[0], second[0]
        assert list(ex.replay(store, CAM)) == [(t0, ex.frame_bytes(0, CAM, biggest, biggest)),
                                              (t1, ex.frame_bytes(1, CAM, large, large))]
        assert list(ex.replay(store, CAM, t1, t1 + 1)) == [(t1, ex.frame_bytes(1, CAM, large, large))]


def test_frames_must_fit_the_stores_large_event_limit():
    with pe.open_temporary(large_event_limit=16 << 20) as store:
        with pytest.raises(ValueError):
            ex.record(store, CAM, 1, max_size=16 << 20)  # + the header: over the limit
        assert ex.read_index(store, CAM) == []
        assert list(store.read_slice("video", CAM)) == []


def test_time_windows_bound_the_capture_times():
    """The camera notes each frame's capture time: at every frame boundary (an index cut), the
    time window of a reader there has lower <= the next frame's time and upper >= the last
    frame read's time."""
    small = {"min_size": 1 << 10, "max_size": 4 << 10}
    with pe.open_temporary(maintenance_interval=0.01) as store:
        written = ex.record(store, CAM, 45, batch=5, pace=0.04, **small)
        ex.index(store, CAM)
        entries = ex.read_index(store, CAM)
        cuts = [store.stream_info("video", CAM).head] + [pe.StreamCut.from_text(d["cut"]) for d in entries]
        windows = [ex.time_window_at(store, CAM, c) for c in cuts]
        for m, tw in enumerate(windows):
            if tw.lower is not None and m < len(written):
                assert tw.lower <= written[m][1]
            if tw.upper is not None and m > 0:
                assert tw.upper >= written[m - 1][1]
        both = [tw for tw in windows if tw.lower is not None and tw.upper is not None]
        assert len(both) >= 3 and len({tw.lower for tw in both}) >= 3  # windows move with the frames


def test_the_script_runs():
    env = dict(os.environ, PYTHONPATH=str(REPO))
    p = subprocess.run([sys.executable, "examples/edge_camera.py", "--frames", "50"], check=False,
                       cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert p.returncode == 0, p.stderr
    assert "indexed 50 new frames" in p.stdout
    assert "a second indexer run added 0" in p.stdout
    assert "TimeWindow(" in p.stdout
    assert "every replayed frame is byte-exact and in time order" in p.stdout


def test_the_script_resumes_on_a_store_directory(tmp_path, capsys):
    path = str(tmp_path / "store")
    assert ex.main(["--store", path, "--frames", "20"]) == 0
    assert ex.main(["--store", path, "--frames", "20"]) == 0
    out = capsys.readouterr().out
    assert "recorded frames 20..39" in out
    assert "indexed 20 new frames into video/cam-0-index (40 entries" in out
