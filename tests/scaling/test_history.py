"""The scaling-history picture (``StreamInfo.history_svg``) and its text form
(``StreamInfo.history_text``), on real histories built with ``store.scale_stream``: the SVG is
XML with one box per segment whose extents match the key ranges and epochs, coloured by data
rate or size with a legend, labelled ``number#epoch``, with no tick across the plot; every
epoch stays visible, output is deterministic and escaped; the text has one line per epoch."""

from __future__ import annotations

import dataclasses
import re
import xml.etree.ElementTree as ET
from itertools import pairwise

import pytest

import pravega_embedded as pe
from pravega_embedded.history import MIN_EPOCH_PX, amount, history_svg, history_text, load_colour
from pravega_embedded.streamcut import format_segment_id, segment_name

NS = "{http://www.w3.org/2000/svg}"
EPS = 0.011  # coordinates are written with two decimals


@pytest.fixture
def store():
    with pe.open_temporary() as s:
        s.create_scope("iot")
        s.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(2)))
        yield s


def write(store, n: int = 50) -> None:
    with store.create_writer("iot", "sensors") as w:
        for i in range(n):
            w.write_event(b"v%d" % i, routing_key=f"k{i}")
        w.flush()


def split_then_merge(store) -> pe.StreamInfo:
    """Epoch 0: 0 | 1; epoch 1: 0 split into 2#1 [0, .25) and 3#1 [.25, .5); epoch 2: those
    merged into 4#2 [0, .5). Segment 1 [.5, 1) lives through all three."""
    write(store)
    low = store.stream_info("iot", "sensors").current_segments[0]
    new = store.scale_stream("iot", "sensors", seal=[low.segment_id], new_ranges=[(0.0, 0.25), (0.25, 0.5)])
    write(store)
    store.scale_stream("iot", "sensors", seal=new, new_ranges=[(0.0, 0.5)])
    write(store)
    return store.stream_info("iot", "sensors")


def parse(svg: str) -> ET.Element:
    root = ET.fromstring(svg)
    assert root.tag == f"{NS}svg"
    return root


def boxes(root: ET.Element) -> dict[str, dict[str, float]]:
    out = {}
    for r in root.iter(f"{NS}rect"):
        if r.get("class") == "segment":
            assert r.get("data-segment") not in out
            out[r.get("data-segment")] = {k: float(r.get(k)) for k in ("x", "y", "width", "height")}
    return out


def frame(root: ET.Element) -> dict[str, float]:
    [f] = [r for r in root.iter(f"{NS}rect") if r.get("class") == "frame"]
    return {k: float(f.get(k)) for k in ("x", "y", "width", "height")}


def epoch_lines(root: ET.Element) -> dict[int, float]:
    return {int(ln.get("data-epoch")): float(ln.get("x1"))
            for ln in root.iter(f"{NS}line") if ln.get("class") == "epoch"}


def epoch_edges(root: ET.Element) -> list[float]:
    """x of every epoch's start, then the right edge."""
    f = frame(root)
    lines = epoch_lines(root)
    return [f["x"]] + [lines[e] for e in sorted(lines)] + [f["x"] + f["width"]]


def test_one_box_per_segment_with_key_ranges_and_epoch_extents(store):
    info = split_then_merge(store)
    assert [e.segment_count for e in info.history] == [2, 3, 2]
    root = parse(info.history_svg())
    got = boxes(root)
    assert set(got) == {format_segment_id(s.segment_id) for s in info.segments} == {"0", "1", "2#1", "3#1", "4#2"}
    f = frame(root)
    lines = epoch_lines(root)
    assert sorted(lines) == [1, 2]
    assert f["x"] < lines[1] < lines[2] < f["x"] + f["width"]
    epoch_x = {0: f["x"], **lines}
    for s in info.segments:
        b = got[format_segment_id(s.segment_id)]
        # vertical: key 0 at the bottom of the frame, 1 at its top
        assert b["y"] == pytest.approx(f["y"] + (1 - s.key_high) * f["height"], abs=EPS)
        assert b["y"] + b["height"] == pytest.approx(f["y"] + (1 - s.key_low) * f["height"], abs=EPS)
        # horizontal: from the epoch that created it...
        assert b["x"] == pytest.approx(epoch_x[s.segment_id >> 32], abs=EPS)
        # ...to the epoch whose scaling sealed it, or the right edge
        right = b["x"] + b["width"]
        if s.successors:
            assert s.sealed
            assert right == pytest.approx(epoch_x[s.successors[0] >> 32], abs=EPS)
        else:
            assert right == pytest.approx(f["x"] + f["width"], abs=EPS)
    assert got["0"]["x"] + got["0"]["width"] == pytest.approx(lines[1], abs=EPS)
    assert got["2#1"]["x"] + got["2#1"]["width"] == pytest.approx(lines[2], abs=EPS)
    assert got["1"]["width"] == pytest.approx(f["width"], abs=EPS)


def test_tooltips_labels_and_axes(store):
    info = split_then_merge(store)
    root = parse(info.history_svg())
    by_id = {format_segment_id(s.segment_id): s for s in info.segments}
    for r in root.iter(f"{NS}rect"):
        if r.get("class") != "segment":
            continue
        s = by_id[r.get("data-segment")]
        tip = r.find(f"{NS}title").text
        assert tip.startswith(f"segment {segment_name(s.segment_id)}: keys [{s.key_low:.4f}, {s.key_high:.4f})")
        assert f"{s.length:,} bytes" in tip and s.length > 0
        assert ("sealed" if s.sealed else "open") in tip
    labels = {t.text for t in root.iter(f"{NS}text") if t.get("class") == "segment-label"}
    assert labels == {"0#0", "1#0", "2#1", "3#1", "4#2"}  # every box is big enough at 640x240
    times = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "time-label"]
    assert times[0] == "+0s" and times[-1] == "now"
    titles = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "axis-title"]
    assert "key" in titles and any(re.match(r"time, s since \d{4}-\d\d-\d\d \d\d:\d\d:\d\d UTC", t) for t in titles)
    assert "iot/sensors: 3 epochs" in root.find(f"{NS}text[@class='heading']").text


def test_deterministic_and_same_as_the_streaminfo_methods(store):
    info = split_then_merge(store)
    svg = history_svg(info)
    assert svg == history_svg(info) == info.history_svg()
    assert history_svg(info, width=300, height=120) == info.history_svg(width=300, height=120)
    assert history_text(info) == info.history_text() == history_text(info)
    assert svg.startswith("<svg") and svg.endswith("</svg>")
    # more than one epoch: the notebook view shows the picture, its current epoch up to now
    html = info._repr_html_()
    shown = parse(html[html.index("<svg"):html.index("</svg>") + 6])
    assert set(boxes(shown)) == set(boxes(parse(svg)))
    assert [t.text for t in shown.iter(f"{NS}text") if t.get("class") == "time-label"][-1].endswith("(now)")
    store.create_stream("iot", "flat")
    assert "<svg" not in store.stream_info("iot", "flat")._repr_html_()


def test_now_ns_gives_the_current_epoch_its_real_length(store):
    info = split_then_merge(store)
    starts = [e.time_ns for e in info.history]
    past = starts[-1] - starts[0]
    root = parse(history_svg(info, now_ns=starts[-1] + past))  # the current epoch as long as the rest
    edges = epoch_edges(root)
    f = frame(root)
    if all((f["width"] / 2) * (b - a) / past >= MIN_EPOCH_PX for a, b in pairwise(starts)):
        assert edges[-2] == pytest.approx(f["x"] + f["width"] / 2, abs=EPS)
    times = [t.text for t in root.iter(f"{NS}text") if t.get("class") == "time-label"]
    assert times[-1] != "now" and times[-1].startswith("+")


def with_times(info: pe.StreamInfo, times_ns: list[int]) -> pe.StreamInfo:
    assert len(times_ns) == len(info.history)
    return dataclasses.replace(info, history=tuple(
        dataclasses.replace(e, time_ns=t) for e, t in zip(info.history, times_ns)))


def test_very_short_epochs_are_widened_to_stay_visible(store):
    """A long first epoch, then four scalings a nanosecond apart: in time scale those epochs
    would be far under a pixel wide; each gets at least MIN_EPOCH_PX."""
    write(store)
    for _ in range(4):
        seg = store.stream_info("iot", "sensors").current_segments[0]
        mid = (seg.key_low + seg.key_high) / 2
        store.scale_stream("iot", "sensors", seal=[seg.segment_id],
                           new_ranges=[(seg.key_low, mid), (mid, seg.key_high)])
    info = store.stream_info("iot", "sensors")
    t0 = info.history[0].time_ns
    hour = 3600 * 10**9
    info = with_times(info, [t0, t0 + hour, t0 + hour + 1, t0 + hour + 2, t0 + hour + 3])
    svg = history_svg(info)
    root = parse(svg)
    edges = epoch_edges(root)
    widths = [b - a for a, b in pairwise(edges)]
    assert len(widths) == 5 and min(widths) >= MIN_EPOCH_PX - EPS
    assert widths[0] > 100 and widths[-1] > 100  # the long epoch, and the current one drawn as long
    assert "short epochs widened" in svg
    assert len(boxes(root)) == len(info.segments)
    # every box has a positive extent, so none disappears
    assert all(b["width"] > 0 and b["height"] > 0 for b in boxes(root).values())


def test_many_epochs_are_spread_evenly(store):
    store.create_stream("iot", "busy")
    for _ in range(100):
        [seg] = store.stream_info("iot", "busy").current_segments
        a, b = store.scale_stream("iot", "busy", seal=[seg.segment_id], new_ranges=[(0.0, 0.5), (0.5, 1.0)])
        store.scale_stream("iot", "busy", seal=[a, b], new_ranges=[(0.0, 1.0)])
    info = store.stream_info("iot", "busy")
    assert len(info.history) == 201
    svg = history_svg(info)
    root = parse(svg)
    edges = epoch_edges(root)
    widths = [b - a for a, b in pairwise(edges)]
    assert len(widths) == 201
    assert max(widths) - min(widths) < 0.02  # 580 px / 201 epochs: not enough room for 4 px each
    assert "epochs spread evenly" in svg
    assert len(boxes(root)) == len(info.segments) == 301
    assert len(history_text(info).splitlines()) == 1 + 201


def test_epochs_at_the_same_instant_and_a_single_epoch(store):
    write(store)
    seg = store.stream_info("iot", "sensors").current_segments[1]
    store.scale_stream("iot", "sensors", seal=[seg.segment_id], new_ranges=[(0.5, 0.75), (0.75, 1.0)])
    info = store.stream_info("iot", "sensors")
    t0 = info.history[0].time_ns
    root = parse(history_svg(with_times(info, [t0, t0])))  # zero durations: spread by index
    edges = epoch_edges(root)
    assert edges[1] - edges[0] == pytest.approx(edges[2] - edges[1], abs=EPS)
    store.create_stream("iot", "single", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(3)))
    single = store.stream_info("iot", "single")
    root = parse(single.history_svg())
    f = frame(root)
    assert epoch_lines(root) == {}
    assert all(b["x"] == f["x"] and b["width"] == pytest.approx(f["width"], abs=EPS) for b in boxes(root).values())
    assert len(boxes(root)) == 3
    # no history at all (a StreamInfo built by hand): one epoch of the current segments
    bare = dataclasses.replace(single, history=())
    assert len(boxes(parse(history_svg(bare)))) == 3
    assert len(history_text(bare).splitlines()) == 2


def test_sealed_stream_and_small_pictures(store):
    info = split_then_merge(store)
    store.seal_stream("iot", "sensors")
    sealed = store.stream_info("iot", "sensors")
    root = parse(sealed.history_svg(width=160, height=100))
    assert root.find(f"{NS}text[@class='heading']").text.endswith("...")  # cut short to fit
    assert len(boxes(root)) == len(info.segments)
    f = frame(root)
    assert boxes(root)["4#2"]["x"] + boxes(root)["4#2"]["width"] == pytest.approx(f["x"] + f["width"], abs=EPS)
    assert "(sealed)" in sealed.history_svg()


def test_text_is_escaped():
    """Names cannot hold markup, but a StreamInfo built by hand can: it is escaped."""
    with pe.open_temporary() as s:
        s.create_scope("a")
        s.create_stream("a", "b")
        info = dataclasses.replace(s.stream_info("a", "b"), scope="<a&b>", stream='"x"')
    svg = history_svg(info)
    root = parse(svg)
    assert "<a&b>" not in svg and "&lt;a&amp;b&gt;" in svg
    assert root.find(f"{NS}title").text == 'Scaling history of <a&b>/"x"'


def test_bad_sizes_are_rejected(store):
    info = store.stream_info("iot", "sensors")
    for kwargs in ({"width": 10}, {"height": 0}, {"width": 640.0}, {"width": True}):
        with pytest.raises(pe.errors.InvalidConfigurationError):
            history_svg(info, **kwargs)
    with pytest.raises(pe.errors.InvalidConfigurationError):
        history_svg(info, now_ns="soon")
    with pytest.raises(ValueError):
        history_text(info, width=2)


def test_history_text_one_line_per_epoch(store):
    info = split_then_merge(store)
    text = info.history_text()
    header, *lines = text.splitlines()
    assert header.split()[:3] == ["epoch", "time", "segs"]
    assert len(lines) == len(info.history) == 3
    bar_at = header.index("key space")
    for line, e in zip(lines, info.history):
        epoch, offset, count = line.split()[:3]
        assert (int(epoch), int(count)) == (e.epoch, e.segment_count)
        assert re.fullmatch(r"\+[0-9.]+s|\+0s", offset)
        bar = line[bar_at:]
        assert len(bar) == 72 and bar[0] == "|" and bar[-1] == "|"
        assert bar.count("|") == e.segment_count + 1
        assert [p.strip() for p in bar[1:-1].split("|")] == [format_segment_id(s.segment_id) for s in e.segments]
    assert lines[0].split()[1] == "+0s"
    # the key space is drawn to scale: segment 1 [.5, 1) starts half way along every bar
    for line in lines:
        assert line[bar_at + round(0.5 * 71)] == "|"


def test_history_text_narrow_bars_keep_every_segment(store):
    store.create_stream("iot", "wide", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(12)))
    info = store.stream_info("iot", "wide")
    header, line = info.history_text(width=8).splitlines()
    bar = line[header.index("key space"):]
    assert len(bar) == 13 and bar == "|" * 13  # 12 segments need 13 columns: no room for labels
    header, line = info.history_text(width=40).splitlines()
    bar = line[header.index("key space"):]
    assert len(bar) == 40 and bar.count("|") == 13
    assert [p.strip() for p in bar[1:-1].split("|")] == [str(i) for i in range(12)]


def legend(root: ET.Element) -> tuple[str, list[str]]:
    [g] = [g for g in root.iter(f"{NS}g") if g.get("class") == "legend"]
    return g.get("data-by"), [t.text for t in g.iter(f"{NS}text")]


def test_colour_by_data_rate_with_now(store):
    """With ``now_ns`` every box is coloured by its bytes over its lifetime (to now for the
    open ones), on one scale from 0 to the busiest, and the legend names the unit."""
    info = split_then_merge(store)
    starts = [e.time_ns for e in info.history]
    now = starts[-1] + 2 * 10**9
    root = parse(history_svg(info, now_ns=now))
    rects = {r.get("data-segment"): r for r in root.iter(f"{NS}rect") if r.get("class") == "segment"}
    rates = {}
    for s in info.segments:
        sid = format_segment_id(s.segment_id)
        first = info.history.index(next(e for e in info.history if s.segment_id in [x.segment_id for x in e.segments]))
        later = [e.time_ns for e in info.history[first + 1:] if s.segment_id not in [x.segment_id for x in e.segments]]
        rates[sid] = s.length / ((later[0] if later else now) - starts[first]) * 1e9
        assert float(rects[sid].get("data-value")) == pytest.approx(rates[sid], rel=1e-3)
        assert "B/s over " in rects[sid].find(f"{NS}title").text
    top = max(rates.values())
    for sid, rate in rates.items():
        assert rects[sid].get("fill") == load_colour(rate / top)
    by, texts = legend(root)
    assert by == "rate" and texts == ["data rate", "0 B/s", amount(top / 2, "B/s"), amount(top, "B/s")]
    with pytest.raises(pe.errors.InvalidConfigurationError):
        history_svg(info, colour_by="rate")  # no now: the open segments' rates are unknown
    with pytest.raises(pe.errors.InvalidConfigurationError):
        history_svg(info, now_ns=now, colour_by="heat")


def test_colour_by_size_without_now(store):
    info = split_then_merge(store)
    root = parse(history_svg(info))
    top = max(s.length for s in info.segments)
    for r in root.iter(f"{NS}rect"):
        if r.get("class") == "segment":
            s = next(s for s in info.segments if format_segment_id(s.segment_id) == r.get("data-segment"))
            assert r.get("fill") == load_colour(s.length / top)
    assert legend(root) == ("size", ["bytes", "0 B", amount(top / 2), amount(top)])
    assert legend(parse(history_svg(info, now_ns=info.history[-1].time_ns + 10**9, colour_by="size")))[0] == "size"
    # a narrow picture keeps its plot and drops the legend
    assert not [g for g in parse(history_svg(info, width=300, height=120)).iter(f"{NS}g")
                if g.get("class") == "legend"]


def test_scale_and_amounts():
    assert load_colour(0.0) == "#ffffcc" and load_colour(1.0) == "#800026"
    assert load_colour(None) == "#d9d9d9" and load_colour(2.0) == load_colour(1.0)
    assert [amount(v) for v in (0, 512, 1536, 10 * 1024 * 1024, 5 * 2**40)] == \
        ["0 B", "512 B", "1.5 KiB", "10 MiB", "5 TiB"]
    assert amount(123.456, "B/s") == "123 B/s" and amount(12.345, "B/s") == "12.3 B/s"


def test_no_line_crosses_the_plot_and_labels_fit_their_boxes(store):
    """Epoch ticks stand below the plot; a segment's label lies inside its box."""
    info = split_then_merge(store)
    root = parse(history_svg(info, now_ns=info.history[-1].time_ns + 10**9))
    f = frame(root)
    bottom = f["y"] + f["height"]
    for ln in root.iter(f"{NS}line"):
        ys = sorted((float(ln.get("y1")), float(ln.get("y2"))))
        xs = sorted((float(ln.get("x1")), float(ln.get("x2"))))
        inside_x = f["x"] < xs[1] and xs[0] < f["x"] + f["width"]
        inside_y = f["y"] < ys[1] and ys[0] < bottom
        assert not (inside_x and inside_y), ln.attrib
    got = boxes(root)
    by_name = {segment_name(s.segment_id): format_segment_id(s.segment_id) for s in info.segments}
    for t in root.iter(f"{NS}text"):
        if t.get("class") == "segment-label":
            b = got[by_name[t.text]]
            assert b["x"] < float(t.get("x")) < b["x"] + b["width"]
            assert b["y"] < float(t.get("y")) < b["y"] + b["height"]
