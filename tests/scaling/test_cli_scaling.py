"""``pravega-embedded history | scale | update-stream``, run the way users run them (a
subprocess each): the history as text and SVG, manual splits and merges with ``NUMBER#EPOCH``
ids and ranges copied from ``info``, policy changes that keep what is not given, and bad input
(bad ids, ranges that do not cover the sealed segments, conflicting options) failing with a
clear message, a non-zero exit code, no traceback, and the stream left as it was."""

from __future__ import annotations

import os
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

import pravega_embedded as pe

REPO = Path(__file__).resolve().parents[2]
ENV = dict(os.environ, PYTHONPATH=str(REPO))
NS = "{http://www.w3.org/2000/svg}"


def cli(store: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "pravega_embedded", "--store", str(store), "--durability", "none", *args],
        input=stdin, capture_output=True, text=True, env=ENV, timeout=180)


def ok(store: Path, *args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    out = cli(store, *args, stdin=stdin)
    assert out.returncode == 0, (args, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr
    return out


def fails(store: Path, code: int, *args: str) -> str:
    out = cli(store, *args)
    assert out.returncode == code, (args, out.stdout, out.stderr)
    assert "Traceback" not in out.stderr, out.stderr
    if code == 1:
        assert out.stderr.startswith("pravega-embedded: error:"), out.stderr
    else:
        assert out.stderr.startswith("pravega-embedded: error:") and "--help" in out.stderr, out.stderr
    assert len(out.stderr.splitlines()) == 1, out.stderr  # one line, usage errors too
    return out.stderr


def stream_info(store: Path, stream: str = "iot/sensors") -> pe.StreamInfo:
    with pe.open(store, durability="none") as s:
        return s.stream_info(*stream.split("/"))


def epoch_lines(text: str) -> list[list[str]]:
    header, *lines = text.splitlines()
    assert header.split()[:3] == ["epoch", "time", "segs"]
    return [line.split() for line in lines]


@pytest.fixture
def store(tmp_path) -> Path:
    path = tmp_path / "s"
    ok(path, "create-stream", "iot/sensors", "--segments", "2")
    ok(path, "write", "iot/sensors", "--key-field", "k",
       stdin="".join(f'{{"k": "s{i}", "v": {i}}}\n' for i in range(20)))
    return path


def test_scale_then_history_text_and_svg(store, tmp_path):
    out = ok(store, "scale", "iot/sensors", "--seal", "0", "--ranges", "0-0.25,0.25-0.5")
    assert out.stdout.splitlines() == ["2#1", "3#1"]
    assert "scaled iot/sensors to epoch 1: sealed 0; created 2#1 [0.0000, 0.2500), 3#1 [0.2500, 0.5000)" in out.stderr
    text = ok(store, "history", "iot/sensors").stdout
    lines = epoch_lines(text)
    assert [(ln[0], ln[2]) for ln in lines] == [("0", "2"), ("1", "3")]
    assert lines[0][1] == "+0s"
    assert "|2#1" in text and "|3#1" in text and "|1 " in text
    header, *bars = text.splitlines()
    assert all(len(b) - header.index("key space") == 72 for b in bars)
    narrow = ok(store, "history", "iot/sensors", "--width", "30").stdout
    assert all(len(b) - header.index("key space") == 30 for b in narrow.splitlines()[1:])
    info = stream_info(store)
    assert text.rstrip("\n") == info.history_text()
    svg_file = tmp_path / "h.svg"
    out = ok(store, "history", "iot/sensors", "--svg", str(svg_file))
    assert out.stdout == "" and f"(2 epochs) to {svg_file}" in out.stderr
    root = ET.fromstring(svg_file.read_text())
    rects = [r.get("data-segment") for r in root.iter(f"{NS}rect") if r.get("class") == "segment"]
    assert sorted(rects) == ["0", "1", "2#1", "3#1"]
    assert svg_file.read_text() == ok(store, "history", "iot/sensors", "--svg", "-").stdout  # deterministic
    small = ok(store, "history", "iot/sensors", "--svg", "-", "--width", "320", "--height", "120").stdout
    assert ET.fromstring(small).get("width") == "320" and ET.fromstring(small).get("height") == "120"
    # every event is still there, read across the scaling
    assert len(ok(store, "read", "iot/sensors").stdout.splitlines()) == 20


def test_merge_with_epoch_ids_and_ranges_copied_from_info(tmp_path):
    """A 3-segment stream has boundaries 1/3 and 2/3, which `info` prints as 0.3333 and
    0.6667: ranges written that way (or as fractions) mean those exact boundaries."""
    store = tmp_path / "s"
    ok(store, "create-stream", "iot/sensors", "--segments", "3")
    assert "[0.3333, 0.6667)" in ok(store, "info", "iot/sensors").stdout
    out = ok(store, "scale", "iot/sensors", "--seal", "1", "--ranges", "0.3333-0.5,0.5-0.6667")
    assert out.stdout.split() == ["3#1", "4#1"]
    err = fails(store, 1, "scale", "iot/sensors", "--seal", "3#1,4#1,2", "--ranges", "1/3-1")
    assert "2 segments would be fewer than the policy's min_segments (3)" in err  # fixed(3)
    ok(store, "update-stream", "iot/sensors", "--event-rate", "1000000")  # min_segments 1
    out = ok(store, "scale", "iot/sensors", "--seal", "3#1,4#1,2", "--ranges", "1/3-1")
    assert out.stdout.split() == ["5#2"]
    out = ok(store, "scale", "iot/sensors", "--seal", "0,5#2", "--ranges", " 0 - 1 ")
    assert out.stdout.split() == ["6#3"]
    info = stream_info(store)
    assert [e.segment_count for e in info.history] == [3, 4, 2, 1]
    assert [(s.key_low, s.key_high) for s in info.current_segments] == [(0.0, 1.0)]
    by_id = {s.segment_id: s for s in info.segments}
    assert (by_id[3 | 1 << 32].key_low, by_id[4 | 1 << 32].key_high) == (1 / 3, 2 / 3)
    assert [ln[2] for ln in epoch_lines(ok(store, "history", "iot/sensors").stdout)] == ["3", "4", "2", "1"]


def test_scale_bad_input_fails_cleanly_and_changes_nothing(store):
    ok(store, "scale", "iot/sensors", "--seal", "0", "--ranges", "0-0.25,0.25-0.5")
    before = stream_info(store).history
    err = fails(store, 2, "scale", "iot/sensors", "--seal", "x", "--ranges", "0-1")
    assert "argument --seal: bad segment id 'x': expected NUMBER or NUMBER#EPOCH" in err
    assert "bad segment id '1#'" in fails(store, 2, "scale", "iot/sensors", "--seal", "1#", "--ranges", "0-1")
    assert "bad segment id '99999999999'" in fails(store, 2, "scale", "iot/sensors", "--seal", "99999999999",
                                                   "--ranges", "0-1")
    err = fails(store, 2, "scale", "iot/sensors", "--seal", "1", "--ranges", "0.5")
    assert "argument --ranges: bad key range '0.5': expected LO-HI" in err
    assert "bad key range '1/0-1'" in fails(store, 2, "scale", "iot/sensors", "--seal", "1", "--ranges", "1/0-1")
    assert "--ranges" in fails(store, 2, "scale", "iot/sensors", "--seal", "1")
    err = fails(store, 1, "scale", "iot/sensors", "--seal", "7#1", "--ranges", "0-1")
    assert "segment 7#1 does not exist; the open segments are 1, 2#1, 3#1" in err
    err = fails(store, 1, "scale", "iot/sensors", "--seal", "0", "--ranges", "0-0.5")
    assert "segment 0 was scaled away; the open segments are 1, 2#1, 3#1" in err
    err = fails(store, 1, "scale", "iot/sensors", "--seal", "1", "--ranges", "0.5-0.75")
    assert "do not cover exactly the sealed segments' key ranges" in err
    err = fails(store, 1, "scale", "iot/sensors", "--seal", "1", "--ranges", "0.5-0.8,0.7-1")
    assert "overlap" in err
    err = fails(store, 1, "scale", "iot/sensors", "--seal", "2#1,1", "--ranges", "0-0.25,0.5-0.75")
    assert "do not cover exactly" in err
    assert "iot/zzz" in fails(store, 1, "scale", "iot/zzz", "--seal", "0", "--ranges", "0-1")
    assert stream_info(store).history == before
    ok(store, "seal", "iot/sensors")
    assert "sealed" in fails(store, 1, "scale", "iot/sensors", "--seal", "1", "--ranges", "0.5-1")
    assert stream_info(store).history == before


def test_update_stream_policies_keep_what_is_not_given(store):
    out = ok(store, "update-stream", "iot/sensors", "--fixed", "4")
    assert "scaling fixed(4), retention none; 4 segment(s) in epoch 1" in out.stderr
    info = stream_info(store)
    assert [e.segment_count for e in info.history] == [2, 4]
    assert [(s.key_low, s.key_high) for s in info.current_segments] == [
        (0.0, 0.25), (0.25, 0.5), (0.5, 0.75), (0.75, 1.0)]
    ok(store, "update-stream", "iot/sensors", "--retention-days", "2")
    config = stream_info(store).config
    assert config.scaling == pe.ScalingPolicy.fixed(4)
    assert config.retention == pe.RetentionPolicy.by_time(days=2)
    out = ok(store, "update-stream", "iot/sensors", "--event-rate", "50", "--scale-factor", "3", "--min-segments", "2")
    assert "by_event_rate(50 events/s, scale_factor=3, min_segments=2), retention by_time(2 days)" in out.stderr
    config = stream_info(store).config
    assert config.scaling == pe.ScalingPolicy.by_event_rate(50, scale_factor=3, min_segments=2)
    assert config.retention == pe.RetentionPolicy.by_time(days=2)
    ok(store, "update-stream", "iot/sensors", "--min-segments", "4")  # only the rate policy's minimum
    assert stream_info(store).config.scaling == pe.ScalingPolicy.by_event_rate(50, scale_factor=3, min_segments=4)
    ok(store, "update-stream", "iot/sensors", "--data-rate", "256", "--retention-bytes", "1000000")
    config = stream_info(store).config
    assert config.scaling == pe.ScalingPolicy.by_data_rate(256, scale_factor=3, min_segments=4)
    assert config.retention == pe.RetentionPolicy.by_size(bytes=1_000_000)
    ok(store, "update-stream", "iot/sensors", "--retention-consumption")
    assert stream_info(store).config == pe.StreamConfiguration(
        scaling=pe.ScalingPolicy.by_data_rate(256, scale_factor=3, min_segments=4),
        retention=pe.RetentionPolicy.by_consumption())
    ok(store, "update-stream", "iot/sensors", "--fixed", "4", "--retention-none")
    assert stream_info(store).config == pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4))
    assert len(stream_info(store).history) == 2  # already 4 equal segments: no new epoch


def test_update_stream_bad_input(store):
    before = stream_info(store)
    assert "nothing to change" in fails(store, 1, "update-stream", "iot/sensors")
    assert "1..1024, got 0" in fails(store, 1, "update-stream", "iot/sensors", "--fixed", "0")
    assert "go with --event-rate or --data-rate" in fails(
        store, 1, "update-stream", "iot/sensors", "--fixed", "2", "--scale-factor", "3")
    assert "need --event-rate or --data-rate" in fails(
        store, 1, "update-stream", "iot/sensors", "--scale-factor", "3")
    assert "target_rate must be a positive number" in fails(
        store, 1, "update-stream", "iot/sensors", "--event-rate", "-1")
    assert "scale_factor" in fails(store, 1, "update-stream", "iot/sensors", "--data-rate", "1", "--scale-factor", "1")
    assert "bytes" in fails(store, 1, "update-stream", "iot/sensors", "--retention-bytes", "-5")
    assert "not allowed with" in fails(store, 2, "update-stream", "iot/sensors", "--fixed", "2", "--event-rate", "5")
    assert "not allowed with" in fails(store, 2, "update-stream", "iot/sensors", "--retention-none",
                                       "--retention-days", "1")
    assert "invalid int value" in fails(store, 2, "update-stream", "iot/sensors", "--fixed", "x")
    assert "iot/zzz" in fails(store, 1, "update-stream", "iot/zzz", "--fixed", "2")
    after = stream_info(store)
    assert (after.config, after.history) == (before.config, before.history)


def test_history_errors(store, tmp_path):
    assert "iot/zzz" in fails(store, 1, "history", "iot/zzz")
    assert "SCOPE/STREAM" in fails(store, 2, "history", "nostream")
    err = fails(store, 1, "history", "iot/sensors", "--svg", str(tmp_path / "no" / "such" / "dir.svg"))
    assert "cannot write" in err and "No such file or directory" in err
    assert "width must be an int >= 160" in fails(store, 1, "history", "iot/sensors", "--svg", "-", "--width", "5")
    assert "width must be an int >= 8" in fails(store, 1, "history", "iot/sensors", "--width", "2")
