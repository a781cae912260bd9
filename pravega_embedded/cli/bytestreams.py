"""``pravega-embedded bytes cat | write``: byte streams (a stream as an append-only file)
from the command line.

Owns: those subcommands: ``cat`` copies a byte stream (from ``--offset``, default its head)
to stdout; ``write`` appends stdin to it (creating it if needed) and returns once it is
durable.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import io
import sys
from typing import TYPE_CHECKING, Any

from .common import CommandError, note, stream_arg
from .progress import Progress, wanted

if TYPE_CHECKING:
    from ..remote import RemoteStore
    from ..store import Store

__all__ = ["add_parser", "run", "CREATING"]

CREATING = frozenset({"write"})  # may create the store
_CHUNK = 1 << 20


def _offset(text: str) -> int:
    if not text.isdigit():
        raise argparse.ArgumentTypeError(f"expected an offset >= 0, got {text!r}")
    return int(text)


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser("bytes", parents=parents, help="byte streams: cat, write")
    bsub = p.add_subparsers(dest="bytes_cmd", required=True, metavar="COMMAND")
    s = bsub.add_parser("cat", parents=parents, help="copy a byte stream to stdout")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--offset", type=_offset, metavar="N", help="start at this offset (default: the head)")
    s = bsub.add_parser("write", parents=parents, help="append stdin to a byte stream (created if needed)")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")


def _cat(bs: Any, offset: int | None) -> None:
    bs.seek(bs.head_offset() if offset is None else offset, io.SEEK_SET)
    end = bs.tail_offset()
    out = sys.stdout.buffer
    progress = Progress("read", wanted(stdout_is_output=True))
    try:
        while bs.tell() < end:
            data = bs.read(min(_CHUNK, end - bs.tell()))
            if not data:
                break
            out.write(data)
            progress.add(0, len(data))
    finally:
        progress.close()
    out.flush()


def _write(bs: Any) -> int:
    n = 0
    progress = Progress("wrote", wanted(stdout_is_output=False))
    try:
        while chunk := sys.stdin.buffer.read(_CHUNK):
            bs.write(chunk)
            n += len(chunk)
            progress.add(0, len(chunk))
        bs.flush()
    finally:
        progress.close()
    return n


def run(store: "Store | RemoteStore", args: argparse.Namespace) -> int:
    scope, stream = args.stream
    if args.bytes_cmd == "write":
        store.create_scope(scope, exist_ok=True)
    else:  # cat never creates the stream
        kind = store.stream_info(scope, stream).kind
        if kind != "bytes":
            raise CommandError(f"{scope}/{stream} is a stream of {kind}, not a byte stream: "
                               f"read it with `read {scope}/{stream}`")
    with store.create_byte_stream(scope, stream) as bs:
        if args.bytes_cmd == "cat":
            _cat(bs, args.offset)
        else:
            n = _write(bs)
            note(f"appended {n} bytes to byte stream {scope}/{stream}; its tail is now {bs.tail_offset()}")
    return 0
