"""``pravega-embedded tier2 status | flush``: where tiering to tier 2 stands, and copying
everything durable to tier 2 now; plus the global options that say where a store tiers
(``--tier2 URL``, ``--tier2-option KEY=VALUE``, ``--no-tier2``), which every command passes
to ``pe.open``.

Owns: the ``tier2`` subcommands (parsing and text/JSON output) and the tier-2 open options;
``cli.main`` adds them to its parser, opens the store with :func:`open_options` and calls
:func:`run` with the open store. Uses only the public API.

A command holds the store only while it runs, so ``tier2 status`` shows the tiering of that
open: ``state``, ``failures`` and ``last_error`` only tell of rounds run during the command
(the first round starts when the store opens); ``tier2 flush`` is the way to find out whether
tier 2 takes data now.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
import time
from typing import TYPE_CHECKING, Any

from .. import errors
from ..store import Store

if TYPE_CHECKING:
    from .tiering import TieringStatus

__all__ = ["add_global_options", "add_parser", "open_options", "run"]


def _option_arg(text: str) -> tuple[str, Any]:
    """``KEY=VALUE`` -> (key, value): VALUE is JSON when it parses as JSON, else the text."""
    key, sep, value = text.partition("=")
    if not sep or not key.strip():
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    try:
        return key.strip(), json.loads(value)
    except ValueError:
        return key.strip(), value


def _seconds_arg(text: str) -> float:
    try:
        value = float(text)
    except ValueError:
        value = -1.0
    if not value >= 0:  # also NaN
        raise argparse.ArgumentTypeError(f"expected seconds >= 0, got {text!r}")
    return value


def add_global_options(p: argparse.ArgumentParser, *, defaults: bool = True) -> None:
    """Add ``--tier2``, ``--no-tier2`` and ``--tier2-option`` to the CLI's global options
    (``defaults=False``: leave them out of the namespace unless given, for the copies after
    a subcommand)."""
    d = {} if defaults else {"default": argparse.SUPPRESS}
    where = p.add_mutually_exclusive_group()
    where.add_argument("--tier2", metavar="URL", **d,
                       help="the store's tier 2: any fsspec URL or folder (default STORE/tier2); "
                       "give it to every command of a store that tiers elsewhere")
    where.add_argument("--no-tier2", action="store_true", **d,
                       help="open the store without tiering (tier2=False)")
    p.add_argument("--tier2-option", dest="tier2_options", type=_option_arg, action="append",
                   **({"default": []} if defaults else d),
                   metavar="KEY=VALUE", help="a storage option of tier 2's file system (repeat for more); "
                   "VALUE is JSON if it parses as JSON (true, 3, {...}), else text")


def open_options(args: argparse.Namespace) -> dict[str, Any]:
    """The tier-2 keyword arguments of ``pe.open`` the global options ask for."""
    if args.no_tier2:
        if args.tier2_options:
            raise errors.InvalidConfigurationError("--tier2-option needs tiering: it cannot go with --no-tier2")
        return {"tier2": False}
    options: dict[str, Any] = {}
    if args.tier2 is not None:
        options["tier2"] = args.tier2
    if args.tier2_options:
        options["tier2_options"] = dict(args.tier2_options)
    return options


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    """Add ``tier2`` and its subcommands to the CLI's subparsers."""
    p = sub.add_parser("tier2", parents=parents, help="tiering to tier 2: its status, and copying everything to it now")
    tsub = p.add_subparsers(dest="tier2_cmd", required=True, metavar="COMMAND")
    s = tsub.add_parser("status", parents=parents, help="state, tiered and untiered bytes, files, lag and the last error")
    s.add_argument("--json", action="store_true", help="print one JSON object")
    s = tsub.add_parser("flush", parents=parents, help="copy everything durable now to tier 2, then print the status")
    s.add_argument("--timeout", type=_seconds_arg, metavar="SECONDS",
                   help="give up after this long while tier 2 fails, and exit 1 (default: no limit)")


def _out(line: str) -> None:
    sys.stdout.write(line + "\n")


def _one_line(text: object) -> str:
    return " ".join(str(text).split())


def _print_status(s: "TieringStatus") -> None:
    budget = "no budget" if s.local_budget is None else f"budget {s.local_budget} bytes"
    _out(f"tier 2 {s.target}: {s.state}")
    _out(f"  tiered: {s.tiered_bytes} bytes in {s.files} files ({s.file_bytes} bytes of Parquet)")
    _out(f"  untiered: {s.untiered_bytes} bytes, lag {s.lag_seconds:.1f} s")
    _out(f"  local journal: {s.local_bytes} bytes ({budget})")
    _out(f"  pending deletions: {s.pending_deletions}")
    _out(f"  failures in a row: {s.failures}")
    _out(f"  last error: {'-' if s.last_error is None else _one_line(s.last_error)}")


def _flush(store: Store, timeout: float | None) -> int:
    before = store.tiering_status()
    started = time.monotonic()
    try:
        store.flush_tier2(timeout=timeout)
    except errors.TieringTimeoutError as exc:
        after = store.tiering_status()
        print(f"pravega-embedded: error: tier2 flush: {after.untiered_bytes} bytes are still not in "
              f"tier 2 ({after.target}) after {timeout:g} s; the last failure: "
              f"{_one_line(exc.__cause__ or exc)}", file=sys.stderr)
        return 1
    after = store.tiering_status()
    _out(f"flushed to tier 2 in {time.monotonic() - started:.2f} s: "
         f"{after.tiered_bytes - before.tiered_bytes} bytes more in {after.files - before.files} more files")
    _print_status(after)
    return 0


def run(store: Store, args: argparse.Namespace) -> int:
    """Run ``tier2 <args.tier2_cmd>`` on the open store; returns the exit code (other errors
    of the store propagate, for the CLI to report)."""
    if args.no_tier2:
        raise errors.InvalidConfigurationError(
            f"tier2 {args.tier2_cmd}: --no-tier2 opens the store without tiering; leave it out "
            "(with --tier2 URL if the store tiers elsewhere than STORE/tier2)")
    if args.tier2_cmd == "flush":
        return _flush(store, args.timeout)
    status = store.tiering_status()
    if args.json:
        _out(json.dumps(dataclasses.asdict(status)))
    else:
        _print_status(status)
    return 0
