"""History: a stream's scaling history drawn as an SVG picture and as text.

Owns: the two renderings of ``StreamInfo.history`` (the epochs, each with its segments in key
order) behind ``StreamInfo.history_svg()`` / ``history_text()`` and ``pravega-embedded
history``. The picture is Figure 5 of the Pravega launch blog: time to the right, the routing
key space [0, 1) upwards (0 at the bottom), one box per segment from the start of the epoch
that created it to the start of the epoch whose scaling sealed it, or to the right edge ("now")
while it is in the current epoch, coloured by its load. In text, one line per epoch with a bar
over the key space (``width=40``)::

    epoch        time  segs  key space [0, 1)
        0         +0s     2  |0                  |1                 |
        1     +0.303s     3  |2#1      |3#1      |1                 |
        2     +0.504s     2  |4#2                |1                 |

(segment 0 was split into 2#1 and 3#1 by the scaling that began epoch 1; they were merged
into 4#2 by the next one). In the picture, segment 1 is one long box over all three epochs.
The picture names segments ``number#epoch`` always (``0#0``, ``1#0``: ``segment_name``); the
text keeps the compact ids the CLI takes (``0``, ``2#1``).

The x axis (``_epoch_edges``). Epoch ``i`` lasts from its ``time_ns`` to the next epoch's; the
current epoch has no end in a StreamInfo (no snapshot or seal time is recorded), so it lasts
until ``now_ns`` when the caller gives one (the notebook view gives the clock), else it is drawn
as long as the longest earlier epoch (the whole width when there is only one), and the right
edge reads "now" (with ``now_ns``: its time and "(now)"). Widths are proportional to durations when that makes every epoch at least
``MIN_EPOCH_PX`` pixels wide; otherwise every epoch gets ``MIN_EPOCH_PX`` plus a share of the
remaining width proportional to its duration ("short epochs widened" in the axis title), and
when even that does not fit, all epochs get the same width ("epochs spread evenly"). Tick
labels always give the true times, in seconds since the first epoch (its wall time, UTC, is in
the axis title); labels that would overlap the previous one are left out, the epoch ticks
themselves never are. Epoch ticks stand below the plot only, so no line crosses a box's label.

The colour (``colour_by``). "rate": a segment's bytes (its length, truncated bytes included)
over its lifetime, from the start of its first epoch to the start of the epoch that sealed it
or ``now_ns`` (needs ``now_ns``; a sealed stream's last segments are measured to ``now_ns``
too, which under-states them). "size": its bytes. The default is "rate" when ``now_ns`` is given,
else "size" (without a time for "now" the rates of the open segments are not known). The scale
is linear from 0 to the largest value, light yellow to dark red (ColorBrewer YlOrRd); a legend
on the right (pictures at least ``LEGEND_MIN_WIDTH`` wide) shows it with units. A segment whose
lifetime is zero has no rate and is grey.

Invariants:
  1. Deterministic: the output depends only on the arguments (no clock is read; dicts are
     never iterated in an order that depends on hashing), so the same info gives the same
     string.
  2. The SVG is well-formed XML: every piece of text (scope and stream names, labels,
     tooltips) goes through ``html.escape``; numbers are written with fixed precision; no
     element ids (many pictures share one notebook page).
  3. One ``<rect class="segment">`` per entry of ``info.segments`` (including segments scaled
     away), with ``data-segment`` = the compact id (``format_segment_id``), ``data-value`` =
     its colour's value, vertical extent ``[key_low, key_high)`` and horizontal extent from its
     first epoch to the first later epoch without it; its label and tooltip use
     ``segment_name``; one ``<line class="epoch">`` per epoch after the first, at that epoch's
     start, below the plot.
  4. ``history_text`` gives a header line, then one line per epoch in order, each with a key
     bar of exactly ``width`` characters (wider only when an epoch has more segments than
     ``width - 1``, so that every segment keeps a column of its own).

Thread-safety: pure functions over an immutable StreamInfo; safe from any thread.
"""

from __future__ import annotations

import html
from datetime import datetime, timezone
from itertools import pairwise
from typing import Any, NamedTuple, Sequence

from .errors import InvalidConfigurationError
from .streamcut import format_segment_id, segment_name

__all__ = ["history_svg", "history_text", "segment_loads", "SegmentLoads", "MIN_EPOCH_PX",
           "LEGEND_MIN_WIDTH", "load_colour", "ink", "amount"]

MIN_EPOCH_PX = 4.0  # the narrowest an epoch is drawn, when the width allows (module docstring)
LEGEND_MIN_WIDTH = 360  # narrower pictures have no legend (the tooltips still give the values)

# ColorBrewer YlOrRd, 9 classes: the colour scale from 0 to the largest value.
_SCALE = ("#ffffcc", "#ffeda0", "#fed976", "#feb24c", "#fd8d3c",
          "#fc4e2a", "#e31a1c", "#bd0026", "#800026")
_NO_VALUE = "#d9d9d9"
_FONT_PX = 11.0
_LABEL_PX = 10.0
_MARGIN = {"left": 46.0, "right": 14.0, "top": 24.0, "bottom": 36.0}
_LEGEND_PX = 92.0  # the right margin's extra width for the legend
_LEGEND_STEPS = 32
_LABEL_GAP_PX = 6.0  # the least room between two time labels


def _text_px(text: str, size: float = _FONT_PX) -> float:
    """A generous estimate of the width of ``text`` in the sans-serif font (digits are ~0.64 em)."""
    return len(text) * size * 0.64


def _extent(label: tuple[float, str, str]) -> tuple[float, float]:
    """(left, right) x of a time label (x, text-anchor, text)."""
    x, anchor, text = label
    w = _text_px(text)
    return {"start": (x, x + w), "middle": (x - w / 2, x + w / 2), "end": (x - w, x)}[anchor]


def _fit(text: str, px: float, size: float = _FONT_PX) -> str:
    """``text``, cut short with "..." if it would be wider than ``px``."""
    if _text_px(text, size) <= px:
        return text
    keep = max(0, int(px / (size * 0.64)) - 3)
    return text[:keep] + "..."


def _rgb(hex_colour: str) -> tuple[int, int, int]:
    return int(hex_colour[1:3], 16), int(hex_colour[3:5], 16), int(hex_colour[5:7], 16)


def load_colour(t: float | None) -> str:
    """The colour of ``t`` in [0, 1] on the picture's scale (None: grey, no value)."""
    if t is None:
        return _NO_VALUE
    pos = min(1.0, max(0.0, t)) * (len(_SCALE) - 1)
    i = min(int(pos), len(_SCALE) - 2)
    a, b, f = _rgb(_SCALE[i]), _rgb(_SCALE[i + 1]), pos - i
    return "#" + "".join(f"{round(x + (y - x) * f):02x}" for x, y in zip(a, b))


def ink(fill: str) -> str:
    """Text colour readable on ``fill``: near-black on light colours, white on dark ones."""
    r, g, b = _rgb(fill)
    return "#111111" if 0.299 * r + 0.587 * g + 0.114 * b > 140 else "#ffffff"


def amount(value: float, unit: str = "B") -> str:
    """``value`` bytes (or bytes/s with ``unit="B/s"``) in binary prefixes: ``0 B``, ``512 B``,
    ``1.5 KiB``, ``12.3 MiB/s`` (three significant digits, trailing zeros dropped)."""
    prefix = ""
    for p in ("Ki", "Mi", "Gi", "Ti"):
        if abs(value) < 1024:
            break
        value, prefix = value / 1024, p
    if value == 0:
        num = "0"
    else:
        num = f"{value:.0f}" if abs(value) >= 100 else f"{value:.{1 if abs(value) >= 10 else 2}f}"
        num = num.rstrip("0").rstrip(".") if "." in num else num
    return f"{num} {prefix}{unit}"


class _Epoch(NamedTuple):
    epoch: int
    time_ns: int
    segments: tuple[tuple[int, float, float], ...]  # (segment id, low, high) in key order


def _epochs(info: Any) -> list[_Epoch]:
    """The info's epochs; a StreamInfo without history is one epoch of its current segments."""
    if info.history:
        return [_Epoch(e.epoch, e.time_ns, tuple((s.segment_id, s.key_low, s.key_high) for s in e.segments))
                for e in info.history]
    current = sorted((s for s in info.segments if not s.successors), key=lambda s: s.key_low)
    return [_Epoch(0, info.created_ns, tuple((s.segment_id, s.key_low, s.key_high) for s in current))]


def _spans(info: Any, epochs: list[_Epoch]) -> dict[int, tuple[int, int]]:
    """segment id -> (index of its first epoch, index of the first later epoch without it, or
    ``len(epochs)`` when it is in the last one)."""
    members = [{sid for sid, _, _ in e.segments} for e in epochs]
    index_of = {e.epoch: i for i, e in enumerate(epochs)}
    out = {}
    for s in info.segments:
        sid = s.segment_id
        first = next((i for i, m in enumerate(members) if sid in m), None)
        if first is None:  # not listed in any epoch (not expected): place it by its id
            first = index_of.get(sid >> 32, 0)
            end = min((index_of[t >> 32] for t in s.successors if (t >> 32) in index_of),
                      default=len(epochs))
            out[sid] = (first, max(end, first + 1))
            continue
        end = next((i for i in range(first + 1, len(epochs)) if sid not in members[i]), len(epochs))
        out[sid] = (first, end)
    return out


def _durations(epochs: list[_Epoch], now_ns: int | None) -> list[int]:
    starts = [e.time_ns for e in epochs]
    past = [max(0, b - a) for a, b in pairwise(starts)]
    if now_ns is not None:
        last = max(0, now_ns - starts[-1])
    else:
        last = max(past, default=1)
    return past + [last]


def _epoch_edges(durations: Sequence[int], x0: float, width: float) -> tuple[list[float], str]:
    """x of every epoch's start plus the right edge, and the layout used ("time", "widened",
    "index"; see the module docstring)."""
    n = len(durations)
    total = sum(durations)
    if total > 0 and all(width * d / total >= MIN_EPOCH_PX for d in durations):
        widths, mode = [width * d / total for d in durations], "time"
    elif total > 0 and n * MIN_EPOCH_PX <= width:
        spare = width - n * MIN_EPOCH_PX
        widths, mode = [MIN_EPOCH_PX + spare * d / total for d in durations], "widened"
    else:
        widths, mode = [width / n] * n, "index"
    edges = [x0]
    for w in widths:
        edges.append(edges[-1] + w)
    edges[-1] = x0 + width  # no rounding drift at the right edge
    return edges, mode


def _seconds(ns: int) -> str:
    """A time offset: ``+0s``, ``+0.012s``, ``+12.5s``, ``+3h02m``."""
    s = ns / 1e9
    if s == 0:
        return "+0s"
    if s < 10:
        return f"+{s:.3f}".rstrip("0").rstrip(".") + "s"
    if s < 3600:
        return f"+{s:.1f}".rstrip("0").rstrip(".") + "s"
    h, rest = divmod(int(s), 3600)
    return f"+{h}h{rest // 60:02d}m"


def _wall(ns: int) -> str:
    return datetime.fromtimestamp(ns / 1e9, tz=timezone.utc).strftime("%Y-%m-%d %H:%M:%S UTC")


def _n(x: float) -> str:
    return f"{x:.2f}"


def _dimension(what: str, value: Any, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise InvalidConfigurationError(f"{what} must be an int >= {low}, got {value!r}")
    return value


class SegmentLoads(NamedTuple):
    """Every segment's load as the picture colours it (``segment_loads``)."""

    by: str  # "rate" (bytes/s) or "size" (bytes)
    values: dict[int, float | None]  # segment id -> value (None: a rate over no time)
    lifetimes: dict[int, int]  # segment id -> ns from its first epoch to its end (or now)
    top: float  # the largest value (the scale's end; 0 when every value is 0)
    epochs: dict[int, tuple[int, int | None]]  # segment id -> (first epoch, last one; None: current)

    @property
    def unit(self) -> str:
        return "B/s" if self.by == "rate" else "B"

    def t(self, sid: int) -> float | None:
        v = self.values[sid]
        return None if v is None else (v / self.top if self.top > 0 else 0.0)


def segment_loads(info: Any, now_ns: int | None = None, colour_by: str | None = None) -> SegmentLoads:
    """Every segment's value on the picture's colour scale and its epochs (module docstring,
    "The colour"), for tables beside the picture."""
    epochs = _epochs(info)
    return _load(info, epochs, _spans(info, epochs), now_ns, colour_by)


def _load(info: Any, epochs: list[_Epoch], spans: dict[int, tuple[int, int]], now_ns: int | None,
          by: str | None) -> SegmentLoads:
    """Every segment's value on the colour scale (module docstring, "The colour")."""
    by = by if by is not None else ("rate" if now_ns is not None else "size")
    if by not in ("rate", "size"):
        raise InvalidConfigurationError(f"history_svg colour_by must be 'rate' or 'size', got {by!r}")
    if by == "rate" and now_ns is None:
        raise InvalidConfigurationError("history_svg colour_by='rate' needs now_ns (when is now?)")
    values: dict[int, float | None] = {}
    lifetimes: dict[int, int] = {}
    lived: dict[int, tuple[int, int | None]] = {}
    for s in info.segments:
        first, end = spans[s.segment_id]
        lived[s.segment_id] = (epochs[first].epoch, epochs[end - 1].epoch if end < len(epochs) else None)
        stop = epochs[end].time_ns if end < len(epochs) else (now_ns or epochs[-1].time_ns)
        life = max(0, stop - epochs[first].time_ns)
        lifetimes[s.segment_id] = life
        if by == "size":
            values[s.segment_id] = float(s.length)
        else:
            values[s.segment_id] = s.length / (life / 1e9) if life > 0 else None
    top = max((v for v in values.values() if v is not None), default=0.0)
    return SegmentLoads(by, values, lifetimes, top, lived)


class _Frame(NamedTuple):
    """Where things go: the plot's box, the epochs' x edges, and the legend's x (None: none)."""

    width: int
    height: int
    left: float
    top: float
    pw: float
    ph: float
    edges: list[float]
    mode: str
    legend_x: float | None

    @property
    def bottom(self) -> float:
        return self.top + self.ph


def _frame(width: int, height: int, durations: list[int]) -> _Frame:
    legend = width >= LEGEND_MIN_WIDTH
    left, top = _MARGIN["left"], _MARGIN["top"]
    pw = width - left - _MARGIN["right"] - (_LEGEND_PX if legend else 0.0)
    ph = height - top - _MARGIN["bottom"]
    edges, mode = _epoch_edges(durations, left, pw)
    return _Frame(width, height, left, top, pw, ph, edges, mode, left + pw + 14.0 if legend else None)


def history_svg(info: Any, *, width: int = 640, height: int = 240, now_ns: int | None = None,
                colour_by: str | None = None) -> str:
    """The scaling history of ``info`` (a StreamInfo) as a self-contained ``<svg>`` element:
    x = time, y = key space [0, 1) with 0 at the bottom, one box per segment coloured by its
    data rate or size (``colour_by``: "rate", "size"; default "rate" with ``now_ns``, else
    "size") with a legend, labelled ``number#epoch`` where it fits, a tooltip (``<title>``) per
    box with name, key range, bytes, events, rate and state, and an epoch tick per scaling.
    ``now_ns`` (wall-clock ns) ends the current epoch; without it the current epoch is drawn as
    long as the longest earlier one (module docstring)."""
    width = _dimension("history_svg width", width, 160)
    height = _dimension("history_svg height", height, 100)
    if now_ns is not None and (isinstance(now_ns, bool) or not isinstance(now_ns, int)):
        raise InvalidConfigurationError(f"history_svg now_ns must be an int, got {now_ns!r}")
    epochs = _epochs(info)
    spans = _spans(info, epochs)
    load = _load(info, epochs, spans, now_ns, colour_by)
    f = _frame(width, height, _durations(epochs, now_ns))
    esc = html.escape
    name = f"{info.scope}/{info.stream}"
    n_open = len(epochs[-1].segments)
    heading = (f"{name}: {len(epochs)} epoch{'s' if len(epochs) != 1 else ''}, "
               f"{n_open} segment{'s' if n_open != 1 else ''} in epoch {epochs[-1].epoch}"
               f"{' (sealed)' if info.sealed else ''}")
    out = [
        (f'<svg xmlns="http://www.w3.org/2000/svg" class="pe-history" width="{width}" height="{height}" '
         f'viewBox="0 0 {width} {height}" font-family="sans-serif" font-size="{_n(_FONT_PX)}">'),
        f"<title>{esc(f'Scaling history of {name}')}</title>",
        f'<rect class="background" x="0" y="0" width="{width}" height="{height}" fill="#ffffff"/>',
        (f'<text class="heading" x="{_n(f.left)}" y="{_n(f.top - 8)}" fill="#222222">'
         f'{esc(_fit(heading, f.pw - 4))}</text>'),
    ]
    out += _boxes(info, epochs, spans, load, f)
    out += _axes(epochs, now_ns, f)
    if f.legend_x is not None:
        out += _legend(load, f)
    out.append("</svg>")
    return "\n".join(out)


def _boxes(info: Any, epochs: list[_Epoch], spans: dict[int, tuple[int, int]], load: SegmentLoads,
           f: _Frame) -> list[str]:
    """One box per segment (invariant 3), in segment id order, each with its label if it fits."""
    esc = html.escape
    out = []
    for s in sorted(info.segments, key=lambda s: s.segment_id):
        sid = s.segment_id
        first, end = spans[sid]
        x, x_end = f.edges[first], f.edges[end]
        y = f.top + (1.0 - s.key_high) * f.ph
        h = (s.key_high - s.key_low) * f.ph
        label = segment_name(sid)
        fill = load_colour(load.t(sid))
        value = load.values[sid]
        out.append(
            f'<rect class="segment" data-segment="{esc(format_segment_id(sid))}" '
            f'data-value="{"" if value is None else f"{value:.3f}"}" x="{_n(x)}" y="{_n(y)}" '
            f'width="{_n(x_end - x)}" height="{_n(h)}" fill="{fill}" stroke="#9a9a9a" '
            f'stroke-width="0.75"><title>{esc(_tooltip(s, epochs, first, end, load))}</title></rect>'
        )
        if x_end - x >= _text_px(label, _LABEL_PX) + 4 and h >= _LABEL_PX + 1:
            out.append(
                f'<text class="segment-label" x="{_n((x + x_end) / 2)}" y="{_n(y + h / 2 + _LABEL_PX * 0.35)}" '
                f'font-size="{_n(_LABEL_PX)}" text-anchor="middle" fill="{ink(fill)}" '
                f'pointer-events="none">{esc(label)}</text>'
            )
    # the frame around the plot, drawn over the boxes' edges
    out.append(f'<rect class="frame" x="{_n(f.left)}" y="{_n(f.top)}" width="{_n(f.pw)}" '
               f'height="{_n(f.ph)}" fill="none" stroke="#444444" stroke-width="1"/>')
    return out


def _tooltip(s: Any, epochs: list[_Epoch], first: int, end: int, load: SegmentLoads) -> str:
    in_epochs = (f"epoch {epochs[first].epoch}" if end == first + 1
                 else f"epochs {epochs[first].epoch}-{epochs[end - 1].epoch}")
    events = "" if getattr(s, "events", None) is None else f", {s.events:,} events"
    value = load.values[s.segment_id]
    life = _seconds(load.lifetimes[s.segment_id]).lstrip("+")
    rate = ("" if load.by != "rate" else
            f", {'no rate' if value is None else amount(value, 'B/s')} over {life}")
    return (f"segment {segment_name(s.segment_id)}: keys [{s.key_low:.4f}, {s.key_high:.4f}), "
            f"{s.length:,} bytes" + (f" (head at {s.head:,})" if s.head else "") + events + rate
            + f", {'sealed' if s.sealed else 'open'}, {in_epochs}")


def _axes(epochs: list[_Epoch], now_ns: int | None, f: _Frame) -> list[str]:
    """The key axis on the left, and below the plot the epoch ticks (one per scaling, never
    across a box), the time labels (one that would overlap the one before it or the right
    edge's is left out; its tick stays) and the axis title."""
    esc = html.escape
    out = []
    for key in (0.0, 0.5, 1.0):
        y = f.top + (1.0 - key) * f.ph
        out.append(f'<line class="key-tick" x1="{_n(f.left - 4)}" y1="{_n(y)}" x2="{_n(f.left)}" y2="{_n(y)}" '
                   f'stroke="#444444"/>')
        out.append(f'<text class="key-label" x="{_n(f.left - 6)}" y="{_n(y + _FONT_PX * 0.35)}" '
                   f'text-anchor="end" fill="#222222">{key:g}</text>')
    mid = f.top + f.ph / 2
    out.append(f'<text class="axis-title" x="{_n(12)}" y="{_n(mid)}" text-anchor="middle" '
               f'transform="rotate(-90 {_n(12)} {_n(mid)})" fill="#222222">key</text>')
    t0 = epochs[0].time_ns
    right = (f.edges[-1], "end", "now" if now_ns is None else f"{_seconds(max(0, now_ns - t0))} (now)")
    labels: list[tuple[float, str, str]] = []  # (x, text-anchor, text)
    for i, e in enumerate(epochs):
        x = f.edges[i]
        if i:
            out.append(f'<line class="epoch" data-epoch="{e.epoch}" x1="{_n(x)}" y1="{_n(f.bottom)}" '
                       f'x2="{_n(x)}" y2="{_n(f.bottom + 5)}" stroke="#444444"/>')
        label = (x, "start" if i == 0 else "middle", _seconds(e.time_ns - t0))
        lo, hi = _extent(label)
        if (not labels or lo >= _extent(labels[-1])[1] + _LABEL_GAP_PX) and hi + _LABEL_GAP_PX <= _extent(right)[0]:
            labels.append(label)
    for x, anchor, text in labels + [right]:
        out.append(f'<text class="time-label" x="{_n(x)}" y="{_n(f.bottom + 16)}" text-anchor="{anchor}" '
                   f'fill="#222222">{esc(text)}</text>')
    note = {"time": "", "widened": "; short epochs widened", "index": "; epochs spread evenly"}[f.mode]
    title = f"time, s since {_wall(t0)}{note}"
    room = f.width - f.left - _MARGIN["right"] - 8
    out.append(f'<text class="axis-title" x="{_n(f.left + f.pw / 2)}" y="{_n(f.height - 6)}" '
               f'text-anchor="middle" fill="#222222">{esc(_fit(title, min(room, f.pw + 2 * _MARGIN["right"] - 8)))}</text>')
    return out


def _legend(load: SegmentLoads, f: _Frame) -> list[str]:
    """The colour scale on the right: a bar from 0 (bottom) to the largest value (top), three
    labelled values with units, and its title above it."""
    x = f.legend_x
    assert x is not None
    step = f.ph / _LEGEND_STEPS
    out = [f'<g class="legend" data-by="{load.by}">',
           (f'<text class="legend-title" x="{_n(x)}" y="{_n(f.top - 8)}" fill="#222222">'
            f'{"data rate" if load.by == "rate" else "bytes"}</text>')]
    for i in range(_LEGEND_STEPS):  # bottom up; each step a little taller, so no seams show
        y = f.bottom - (i + 1) * step
        out.append(f'<rect x="{_n(x)}" y="{_n(y)}" width="12" height="{_n(step + 0.5)}" '
                   f'fill="{load_colour((i + 0.5) / _LEGEND_STEPS)}"/>')
    out.append(f'<rect x="{_n(x)}" y="{_n(f.top)}" width="12" height="{_n(f.ph)}" fill="none" '
               f'stroke="#444444" stroke-width="0.5"/>')
    for frac in (0.0, 0.5, 1.0) if load.top > 0 else (0.0,):  # all zero: one label, "0"
        y = f.bottom - frac * f.ph
        out.append(f'<line x1="{_n(x + 12)}" y1="{_n(y)}" x2="{_n(x + 15)}" y2="{_n(y)}" stroke="#444444"/>')
        out.append(f'<text class="legend-label" x="{_n(x + 18)}" y="{_n(y + _FONT_PX * 0.35)}" '
                   f'fill="#222222">{html.escape(amount(frac * load.top, load.unit))}</text>')
    out.append("</g>")
    return out


def _boundaries(lows: Sequence[float], bar: int) -> list[int]:
    """Columns of the ``|`` before each segment and after the last one: strictly increasing,
    first 0 and last ``bar - 1`` (needs ``bar >= len(lows) + 1``)."""
    n = len(lows)
    cols = [round(k * (bar - 1)) for k in lows] + [bar - 1]
    cols[0] = 0
    for i in range(1, n + 1):  # every segment at least one column wide...
        cols[i] = max(cols[i], cols[i - 1] + 1)
    cols[n] = bar - 1
    for i in range(n - 1, -1, -1):  # ...without running past the right end
        cols[i] = min(cols[i], cols[i + 1] - 1)
    return cols


def _bar(segments: Sequence[tuple[int, float, float]], width: int) -> str:
    bar = max(width, len(segments) + 1)
    cols = _boundaries([lo for _, lo, _ in segments], bar)
    chars = [" "] * bar
    for c in cols:
        chars[c] = "|"
    for (sid, _, _), a, b in zip(segments, cols, cols[1:]):
        room = b - a - 1
        for label in (format_segment_id(sid), str(sid & 0xFFFFFFFF)):
            if len(label) <= room:
                chars[a + 1:a + 1 + len(label)] = label
                break
    return "".join(chars)


def history_text(info: Any, *, width: int = 72) -> str:
    """The scaling history of ``info`` as text: a header, then one line per epoch with the
    epoch number, its start in seconds since the first epoch, its segment count and a bar of
    ``width`` characters showing how its segments partition the key space (0 on the left),
    each labelled with its id where it fits (else its number, else blank). With ``width=40``::

        epoch        time  segs  key space [0, 1)
            0         +0s     2  |0                  |1                 |
            1     +0.303s     3  |2#1      |3#1      |1                 |
    """
    width = _dimension("history_text width", width, 8)
    epochs = _epochs(info)
    t0 = epochs[0].time_ns
    lines = [f"{'epoch':>5}  {'time':>10}  {'segs':>4}  key space [0, 1)"]
    for e in epochs:
        lines.append(f"{e.epoch:>5}  {_seconds(e.time_ns - t0):>10}  {len(e.segments):>4}  "
                     f"{_bar(e.segments, width)}")
    return "\n".join(lines)
