"""The ``pravega-embedded`` command: its parser, the global options, and how a failure is
reported.

Owns: assembling every command group's parser (one module each in this package), the global
options (``--store``, ``--durability``, tier 2's), accepted before the command and after it,
``--version``, dispatching to the command, and turning every failure into one line on stderr
and an exit code.

Invariants:
  1. No traceback reaches the user: usage errors exit 2, failures of the store, the OS or
     the command exit 1, Ctrl-C exits 130, a closed pipe (``| head``) exits 0; each with one
     line (``PRAVEGA_EMBEDDED_DEBUG=1`` re-raises unexpected errors, for bug reports).
  2. A global option given after the command wins over the same option before it.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import NoReturn, Sequence

from .. import __version__, errors
from . import bytestreams, demo, groups, read, scaling, serve, streams, tier2, txns, write
from .common import open_store

__all__ = ["main", "build_parser"]

_PROG = "pravega-embedded"


class _Parser(argparse.ArgumentParser):
    """argparse with one-line usage errors (invariant 1)."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{_PROG}: error: {message} (see {self.prog} --help)\n")


def _globals(p: argparse.ArgumentParser, *, defaults: bool) -> None:
    d = {} if defaults else {"default": argparse.SUPPRESS}
    p.add_argument("--store", metavar="DIR", **({"default": "./data"} if defaults else d),
                   help="store directory (default ./data)")
    p.add_argument("--durability", choices=["fsync", "os", "none"],
                   **({"default": "fsync"} if defaults else d), help="durability mode (default fsync)")
    tier2.add_global_options(p, defaults=defaults)


def build_parser() -> argparse.ArgumentParser:
    """The whole command line (every command group adds its own subcommands)."""
    p = _Parser(prog=_PROG, description="Pravega's streams in a directory: admin, kcat-like "
                "write/read, reader groups, transactions, byte streams, tier 2, the demo.")
    p.add_argument("--version", action="version", version=f"{_PROG} {__version__}")
    _globals(p, defaults=True)
    after = _Parser(add_help=False)
    _globals(after, defaults=False)  # invariant 2: the same options after the command
    parents = [after]
    sub = p.add_subparsers(dest="cmd", required=True, metavar="COMMAND")
    streams.add_parsers(sub, parents)
    write.add_parser(sub, parents)
    read.add_parser(sub, parents)
    groups.add_parser(sub, parents)
    scaling.add_parser(sub, parents)
    txns.add_parser(sub, parents)
    bytestreams.add_parser(sub, parents)
    tier2.add_parser(sub, parents)
    serve.add_parser(sub, parents)
    demo.add_parser(sub, parents)
    return p


def _dispatch(args: argparse.Namespace) -> int:
    cmd = args.cmd
    if cmd == "demo":
        demo.demo(args.store, args.durability, args.events, **tier2.open_options(args))
        return 0
    if cmd == "serve":
        return serve.run(args)
    if cmd == "read":
        return read.run(args)
    if cmd == "write":
        return write.run(args)
    create = cmd in streams.CREATING or (cmd == "bytes" and args.bytes_cmd in bytestreams.CREATING)
    with open_store(args, create=create) as store:
        if cmd in streams.COMMANDS:
            return streams.run(store, args)
        if cmd == "reader-group":
            return groups.run(store, args)
        if cmd in scaling.COMMANDS:
            return scaling.run(store, args)
        if cmd == "tier2":
            return tier2.run(store, args)
        if cmd == "txn":
            return txns.run(store, args)
        return bytestreams.run(store, args)


def _fail(text: object) -> int:
    print(f"{_PROG}: error: {' '.join(str(text).split())}", file=sys.stderr)
    return 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default ``sys.argv[1:]``); returns the exit code."""
    args = build_parser().parse_args(argv)
    try:
        return _dispatch(args)
    except BrokenPipeError:
        # the reader of our output went away (`| head`): stop quietly, and keep Python's
        # flush at exit from failing on the closed pipe too
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        return 130
    except errors.PravegaEmbeddedError as exc:
        return _fail(exc)
    except OSError as exc:
        where = f" ({exc.filename})" if exc.filename else ""
        return _fail(f"{exc.strerror or exc}{where}")
    except Exception as exc:  # invariant 1: a bug, told in one line
        if os.environ.get("PRAVEGA_EMBEDDED_DEBUG"):
            raise
        return _fail(f"internal error: {type(exc).__name__}: {exc} (PRAVEGA_EMBEDDED_DEBUG=1 "
                     "shows where; please report it)")


if __name__ == "__main__":
    sys.exit(main())
