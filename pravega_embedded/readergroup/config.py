"""Reader-group value objects: ReaderGroupConfig, Checkpoint, Position, SegmentDistribution.

Owns: validation of a group's configuration and its JSON form in the group state, the names of
checkpoints, and the values a group hands out (completed checkpoints, reader positions,
segment distribution).

Invariants:
  1. A config names each stream once; every start/end cut is bounded and belongs to one of its
     streams (else InvalidStreamCutError); a valid config round-trips through
     ``to_json``/``from_json``.
  2. Segment keys in positions are ``"scope/stream/segment_id"`` ('/' never occurs in a name).

Thread-safety: immutable values, safe to share.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from ..errors import InvalidConfigurationError, InvalidStreamCutError
from ..names import validate_scope, validate_stream
from ..streamcut import StreamCut, format_segment_id

__all__ = [
    "ReaderGroupConfig",
    "Checkpoint",
    "Position",
    "SegmentDistribution",
    "seg_key",
    "split_seg_key",
]

RETENTION_TYPES = ("none", "manual", "last_checkpoint")


def seg_key(stream_key: str, sid: int) -> str:
    return f"{stream_key}/{sid}"


def split_seg_key(key: str) -> tuple[str, int]:
    stream_key, _, sid = key.rpartition("/")
    return stream_key, int(sid)


def _stream_pair(item: object) -> tuple[str, str]:
    if isinstance(item, str):
        scope, sep, stream = item.partition("/")
        if not sep:
            raise InvalidConfigurationError(f"a stream is 'scope/stream' or (scope, stream), got {item!r}")
    elif isinstance(item, tuple) and len(item) == 2:
        scope, stream = item
    else:
        raise InvalidConfigurationError(f"a stream is 'scope/stream' or (scope, stream), got {item!r}")
    return validate_scope(scope), validate_stream(stream)


def _cuts(what: str, value: object, streams: tuple[tuple[str, str], ...]) -> tuple[StreamCut, ...]:
    """Normalise None | StreamCut | iterable of cuts | {stream: cut} to bounded cuts, one per
    stream at most, each of a configured stream (invariant 1)."""
    if value is None:
        return ()
    if isinstance(value, StreamCut):
        items: Iterable[Any] = [value]
    elif isinstance(value, Mapping):
        items = []
        for k, cut in value.items():
            pair = _stream_pair(k)
            if not isinstance(cut, StreamCut):
                raise InvalidStreamCutError(f"{what} of {pair[0]}/{pair[1]}: expected a StreamCut, got {cut!r}")
            if not cut.is_unbounded and (cut.scope, cut.stream) != pair:
                raise InvalidStreamCutError(
                    f"{what}: the StreamCut given for {pair[0]}/{pair[1]} is of {cut.scope}/{cut.stream}"
                )
            items.append(cut)
    elif isinstance(value, (str, bytes)) or not isinstance(value, Iterable):
        raise InvalidStreamCutError(f"{what}: expected StreamCuts, got {value!r}")
    else:
        items = list(value)
    out: dict[tuple[str, str], StreamCut] = {}
    for cut in items:
        if not isinstance(cut, StreamCut):
            raise InvalidStreamCutError(f"{what}: expected a StreamCut, got {cut!r}")
        if cut.is_unbounded:
            continue
        pair = (cut.scope, cut.stream)
        if pair not in streams:
            raise InvalidStreamCutError(
                f"{what}: the StreamCut is of {cut.scope}/{cut.stream}, which the reader group "
                f"does not read"
            )
        if pair in out:
            raise InvalidStreamCutError(f"{what}: two StreamCuts for {cut.scope}/{cut.stream}")
        out[pair] = cut
    return tuple(out[p] for p in streams if p in out)


@dataclass(frozen=True, slots=True, kw_only=True)
class ReaderGroupConfig:
    """What a reader group reads.

    ``streams``: ``[("scope", "stream"), ...]`` or ``["scope/stream", ...]``. ``start``/``end``:
    None (head / unbounded), a StreamCut, an iterable of StreamCuts (one per stream at most) or
    ``{stream: StreamCut}``; a stream without an end cut is read until it is sealed.
    ``automatic_checkpoint_interval``: seconds between silent checkpoints (None: off).
    ``max_outstanding_checkpoints``: how many user checkpoints may be pending at once.
    ``retention``: whether the group holds back its streams' consumption-based retention
    (docs/retention.md): ``"none"`` (not a subscriber), ``"last_checkpoint"`` (up to its last
    completed checkpoint) or ``"manual"`` (up to the cut given to ``update_retention_cut``).
    """

    streams: tuple[tuple[str, str], ...]
    start: tuple[StreamCut, ...] = ()
    end: tuple[StreamCut, ...] = ()
    automatic_checkpoint_interval: float | None = 30.0
    max_outstanding_checkpoints: int = 3
    retention: str = "none"

    def __post_init__(self) -> None:
        raw = self.streams
        if isinstance(raw, str) or (isinstance(raw, tuple) and len(raw) == 2 and all(
                isinstance(x, str) and "/" not in x for x in raw)):
            raw = [raw]  # one stream given on its own
        if not isinstance(raw, Iterable):
            raise InvalidConfigurationError(f"streams must be a list of streams, got {raw!r}")
        streams = tuple(_stream_pair(x) for x in raw)
        if not streams:
            raise InvalidConfigurationError("a reader group needs at least one stream")
        if len(set(streams)) != len(streams):
            raise InvalidConfigurationError(f"a stream is named twice in {streams!r}")
        object.__setattr__(self, "streams", streams)
        object.__setattr__(self, "start", _cuts("start", self.start, streams))
        object.__setattr__(self, "end", _cuts("end", self.end, streams))
        iv = self.automatic_checkpoint_interval
        if iv is not None and (isinstance(iv, bool) or not isinstance(iv, (int, float)) or not 0 < iv <= 86400):
            raise InvalidConfigurationError(
                f"automatic_checkpoint_interval must be None or 0 < seconds <= 86400, got {iv!r}"
            )
        m = self.max_outstanding_checkpoints
        if isinstance(m, bool) or not isinstance(m, int) or not 1 <= m <= 1000:
            raise InvalidConfigurationError(f"max_outstanding_checkpoints must be an int 1..1000, got {m!r}")
        if self.retention not in RETENTION_TYPES:
            raise InvalidConfigurationError(
                f"retention must be one of {', '.join(map(repr, RETENTION_TYPES))}, got {self.retention!r}"
            )

    def start_cut(self, scope: str, stream: str) -> StreamCut | None:
        return next((c for c in self.start if (c.scope, c.stream) == (scope, stream)), None)

    def end_cut(self, scope: str, stream: str) -> StreamCut | None:
        return next((c for c in self.end if (c.scope, c.stream) == (scope, stream)), None)

    def with_start(self, cuts: "Checkpoint | Mapping[tuple[str, str], StreamCut] | Iterable[StreamCut]") -> "ReaderGroupConfig":
        """This config reading from ``cuts`` (e.g. a Checkpoint's stream cuts) instead."""
        if isinstance(cuts, Checkpoint):
            cuts = cuts.stream_cuts
        return replace(self, start=cuts)

    def to_json(self) -> dict[str, object]:
        return {
            "streams": [f"{s}/{t}" for s, t in self.streams],
            "start": [c.to_text() for c in self.start],
            "end": [c.to_text() for c in self.end],
            "automatic_checkpoint_interval": self.automatic_checkpoint_interval,
            "max_outstanding_checkpoints": self.max_outstanding_checkpoints,
            "retention": self.retention,
        }

    @classmethod
    def from_json(cls, d: dict[str, object]) -> "ReaderGroupConfig":
        return cls(
            streams=tuple(d["streams"]),
            start=[StreamCut.from_text(t) for t in d["start"]],
            end=[StreamCut.from_text(t) for t in d["end"]],
            automatic_checkpoint_interval=d["automatic_checkpoint_interval"],
            max_outstanding_checkpoints=d["max_outstanding_checkpoints"],
            retention=d.get("retention", "none"),
        )


@dataclass(frozen=True, slots=True, kw_only=True)
class Checkpoint:
    """A completed checkpoint: its name and one StreamCut per stream of the group."""

    name: str
    stream_cuts: Mapping[tuple[str, str], StreamCut] = field(hash=False)

    def stream_cut(self, scope: str, stream: str) -> StreamCut:
        return self.stream_cuts[(scope, stream)]

    def __repr__(self) -> str:
        cuts = ", ".join(str(c) for c in self.stream_cuts.values())
        return f"Checkpoint(name={self.name!r}, stream_cuts=[{cuts}])"


@dataclass(frozen=True, slots=True, kw_only=True)
class Position:
    """A reader's position: for each segment it owns, the offset of the next event it would
    return. Pass it to ``group.reader_offline(reader_id, position)``."""

    segments: tuple[tuple[str, int], ...]  # ("scope/stream/segment_id", offset), sorted

    @classmethod
    def of(cls, positions: Mapping[str, int]) -> "Position":
        return cls(segments=tuple(sorted(positions.items())))

    def as_dict(self) -> dict[str, int]:
        """``{"scope/stream/segment_id": offset}``."""
        return dict(self.segments)

    def __str__(self) -> str:
        parts = []
        for k, off in self.segments:
            skey, sid = split_seg_key(k)
            parts.append(f"{skey}/{format_segment_id(sid)}={off}")
        return "Position(" + ", ".join(parts) + ")"


@dataclass(frozen=True, slots=True, kw_only=True)
class SegmentDistribution:
    """Which reader owns which segments (``"scope/stream/segment"`` names), and the segments
    no reader owns right now."""

    readers: Mapping[str, tuple[str, ...]] = field(hash=False)
    unassigned: tuple[str, ...] = ()

    @property
    def counts(self) -> dict[str, int]:
        return {r: len(s) for r, s in self.readers.items()}
