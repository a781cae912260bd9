"""StreamCut: a consistent position across all segments of a stream.

Owns: the StreamCut value object, its compact text form and its partial order.

Text form (stable; part of the public format, see docs/streamcuts.md)::

    pe1:<scope>/<stream>:<segment>=<offset>[,<segment>=<offset>...]
    UNBOUNDED

``<segment>`` is the segment number, followed by ``#<epoch>`` when the epoch is not 0 (the
segment id is ``epoch << 32 | number``); ``<number>#0`` is read as well. Offsets are byte
offsets of event frames in the segment.

Two spellings of a segment id: ``format_segment_id`` is the compact one of the text form (and of
names other code keys on: reader-group state, Spark offsets, CLI arguments), with epoch 0 as a bare
number; ``segment_name`` is what people read (tables, pictures, pandas frames), always
``number#epoch``, so ``0#0`` and ``2#1`` look alike and say which epoch made the segment.

Invariants:
  1. ``positions`` is sorted by segment id, each id at most once, offsets >= 0.
  2. ``StreamCut.from_text(c.to_text()) == c`` for every cut.
  3. ``UNBOUNDED`` has no scope, stream or positions; it means "the head" as a start and "no
     end" as an end.

Thread-safety: immutable values, safe to share.
"""

from __future__ import annotations

import html
import re
from dataclasses import dataclass
from typing import ClassVar, Iterable, Mapping

from .errors import InvalidStreamCutError
from .names import NAME_PATTERN

__all__ = ["StreamCut", "segment_id", "format_segment_id", "segment_name"]

_TEXT = re.compile(
    rf"pe1:({NAME_PATTERN})/({NAME_PATTERN}):"
    r"((?:[0-9]{1,10}(?:#[0-9]{1,10})?=[0-9]{1,20})(?:,[0-9]{1,10}(?:#[0-9]{1,10})?=[0-9]{1,20}){0,4095})"
)
_NAME = re.compile(NAME_PATTERN)
_MAX_U32 = (1 << 32) - 1
_MAX_OFFSET = (1 << 63) - 1


def segment_id(number: int, epoch: int = 0) -> int:
    """The id of segment ``number`` created in ``epoch``."""
    return (epoch << 32) | number


def format_segment_id(sid: int) -> str:
    """``number`` or ``number#epoch`` (as in the text form)."""
    number, epoch = sid & _MAX_U32, sid >> 32
    return f"{number}#{epoch}" if epoch else str(number)


def segment_name(sid: int) -> str:
    """``number#epoch`` always (``0#0``, ``2#1``): how a segment is shown to a person."""
    return f"{sid & _MAX_U32}#{sid >> 32}"


def _parse_segment(text: str) -> int:
    number, _, epoch = text.partition("#")
    n, e = int(number), int(epoch or "0")
    if n > _MAX_U32 or e > _MAX_U32:
        raise InvalidStreamCutError(f"segment {text!r} out of range")
    return segment_id(n, e)


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamCut:
    """A position in every segment of one stream; ``StreamCut.UNBOUNDED`` means no position."""

    scope: str = ""
    stream: str = ""
    positions: tuple[tuple[int, int], ...] | None = None

    UNBOUNDED: ClassVar["StreamCut"]

    def __post_init__(self) -> None:
        if self.positions is None:
            if self.scope or self.stream:
                raise InvalidStreamCutError("an unbounded StreamCut has no scope or stream")
            return
        if not (isinstance(self.scope, str) and _NAME.fullmatch(self.scope)
                and isinstance(self.stream, str) and _NAME.fullmatch(self.stream)):
            raise InvalidStreamCutError(
                f"a bounded StreamCut needs a valid scope and stream name, got "
                f"{self.scope!r}/{self.stream!r}"
            )
        pos = self.positions
        if not pos:
            raise InvalidStreamCutError(f"StreamCut of {self.scope}/{self.stream} has no segments")
        prev = -1
        for item in pos:
            if not (isinstance(item, tuple) and len(item) == 2):
                raise InvalidStreamCutError(f"bad StreamCut position {item!r}")
            sid, off = item
            if not (isinstance(sid, int) and isinstance(off, int)) or isinstance(off, bool):
                raise InvalidStreamCutError(f"bad StreamCut position {item!r}")
            if sid <= prev:
                raise InvalidStreamCutError(
                    f"StreamCut of {self.scope}/{self.stream}: segments must be sorted and unique"
                )
            if not 0 <= off <= _MAX_OFFSET:
                raise InvalidStreamCutError(
                    f"StreamCut of {self.scope}/{self.stream}: offset {off} of segment "
                    f"{format_segment_id(sid)} out of range"
                )
            prev = sid

    @classmethod
    def of(cls, scope: str, stream: str, positions: Mapping[int, int] | Iterable[tuple[int, int]]) -> "StreamCut":
        """Build a cut from ``{segment_id: offset}`` (or pairs)."""
        items = positions.items() if isinstance(positions, Mapping) else positions
        return cls(scope=scope, stream=stream, positions=tuple(sorted((int(s), int(o)) for s, o in items)))

    @property
    def is_unbounded(self) -> bool:
        return self.positions is None

    def as_dict(self) -> dict[int, int]:
        """``{segment_id: offset}`` (empty for UNBOUNDED)."""
        return dict(self.positions or ())

    def to_text(self) -> str:
        """The compact, stable text form (see the module docstring)."""
        if self.positions is None:
            return "UNBOUNDED"
        body = ",".join(f"{format_segment_id(s)}={o}" for s, o in self.positions)
        return f"pe1:{self.scope}/{self.stream}:{body}"

    @classmethod
    def from_text(cls, text: str) -> "StreamCut":
        """Parse the text form; anything else raises InvalidStreamCutError."""
        if not isinstance(text, str):
            raise InvalidStreamCutError(f"StreamCut text must be a str, not {type(text).__name__}")
        if text == "UNBOUNDED":
            return cls.UNBOUNDED
        m = _TEXT.fullmatch(text)
        if m is None:
            shown = text if len(text) <= 80 else text[:77] + "..."
            raise InvalidStreamCutError(f"not a StreamCut: {shown!r}")
        scope, stream, body = m.groups()
        pairs = []
        for part in body.split(","):
            seg, _, off = part.partition("=")
            pairs.append((_parse_segment(seg), int(off)))
        pairs.sort()
        return cls(scope=scope, stream=stream, positions=tuple(pairs))

    def _comparable(self, other: object) -> "StreamCut":
        if not isinstance(other, StreamCut):
            return NotImplemented  # type: ignore[return-value]
        if self.positions is None or other.positions is None:
            raise InvalidStreamCutError("UNBOUNDED cannot be ordered against other cuts")
        if (self.scope, self.stream) != (other.scope, other.stream):
            raise InvalidStreamCutError(
                f"cannot compare cuts of {self.scope}/{self.stream} and {other.scope}/{other.stream}"
            )
        if {s for s, _ in self.positions} != {s for s, _ in other.positions}:
            raise InvalidStreamCutError("cuts over different segment sets are not comparable")
        return other

    def __le__(self, other: object) -> bool:
        o = self._comparable(other)
        if o is NotImplemented:
            return NotImplemented
        od = dict(o.positions or ())
        return all(off <= od[s] for s, off in self.positions or ())

    def __ge__(self, other: object) -> bool:
        o = self._comparable(other)
        if o is NotImplemented:
            return NotImplemented
        return o <= self

    def __lt__(self, other: object) -> bool:
        return self <= other and self != other

    def __gt__(self, other: object) -> bool:
        return self >= other and self != other

    def __str__(self) -> str:
        return self.to_text()

    def _repr_html_(self) -> str:
        if self.positions is None:
            return "<code>StreamCut.UNBOUNDED</code>"
        from .notebook import table
        text = self.to_text()
        text = text if len(text) <= 100 else text[:97] + "..."
        return (
            f"<b>StreamCut</b> {html.escape(self.scope)}/{html.escape(self.stream)} "
            f"<code>{html.escape(text)}</code>"
            + table(("segment", "offset"), [(segment_name(s), f"{o:,}") for s, o in self.positions], right=(1,))
        )


StreamCut.UNBOUNDED = StreamCut()
