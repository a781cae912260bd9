"""History: a stream's scaling history drawn as an SVG picture and as text.

Owns: the two renderings of ``StreamInfo.history`` (the epochs, each with its segments in key
order) behind ``StreamInfo.history_svg()`` / ``history_text()`` and ``pravega-embedded
history``. The picture is Figure 5 of the Pravega launch blog: time to the right, the routing
key space [0, 1) upwards (0 at the bottom), one box per segment from the start of the epoch
that created it to the start of the epoch whose scaling sealed it, or to the right edge ("now")
while it is in the current epoch. In text, one line per epoch with a bar over the key space
(``width=40``)::

    epoch        time  segs  key space [0, 1)
        0         +0s     2  |0                  |1                 |
        1     +0.303s     3  |2#1      |3#1      |1                 |
        2     +0.504s     2  |4#2                |1                 |

(segment 0 was split into 2#1 and 3#1 by the scaling that began epoch 1; they were merged
into 4#2 by the next one). In the picture, segment 1 is one long box over all three epochs.

The x axis (``_epoch_edges``). Epoch ``i`` lasts from its ``time_ns`` to the next epoch's; the
current epoch has no end in a StreamInfo (no snapshot or seal time is recorded), so it lasts
until ``now_ns`` when the caller gives one, else it is drawn as long as the longest earlier
epoch (the whole width when there is only one), and the right edge reads "now". Widths are
proportional to durations when that makes every epoch at least ``MIN_EPOCH_PX`` pixels wide;
otherwise every epoch gets ``MIN_EPOCH_PX`` plus a share of the remaining width proportional to
its duration ("short epochs widened" in the axis title), and when even that does not fit, all
epochs get the same width ("epochs spread evenly"). Tick labels always give the true times, in
seconds since the first epoch (its wall time, UTC, is in the axis title); labels that would
overlap the previous one are left out, the epoch ticks themselves never are.

Invariants:
  1. Deterministic: the output depends only on the arguments (no clock is read; dicts are
     never iterated in an order that depends on hashing), so the same info gives the same
     string.
  2. The SVG is well-formed XML: every piece of text (scope and stream names, labels,
     tooltips) goes through ``html.escape``; numbers are written with fixed precision.
  3. One ``<rect class="segment">`` per entry of ``info.segments`` (including segments scaled
     away), with ``data-segment`` = the formatted id, vertical extent ``[key_low, key_high)``
     and horizontal extent from its first epoch to the first later epoch without it; one
     ``<line class="epoch">`` per epoch after the first, at that epoch's start.
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
from .streamcut import format_segment_id

__all__ = ["history_svg", "history_text", "MIN_EPOCH_PX"]

MIN_EPOCH_PX = 4.0  # the narrowest an epoch is drawn, when the width allows (module docstring)

# Tableau 10: a box's colour is that of the epoch that created it; sealed boxes are paler.
_PALETTE = ("#4e79a7", "#f28e2b", "#59a14f", "#e15759", "#76b7b2",
            "#edc948", "#b07aa1", "#ff9da7", "#9c755f", "#bab0ac")
_FONT_PX = 11.0
_LABEL_PX = 10.0
_MARGIN = {"left": 46.0, "right": 14.0, "top": 24.0, "bottom": 36.0}
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


def history_svg(info: Any, *, width: int = 640, height: int = 240, now_ns: int | None = None) -> str:
    """The scaling history of ``info`` (a StreamInfo) as a self-contained ``<svg>`` element:
    x = time, y = key space [0, 1) with 0 at the bottom, one box per segment labelled with its
    id where it fits, a tooltip (``<title>``) per box with id, key range, length and state, and
    an epoch tick per scaling. ``now_ns`` (wall-clock ns) ends the current epoch; without it
    the current epoch is drawn as long as the longest earlier one (module docstring)."""
    width = _dimension("history_svg width", width, 160)
    height = _dimension("history_svg height", height, 100)
    if now_ns is not None and (isinstance(now_ns, bool) or not isinstance(now_ns, int)):
        raise InvalidConfigurationError(f"history_svg now_ns must be an int, got {now_ns!r}")
    epochs = _epochs(info)
    spans = _spans(info, epochs)
    left, top = _MARGIN["left"], _MARGIN["top"]
    pw = width - left - _MARGIN["right"]
    ph = height - top - _MARGIN["bottom"]
    bottom = top + ph
    edges, mode = _epoch_edges(_durations(epochs, now_ns), left, pw)
    t0 = epochs[0].time_ns
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
        (f'<text class="heading" x="{_n(left)}" y="{_n(top - 8)}" fill="#222222">'
         f'{esc(_fit(heading, width - left - 4))}</text>'),
    ]
    # Boxes, one per segment (invariant 3), in segment id order.
    segs = {s.segment_id: s for s in info.segments}
    for sid in sorted(segs):
        s = segs[sid]
        first, end = spans[sid]
        x, x_end = edges[first], edges[end]
        y = top + (1.0 - s.key_high) * ph
        h = (s.key_high - s.key_low) * ph
        label = format_segment_id(sid)
        in_epochs = (f"epoch {epochs[first].epoch}" if end == first + 1
                     else f"epochs {epochs[first].epoch}-{epochs[end - 1].epoch}")
        state = "sealed" if s.sealed else "open"
        tip = (f"segment {label}: keys [{s.key_low:.4f}, {s.key_high:.4f}), "
               f"{s.length:,} bytes" + (f" (head at {s.head:,})" if s.head else "")
               + f", {state}, {in_epochs}")
        colour = _PALETTE[(sid >> 32) % len(_PALETTE)]
        opacity = "0.85" if end == len(epochs) and not s.sealed else "0.45"
        out.append(
            f'<rect class="segment" data-segment="{esc(label)}" x="{_n(x)}" y="{_n(y)}" '
            f'width="{_n(x_end - x)}" height="{_n(h)}" fill="{colour}" fill-opacity="{opacity}" '
            f'stroke="#ffffff" stroke-width="1"><title>{esc(tip)}</title></rect>'
        )
        if x_end - x >= _text_px(label, _LABEL_PX) + 4 and h >= _LABEL_PX + 3:
            out.append(
                f'<text class="segment-label" x="{_n((x + x_end) / 2)}" y="{_n(y + h / 2 + _LABEL_PX * 0.35)}" '
                f'font-size="{_n(_LABEL_PX)}" text-anchor="middle" fill="#111111" '
                f'pointer-events="none">{esc(label)}</text>'
            )
    # Frame and y axis: key 0 at the bottom, 1 at the top.
    out.append(f'<rect class="frame" x="{_n(left)}" y="{_n(top)}" width="{_n(pw)}" height="{_n(ph)}" '
               f'fill="none" stroke="#444444" stroke-width="1"/>')
    for key in (0.0, 0.5, 1.0):
        y = top + (1.0 - key) * ph
        out.append(f'<line class="key-tick" x1="{_n(left - 4)}" y1="{_n(y)}" x2="{_n(left)}" y2="{_n(y)}" '
                   f'stroke="#444444"/>')
        out.append(f'<text class="key-label" x="{_n(left - 6)}" y="{_n(y + _FONT_PX * 0.35)}" '
                   f'text-anchor="end" fill="#222222">{key:g}</text>')
    mid = top + ph / 2
    out.append(f'<text class="axis-title" x="{_n(12)}" y="{_n(mid)}" text-anchor="middle" '
               f'transform="rotate(-90 {_n(12)} {_n(mid)})" fill="#222222">key</text>')
    # Epoch ticks (one per scaling) and time labels; a label that would overlap the one before
    # it or the right edge's is left out (the tick stays).
    right = (edges[-1], "end", "now" if now_ns is None else _seconds(max(0, now_ns - t0)))
    labels: list[tuple[float, str, str]] = []  # (x, text-anchor, text)
    for i, e in enumerate(epochs):
        x = edges[i]
        if i:
            out.append(f'<line class="epoch" data-epoch="{e.epoch}" x1="{_n(x)}" y1="{_n(top)}" '
                       f'x2="{_n(x)}" y2="{_n(bottom + 4)}" stroke="#444444" stroke-dasharray="3,2"/>')
        label = (x, "start" if i == 0 else "middle", _seconds(e.time_ns - t0))
        lo, hi = _extent(label)
        if (not labels or lo >= _extent(labels[-1])[1] + _LABEL_GAP_PX) and hi + _LABEL_GAP_PX <= _extent(right)[0]:
            labels.append(label)
    for x, anchor, text in labels + [right]:
        out.append(f'<text class="time-label" x="{_n(x)}" y="{_n(bottom + 15)}" text-anchor="{anchor}" '
                   f'fill="#222222">{esc(text)}</text>')
    note = {"time": "", "widened": "; short epochs widened", "index": "; epochs spread evenly"}[mode]
    title = f"time, s since {_wall(t0)}{note}"
    out.append(f'<text class="axis-title" x="{_n(left + pw / 2)}" y="{_n(height - 6)}" text-anchor="middle" '
               f'fill="#222222">{esc(_fit(title, pw + 2 * _MARGIN["right"] - 8))}</text>')
    out.append("</svg>")
    return "\n".join(out)


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
