"""``pravega-embedded write``: stdin's records become events.

Owns: splitting stdin into records (lines, or ``-D`` delimited), their routing keys (``--key``,
``--key-field`` of JSON lines, or ``-K``: kcat's ``KEY<DELIM>PAYLOAD``), exactly-once re-runs
(``--writer-id`` with ``--line-sequence``), and the summary.

Invariants:
  1. Record i of the input is written as one event, in order; with ``--line-sequence`` it is
     sequence i, so re-running the same input writes only what is missing.
  2. The command returns after a flush: every event it counted is durable.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import IO, TYPE_CHECKING, Any, Iterator

from .. import errors
from .common import CommandError, note, open_store, stream_arg, unescape
from .progress import Progress, wanted

if TYPE_CHECKING:
    from ..remote import RemoteStore
    from ..store import Store

__all__ = ["add_parser", "run", "records"]

_CHUNK = 1 << 16


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    s = sub.add_parser("write", parents=parents, help="write stdin lines (or -D records) as events")
    s.add_argument("stream", type=stream_arg, metavar="SCOPE/STREAM")
    s.add_argument("--key", help="routing key for every record")
    s.add_argument("--key-field", help="records are JSON objects; route by this field")
    s.add_argument("-K", "--key-delimiter", type=unescape, metavar="DELIM",
                   help="records are KEY<DELIM>PAYLOAD (kcat's -K); no DELIM: no key")
    s.add_argument("-D", "--delimiter", type=unescape, metavar="DELIM",
                   help="records end with DELIM (e.g. \\0) instead of a line end; kept whole")
    s.add_argument("--writer-id", help="writer id: its sequence numbers continue across runs")
    s.add_argument("--line-sequence", action="store_true",
                   help="with --writer-id: record i of the input is sequence i, so re-running the "
                   "same input (e.g. after a crash) skips the records already written")


def records(stream: IO[bytes], delimiter: bytes | None) -> Iterator[bytes]:
    """The input's records: lines without ``\\n``/``\\r\\n``, or pieces between
    ``delimiter`` (a last piece without one counts; an empty input has none)."""
    if delimiter is None:
        for line in stream:
            yield line.rstrip(b"\r\n") if line.endswith(b"\n") else line
        return
    if not delimiter:
        raise CommandError("-D needs a delimiter of at least one byte")
    rest = b""
    while chunk := stream.read(_CHUNK):
        parts = (rest + chunk).split(delimiter)
        rest = parts.pop()
        yield from parts
    if rest:
        yield rest


def _route(record: bytes, n: int, args: argparse.Namespace) -> tuple[str | None, bytes]:
    key = args.key
    if args.key_delimiter:
        k, sep, payload = record.partition(args.key_delimiter)
        if not sep:
            return key, record
        try:
            return k.decode("utf-8"), payload
        except UnicodeDecodeError:
            raise CommandError(f"record {n + 1}: its key is not UTF-8") from None
    if args.key_field:
        try:
            obj = json.loads(record)
            key = None if obj.get(args.key_field) is None else str(obj[args.key_field])
        except (ValueError, AttributeError):
            raise errors.SerializationError(
                f"line {n + 1} is not a JSON object with field {args.key_field!r}") from None
    return key, record


def _write(store: "Store | RemoteStore", scope: str, stream: str, args: argparse.Namespace,
           progress: Progress) -> tuple[int, int]:
    n = 0
    with store.create_writer(scope, stream, writer_id=args.writer_id) as w:
        for record in records(sys.stdin.buffer, args.delimiter):
            key, payload = _route(record, n, args)
            # --line-sequence: record i is sequence i, so re-running the same input adds nothing
            w.write_event(payload, routing_key=key, sequence=n if args.line_sequence else None)
            n += 1
            progress.add(1, len(payload))
        w.flush()
        return n, w.duplicates_dropped


def run(args: argparse.Namespace) -> int:
    scope, stream = args.stream
    if args.line_sequence and not args.writer_id:
        raise errors.InvalidConfigurationError("--line-sequence needs --writer-id")
    if args.key_delimiter is not None and args.key_field:
        raise CommandError("-K and --key-field both say where keys are: give one")
    progress = Progress("wrote", wanted(stdout_is_output=False))
    try:
        with open_store(args) as store:
            n, dropped = _write(store, scope, stream, args, progress)
    finally:
        progress.close()
    note(f"wrote {n - dropped} events to {scope}/{stream}"
         + (f" ({dropped} already written by writer {args.writer_id!r} were skipped)" if dropped else ""))
    return 0
