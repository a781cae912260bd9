"""``pravega-embedded history | scale | update-stream``: a stream's scaling history (text or
SVG), manual scaling, and changing a stream's scaling and retention policies.

Owns: the scaling subcommands (parsing and output); ``cli.main`` adds them to its parser and calls
:func:`run` with the open store for the commands in :data:`COMMANDS`. Uses only the public API.

Segment ids are written as in StreamCut text and ``info``: ``NUMBER`` or ``NUMBER#EPOCH``. Key
ranges are ``LO-HI`` with decimal or fraction endpoints (``0.25-0.5``, ``1/3-2/3``); an endpoint
within 0.00005 of a boundary of a sealed segment (``info`` prints 4 decimals) means exactly that
boundary, so ranges copied from ``info`` match the stream's own floats.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import re
import sys
from fractions import Fraction
from typing import Any

from .. import errors
from ..config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from ..store import Store
from ..streamcut import format_segment_id
from .common import describe_retention, describe_scaling, note, out, segment_ids_arg, stream_arg

__all__ = ["COMMANDS", "add_parser", "run"]

COMMANDS = frozenset({"history", "scale", "update-stream"})

_NUMBER = r"(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][-+]?[0-9]+)?(?:/[0-9]+)?"
_RANGE = re.compile(rf"\s*({_NUMBER})\s*-\s*({_NUMBER})\s*")
_SNAP = 5e-5  # half of the last decimal `info` prints


def _key_ranges(text: str) -> list[tuple[float, float]]:
    """``LO-HI[,LO-HI..]`` -> key ranges (endpoints are decimals or fractions)."""
    out = []
    for part in text.split(","):
        m = _RANGE.fullmatch(part)
        try:
            if m is None:
                raise ValueError
            out.append((float(Fraction(m.group(1))), float(Fraction(m.group(2)))))
        except (ValueError, ZeroDivisionError, OverflowError):
            raise argparse.ArgumentTypeError(
                f"bad key range {part.strip()!r}: expected LO-HI, e.g. 0.25-0.5 or 1/3-2/3") from None
    return out


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``history``, ``scale`` and ``update-stream`` to the CLI's subparsers."""
    s = sub.add_parser("history", parents=parents, help="a stream's scaling history: one line per epoch, or an SVG picture")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--svg", metavar="FILE", help="write the history as an SVG picture to FILE ('-': stdout)")
    s.add_argument("--width", type=int, metavar="N",
                   help="key-space bar width in characters (default 72); with --svg: pixels (default 640)")
    s.add_argument("--height", type=int, default=240, metavar="PX", help="with --svg: pixels (default 240)")
    s = sub.add_parser("scale", parents=parents, help="seal segments and create successors owning the given key ranges")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--seal", type=segment_ids_arg, required=True, metavar="ID[,ID..]",
                   help="open segments to seal, e.g. 0 or 2#1,3#1")
    s.add_argument("--ranges", type=_key_ranges, required=True, metavar="LO-HI[,LO-HI..]",
                   help="key ranges of the new segments; together exactly the sealed ones' ranges")
    s = sub.add_parser("update-stream", parents=parents, help="change a stream's scaling and/or retention policy")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    scaling = s.add_mutually_exclusive_group()
    scaling.add_argument("--fixed", type=int, metavar="N", help="ScalingPolicy.fixed(N): rescale to N equal segments")
    scaling.add_argument("--event-rate", type=float, metavar="R",
                         help="ScalingPolicy.by_event_rate: split segments over R events/s")
    scaling.add_argument("--data-rate", type=float, metavar="KIB",
                         help="ScalingPolicy.by_data_rate: split segments over KIB KiB/s")
    s.add_argument("--scale-factor", type=int, metavar="F", help="with a rate policy: successors per split (default 2)")
    s.add_argument("--min-segments", type=int, metavar="M", help="with a rate policy: at least M segments (default 1)")
    retention = s.add_mutually_exclusive_group()
    retention.add_argument("--retention-none", action="store_true", help="RetentionPolicy.none(): keep everything")
    retention.add_argument("--retention-days", type=float, metavar="D", help="RetentionPolicy.by_time(days=D)")
    retention.add_argument("--retention-bytes", type=int, metavar="B", help="RetentionPolicy.by_size(bytes=B)")
    retention.add_argument("--retention-consumption", action="store_true",
                           help="RetentionPolicy.by_consumption(): truncate at the slowest subscribed reader group")


def _history(store: Store, scope: str, stream: str, args: argparse.Namespace) -> int:
    info = store.stream_info(scope, stream)
    if args.svg is None:
        out(info.history_text(width=72 if args.width is None else args.width))
        return 0
    svg = info.history_svg(width=640 if args.width is None else args.width, height=args.height)
    if args.svg == "-":
        out(svg)
        return 0
    try:
        with open(args.svg, "w", encoding="utf-8") as f:
            f.write(svg + "\n")
    except OSError as exc:
        print(f"pravega-embedded: error: cannot write {args.svg}: {exc.strerror or exc}", file=sys.stderr)
        return 1
    note(f"wrote the history of {scope}/{stream} ({len(info.history)} epochs) to {args.svg}")
    return 0


def _snap(ranges: list[tuple[float, float]], bounds: set[float]) -> list[tuple[float, float]]:
    """Endpoints within _SNAP of a sealed segment's boundary become that boundary."""
    def snap(x: float) -> float:
        near = min(bounds, key=lambda b: (abs(b - x), b), default=x)
        return near if abs(near - x) <= _SNAP else x
    return [(snap(lo), snap(hi)) for lo, hi in ranges]


def _scale(store: Store, scope: str, stream: str, args: argparse.Namespace) -> int:
    info = store.stream_info(scope, stream)
    current = {s.segment_id: s for s in info.current_segments}
    every = {s.segment_id: s for s in info.segments}
    open_ids = ", ".join(format_segment_id(s) for s in sorted(current))
    for sid in args.seal:
        if sid in current:
            continue
        name = format_segment_id(sid)
        why = "was scaled away" if sid in every else "does not exist"
        raise errors.InvalidConfigurationError(
            f"scale {scope}/{stream}: segment {name} {why}; the open segments are {open_ids}")
    bounds = {x for sid in args.seal for x in (current[sid].key_low, current[sid].key_high)}
    new = store.scale_stream(scope, stream, seal=args.seal, new_ranges=_snap(args.ranges, bounds))
    after = store.stream_info(scope, stream)
    by_id = {s.segment_id: s for s in after.segments}
    for sid in new:
        out(format_segment_id(sid))
    note(f"scaled {scope}/{stream} to epoch {after.epoch}: sealed "
          f"{', '.join(format_segment_id(s) for s in args.seal)}; created "
          + ", ".join(f"{format_segment_id(s)} [{by_id[s].key_low:.4f}, {by_id[s].key_high:.4f})" for s in new))
    return 0


def _scaling(current: ScalingPolicy, args: argparse.Namespace) -> ScalingPolicy:
    """The scaling policy the options ask for (the current one, changed or kept)."""
    rate_options = args.scale_factor is not None or args.min_segments is not None
    if args.fixed is not None:
        if rate_options:
            raise errors.InvalidConfigurationError(
                "--scale-factor and --min-segments go with --event-rate or --data-rate, not --fixed")
        return ScalingPolicy.fixed(args.fixed)
    if args.event_rate is None and args.data_rate is None and current.kind == "fixed":
        if rate_options:
            raise errors.InvalidConfigurationError(
                f"--scale-factor and --min-segments need --event-rate or --data-rate (the stream's "
                f"policy is fixed({current.min_segments}))")
        return current
    factor = current.scale_factor if args.scale_factor is None else args.scale_factor
    minimum = args.min_segments
    if minimum is None:
        minimum = current.min_segments if current.kind != "fixed" else 1
    if args.event_rate is not None:
        return ScalingPolicy.by_event_rate(args.event_rate, scale_factor=factor, min_segments=minimum)
    if args.data_rate is not None:
        return ScalingPolicy.by_data_rate(args.data_rate, scale_factor=factor, min_segments=minimum)
    if current.kind == "event_rate":  # only --scale-factor / --min-segments: keep the target
        return ScalingPolicy.by_event_rate(current.target_rate, scale_factor=factor, min_segments=minimum)
    return ScalingPolicy.by_data_rate(current.target_kib_per_s, scale_factor=factor, min_segments=minimum)


def _retention(current: RetentionPolicy, args: argparse.Namespace) -> RetentionPolicy:
    if args.retention_none:
        return RetentionPolicy.none()
    if args.retention_days is not None:
        return RetentionPolicy.by_time(days=args.retention_days)
    if args.retention_bytes is not None:
        return RetentionPolicy.by_size(bytes=args.retention_bytes)
    if args.retention_consumption:
        return RetentionPolicy.by_consumption()
    return current


def _update(store: Store, scope: str, stream: str, args: argparse.Namespace) -> int:
    retention_options = (args.retention_none or args.retention_consumption
                         or args.retention_days is not None or args.retention_bytes is not None)
    scaling_options = any(x is not None for x in (args.fixed, args.event_rate, args.data_rate,
                                                  args.scale_factor, args.min_segments))
    if not (retention_options or scaling_options):
        raise errors.InvalidConfigurationError(
            "update-stream: nothing to change; give a scaling option (--fixed, --event-rate, "
            "--data-rate, --scale-factor, --min-segments) and/or a retention option (--retention-...)")
    config = store.stream_info(scope, stream).config
    new = StreamConfiguration(scaling=_scaling(config.scaling, args), retention=_retention(config.retention, args))
    store.update_stream(scope, stream, new)
    after = store.stream_info(scope, stream)
    note(f"updated {scope}/{stream}: scaling {describe_scaling(new.scaling)}, retention "
          f"{describe_retention(new.retention)}; {len(after.current_segments)} segment(s) in epoch {after.epoch}")
    return 0


def run(store: Store, args: argparse.Namespace) -> int:
    """Run ``args.cmd`` (one of :data:`COMMANDS`) on the open store; returns the exit code
    (errors of the store propagate, for the CLI to report)."""
    scope, stream = args.stream
    if args.cmd == "history":
        return _history(store, scope, stream, args)
    if args.cmd == "scale":
        return _scale(store, scope, stream, args)
    return _update(store, scope, stream, args)
