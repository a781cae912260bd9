"""What every command of the CLI shares: argument types, output, opening the store, and the
one way a command fails.

Owns: parsing ``SCOPE/STREAM``, StreamCut text, segment ids and escapes (``\\n``, ``\\t``,
``\\0``, ``\\xHH``); printing to stdout and notes to stderr; :func:`open_store`, which never
creates a store for a command that only reads or changes one (``--store ./typo info x/y``
says there is no store there); :class:`CommandError`, a failure the CLI prints as one line.

Invariants:
  1. Only the commands that make something (``create-scope``, ``create-stream``, ``bytes
     write``, ``serve``, ``demo``) may create the store directory.
  2. Every failure reaches ``main`` as a ``PravegaEmbeddedError`` (CommandError is one) or an
     ``OSError``; ``main`` prints it as one line.

Thread-safety: a command-line entry point (one call per process).
"""

from __future__ import annotations

import argparse
import os
import re
import sys
from typing import TYPE_CHECKING

from .. import errors
from ..config import RetentionPolicy, ScalingPolicy
from ..remote import open as open_any
from ..streamcut import StreamCut, segment_id
from . import tier2

if TYPE_CHECKING:
    from ..remote import RemoteStore
    from ..store import Store

__all__ = ["CommandError", "stream_arg", "cut_arg", "segment_ids_arg", "unescape", "out", "note",
           "open_store", "describe_scaling", "describe_retention"]

_SEGMENT = re.compile(r"([0-9]{1,10})(?:#([0-9]{1,10}))?")
_MAX_U32 = (1 << 32) - 1
_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "0": "\0", "\\": "\\"}


class CommandError(errors.PravegaEmbeddedError):
    """A command cannot do what it was asked (the text says why and what to do)."""


def stream_arg(text: str) -> tuple[str, str]:
    scope, sep, stream = text.partition("/")
    if not sep or not scope or not stream:
        raise argparse.ArgumentTypeError(f"expected SCOPE/STREAM, got {text!r}")
    return scope, stream


def cut_arg(text: str) -> StreamCut:
    try:
        return StreamCut.from_text(text)
    except errors.InvalidStreamCutError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def segment_ids_arg(text: str) -> list[int]:
    """``ID[,ID..]`` -> segment ids (``NUMBER`` or ``NUMBER#EPOCH``, as ``info`` prints them)."""
    out = []
    for part in text.split(","):
        m = _SEGMENT.fullmatch(part.strip())
        if m is None or int(m.group(1)) > _MAX_U32 or int(m.group(2) or 0) > _MAX_U32:
            raise argparse.ArgumentTypeError(
                f"bad segment id {part.strip()!r}: expected NUMBER or NUMBER#EPOCH (as `info` prints them)")
        out.append(segment_id(int(m.group(1)), int(m.group(2) or 0)))
    return out


def unescape(text: str) -> bytes:
    """``\\n``, ``\\t``, ``\\r``, ``\\0``, ``\\\\`` and ``\\xHH`` in ``text`` -> bytes (UTF-8)."""
    out = bytearray()
    i = 0
    while i < len(text):
        c = text[i]
        if c != "\\" or i + 1 == len(text):
            out += c.encode()
            i += 1
            continue
        n = text[i + 1]
        if n in _ESCAPES:
            out += _ESCAPES[n].encode()
            i += 2
        elif n == "x" and re.fullmatch(r"[0-9a-fA-F]{2}", text[i + 2 : i + 4]):
            out.append(int(text[i + 2 : i + 4], 16))
            i += 4
        else:
            raise argparse.ArgumentTypeError(f"unknown escape \\{n} in {text!r} (\\n \\t \\r \\0 \\\\ \\xHH)")
    return bytes(out)


def out(line: str) -> None:
    sys.stdout.write(line + "\n")


def note(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _check_existing(path: str) -> None:
    """Invariant 1: a clear error unless ``path`` holds a store (or a store can be reached)."""
    if not os.path.exists(path):
        raise CommandError(f"no store at {path}: the directory does not exist (give --store DIR; "
                           "create-stream or create-scope makes a new store)")
    if not os.path.isdir(path):
        raise CommandError(f"--store {path} is a file, not a store directory")
    if not os.access(path, os.R_OK | os.X_OK):
        raise CommandError(f"cannot read the store directory {path}: permission denied")
    if not any(os.path.exists(os.path.join(path, name)) for name in ("STORE", "meta", "journal")):
        raise CommandError(f"no store at {path}: the directory holds no store (give --store DIR; "
                           "create-stream or create-scope makes a new store)")


def open_store(args: argparse.Namespace, *, create: bool = False) -> "Store | RemoteStore":
    """The store of ``--store``: owned by this command, or, when another process has it
    open, through that process (its options apply then). Invariant 1."""
    if not create:
        _check_existing(args.store)
    elif os.path.exists(args.store) and not os.path.isdir(args.store):
        raise CommandError(f"--store {args.store} is a file, not a store directory")
    return open_any(args.store, args.durability, **tier2.open_options(args))


def describe_scaling(p: ScalingPolicy) -> str:
    if p.kind == "fixed":
        return f"fixed({p.min_segments})"
    target = f"{p.target_rate:g} events/s" if p.kind == "event_rate" else f"{p.target_kib_per_s:g} KiB/s"
    return f"by_{p.kind}({target}, scale_factor={p.scale_factor}, min_segments={p.min_segments})"


def describe_retention(p: RetentionPolicy) -> str:
    if p.kind in ("none", "consumption"):
        return "none" if p.kind == "none" else "by_consumption"
    low = f"{p.min / 86400:g} days" if p.kind == "time" else f"{p.min:,.0f} bytes"
    return f"by_{'time' if p.kind == 'time' else 'size'}({low})"
