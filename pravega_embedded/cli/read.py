"""``pravega-embedded read``: print a stream's events, kcat-style.

Owns: the ``read`` options and loop: where to start (``-o beginning|end|-N|@TIME|CUT``, or
``--from CUT``), where to stop (``--to CUT``, ``-c N``, ``-e``: at the end; ``--follow``:
never), which segments (``-s``), and how each event is printed (``output.Printer``: ``-f``,
``-J``, ``-D``, ``--show-key``).

Invariants:
  1. Events come from one reader, so they are in order per routing key and each is printed
     once; ``--show-cut`` prints the reader's position after the last event printed (read
     again from it for what came after).
  2. ``-o end`` waits for new events (kcat's meaning) unless ``-e`` is given; without
     ``--follow`` or ``-o end`` the read stops at what the stream holds now.
  3. While following, a lost owner (its process went away) is survived: the store is opened
     again and reading goes on from the position after the last batch printed.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import re
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from .. import errors
from ..streamcut import StreamCut
from .common import CommandError, cut_arg, open_store, segment_ids_arg, stream_arg, unescape
from .output import Printer, compile_format
from .progress import Progress, wanted

if TYPE_CHECKING:
    from ..events import EventRead
    from ..remote import RemoteStore
    from ..store import Store

__all__ = ["add_parser", "run"]

_BATCH = 1000  # events printed (and their write times asked for) at once
_MS_FROM = 10**11  # a number of ms since the epoch, not seconds (timelookup's limit)


def _count(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected a count >= 0, got {text!r}")
    return int(text)


def _format(text: str) -> str:
    try:
        compile_format(text)
    except (ValueError, argparse.ArgumentTypeError) as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("read", parents=parents, help="print events (kcat-style: -o, -c, -e, -s, -f, -J, -D)")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("-o", "--offset", metavar="START",
                   help="where to start: beginning (default), end (wait for new events), -N (the "
                   "last N events of each current segment), @TIME (first events written at or "
                   "after TIME: ISO-8601, or seconds/ms since the epoch), or StreamCut text")
    s.add_argument("--from", dest="start", type=cut_arg, help="start StreamCut text (as -o CUT)")
    s.add_argument("--to", dest="end", type=cut_arg, help="stop at this StreamCut")
    s.add_argument("-c", "--count", type=_count, metavar="N", help="stop after N events")
    s.add_argument("-e", "--exit", action="store_true", help="exit at the end of the stream (the "
                   "default without --follow; with -o end: print nothing new and exit)")
    s.add_argument("--follow", action="store_true",
                   help="keep reading new events, also from writers in other processes")
    s.add_argument("--poll", type=float, default=0.2, metavar="SECONDS",
                   help="while following: how long a read waits before looking whether the "
                   "stream was sealed (default 0.2)")
    s.add_argument("-s", "--segment", dest="segments", type=segment_ids_arg, action="append",
                   metavar="ID[,ID..]", help="only events of these segments (NUMBER#EPOCH, as info prints)")
    how = s.add_mutually_exclusive_group()
    how.add_argument("-f", "--format", type=_format, metavar="FMT",
                     help="print each event as FMT: %%s payload, %%S its size, %%k key, %%K its "
                     "size, %%p segment, %%o offset, %%T write time (ms), %%t stream, %%P pointer, "
                     "%%%%; \\n \\t \\0 \\xHH")
    how.add_argument("-J", "--json", action="store_true",
                     help="one JSON object per event: stream, segment, offset, key, write_time, "
                     "pointer, payload (text) or payload_base64")
    s.add_argument("-D", "--delimiter", type=unescape, default=b"\n", metavar="DELIM",
                   help="written after each event without -f (default \\n; e.g. \\0)")
    s.add_argument("--show-key", action="store_true", help="print KEY<TAB>EVENT")
    s.add_argument("--show-cut", action="store_true",
                   help="print the cut after the last event to stderr")


@dataclass
class _State:
    """What survives reopening the store while following (invariant 3)."""

    position: StreamCut | None
    printed: int = 0
    shown: StreamCut | None = None


def _time(text: str) -> "str | float":
    """``@TIME``: ISO-8601 text, or a number since the epoch: ms (as kcat) when it is that
    large (from year 5138 on in seconds), else seconds."""
    if not text.isdigit():
        return text
    n = int(text)
    return n / 1000 if n >= _MS_FROM else float(n)


def _start(store: "Store | RemoteStore", scope: str, stream: str, args: argparse.Namespace) -> StreamCut | None:
    o = args.offset
    if o is None or o == "beginning":
        return args.start
    if args.start is not None:
        raise CommandError("give where to start once: -o START or --from CUT")
    if o == "end":
        return store.stream_info(scope, stream).tail
    if re.fullmatch(r"-[0-9]+", o):
        return store.get_stream_cut_from_tail(scope, stream, int(o[1:]))
    if o.startswith("@"):
        return store.get_stream_cut_at(scope, stream, _time(o[1:]))
    try:
        return StreamCut.from_text(o)
    except errors.InvalidStreamCutError as exc:
        raise CommandError(f"-o {o!r}: expected beginning, end, -N, @TIME or StreamCut text ({exc})") from None


def _emit(store: "Store | RemoteStore", batch: "list[EventRead]", printer: Printer,
          progress: Progress) -> None:
    times: list[int | None] = (store.write_times([e.event_pointer for e in batch])
                               if printer.needs_time else [None] * len(batch))
    out = sys.stdout.buffer
    out.write(b"".join(map(printer.render, batch, times)))
    out.flush()
    progress.add(len(batch), sum(len(e.event) for e in batch))


def _loop(store: "Store | RemoteStore", scope: str, stream: str, args: argparse.Namespace,
          state: _State, printer: Printer, progress: Progress, follow: bool) -> None:
    only = None if not args.segments else {sid for ids in args.segments for sid in ids}
    wait = max(0.01, args.poll) if follow else 0
    with store.create_reader(scope, stream, start=state.position, end=args.end) as r:
        while True:
            batch: list[EventRead] = []
            want = _BATCH if args.count is None else min(_BATCH, args.count - state.printed)
            ev = r.read_next_event(timeout=wait) if want else None
            while ev is not None:
                if only is None or ev.segment_id in only:
                    batch.append(ev)
                if len(batch) >= want:
                    break
                ev = r.read_next_event(timeout=0)
            if batch:
                _emit(store, batch, printer, progress)
                state.printed += len(batch)
            state.position = r.position()
            if follow and args.show_cut and state.position != state.shown:
                print(state.position.to_text(), file=sys.stderr, flush=True)
                state.shown = state.position
            done = args.count is not None and state.printed >= args.count
            if done or r.at_end or (ev is None and not follow):
                return


def run(args: argparse.Namespace) -> int:
    scope, stream = args.stream
    if args.follow and args.exit:
        raise CommandError("-e exits at the end and --follow never does: give one")
    printer = Printer(fmt=args.format, as_json=args.json, delimiter=args.delimiter, show_key=args.show_key)
    progress = Progress("read", wanted(stdout_is_output=True))
    follow = args.follow or (args.offset == "end" and not args.exit)
    state = _State(None)
    try:
        first = True
        while True:
            try:
                with open_store(args) as store:
                    if first:
                        state.position = _start(store, scope, stream, args)
                        first = False
                    _loop(store, scope, stream, args, state, printer, progress, follow)
                break
            except errors.ConnectionLostError:
                if not follow or first:
                    raise
                # the owner went away: open again (this process may become the owner)
    finally:
        progress.close()
    if args.show_cut and not follow and state.position is not None:
        print(state.position.to_text(), file=sys.stderr)
    return 0
