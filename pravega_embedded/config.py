"""Stream configuration value objects: StreamConfiguration, ScalingPolicy, RetentionPolicy.

Owns: validation of configuration values and their JSON form in the metadata store.

Invariants:
  1. Value objects are frozen; a valid object round-trips through ``to_json``/``from_json``.
  2. ``ScalingPolicy.fixed(n)`` has ``1 <= n <= 1024`` segments; a rate policy has a positive
     target, ``2 <= scale_factor <= 64`` and ``1 <= min_segments <= 1024``.
  3. A retention policy's ``max`` is None or >= its ``min``.

Thread-safety: immutable values, safe to share.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from .errors import InvalidConfigurationError

__all__ = ["ScalingPolicy", "RetentionPolicy", "StreamConfiguration", "TieringOptions", "stream_configuration",
           "one_stream"]

MAX_SEGMENTS = 1024


def _count(what: str, n: Any, low: int, high: int) -> int:
    if isinstance(n, bool) or not isinstance(n, int) or not low <= n <= high:
        raise InvalidConfigurationError(f"{what} needs an int {low}..{high}, got {n!r}")
    return n


def _positive(what: str, x: Any) -> float:
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not (x > 0 and x < float("inf")):
        raise InvalidConfigurationError(f"{what} must be a positive number, got {x!r}")
    return float(x)


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingPolicy:
    """How a stream's segment count is chosen: ``fixed(n)``, ``by_event_rate(...)`` or
    ``by_data_rate(...)`` (the auto-scaling rule is in docs/scaling.md)."""

    kind: str = "fixed"
    min_segments: int = 1
    target_rate: float = 0.0  # events/s per segment (event_rate)
    target_kib_per_s: float = 0.0  # KiB/s per segment (data_rate)
    scale_factor: int = 2

    @classmethod
    def fixed(cls, n: int) -> "ScalingPolicy":
        """A fixed number of segments, each owning an equal part of the key space [0, 1)."""
        return cls(kind="fixed", min_segments=_count("ScalingPolicy.fixed(n)", n, 1, MAX_SEGMENTS))

    @classmethod
    def by_event_rate(cls, target_rate: float, scale_factor: int = 2, min_segments: int = 1) -> "ScalingPolicy":
        """Split a segment whose event rate is over ``target_rate`` events/s into
        ``scale_factor`` segments; merge cold neighbours; keep at least ``min_segments``."""
        return cls(kind="event_rate", target_rate=_positive("target_rate", target_rate),
                   scale_factor=_count("scale_factor", scale_factor, 2, 64),
                   min_segments=_count("min_segments", min_segments, 1, MAX_SEGMENTS))

    @classmethod
    def by_data_rate(cls, target_kib_per_s: float, scale_factor: int = 2, min_segments: int = 1) -> "ScalingPolicy":
        """As ``by_event_rate``, measured in KiB/s of event payload and framing."""
        return cls(kind="data_rate", target_kib_per_s=_positive("target_kib_per_s", target_kib_per_s),
                   scale_factor=_count("scale_factor", scale_factor, 2, 64),
                   min_segments=_count("min_segments", min_segments, 1, MAX_SEGMENTS))

    def to_json(self) -> dict[str, object]:
        if self.kind == "fixed":
            return {"kind": "fixed", "min_segments": self.min_segments}
        d: dict[str, Any] = {"kind": self.kind, "min_segments": self.min_segments,
                             "scale_factor": self.scale_factor}
        if self.kind == "event_rate":
            d["target_rate"] = self.target_rate
        else:
            d["target_kib_per_s"] = self.target_kib_per_s
        return d

    @classmethod
    def from_json(cls, d: dict[str, object]) -> "ScalingPolicy":
        kind = d.get("kind") if isinstance(d, dict) else None
        if kind == "fixed":
            return cls.fixed(d["min_segments"])
        if kind == "event_rate":
            return cls.by_event_rate(d["target_rate"], d["scale_factor"], d["min_segments"])
        if kind == "data_rate":
            return cls.by_data_rate(d["target_kib_per_s"], d["scale_factor"], d["min_segments"])
        raise InvalidConfigurationError(f"unknown scaling policy {d!r}")


def _seconds(days: float, hours: float, minutes: float, seconds: float) -> float:
    total = 0.0
    for what, x, unit in (("days", days, 86400), ("hours", hours, 3600), ("minutes", minutes, 60),
                          ("seconds", seconds, 1)):
        if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < float("inf"):
            raise InvalidConfigurationError(f"RetentionPolicy.by_time: {what} must be a number >= 0, got {x!r}")
        total += x * unit
    return total


def _duration(what: str, x: Any) -> float | None:
    if x is None:
        return None
    if isinstance(x, timedelta):
        x = x.total_seconds()
    if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 <= x < float("inf"):
        raise InvalidConfigurationError(f"{what} must be a timedelta or seconds >= 0, got {x!r}")
    return float(x)


def _size(what: str, x: Any) -> int | None:
    if x is None:
        return None
    if isinstance(x, bool) or not isinstance(x, int) or x < 0:
        raise InvalidConfigurationError(f"{what} must be an int number of bytes >= 0, got {x!r}")
    return x


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """How long data is kept (docs/retention.md): ``none()``, ``by_time(...)``,
    ``by_size(...)`` or ``by_consumption()``.

    ``min``/``max`` are as in Pravega: without subscribed reader groups the stream keeps at
    least ``min`` (seconds or bytes) and truncates what is older or more; with subscribers it
    truncates at the slowest subscriber's cut, but keeps at least ``min`` and never more than
    ``max``."""

    kind: str = "none"
    min: float = 0.0
    max: float | None = None

    @classmethod
    def none(cls) -> "RetentionPolicy":
        """Keep everything (truncate only by hand)."""
        return cls(kind="none")

    @classmethod
    def by_time(cls, days: float = 0, hours: float = 0, minutes: float = 0, seconds: float = 0,
                *, max: timedelta | float | None = None) -> "RetentionPolicy":  # noqa: A002
        """Keep at least this long; ``max`` (timedelta or seconds) bounds what subscribers
        may hold back."""
        lo = _seconds(days, hours, minutes, seconds)
        hi = _duration("RetentionPolicy.by_time max", max)
        if hi is not None and hi < lo:
            raise InvalidConfigurationError(f"RetentionPolicy.by_time: max ({hi} s) is below min ({lo} s)")
        return cls(kind="time", min=lo, max=hi)

    @classmethod
    def by_size(cls, bytes: int, *, max_bytes: int | None = None) -> "RetentionPolicy":  # noqa: A002
        """Keep at least ``bytes`` bytes; ``max_bytes`` bounds what subscribers may hold back."""
        lo = _size("RetentionPolicy.by_size bytes", bytes)
        hi = _size("RetentionPolicy.by_size max_bytes", max_bytes)
        if hi is not None and lo is not None and hi < lo:
            raise InvalidConfigurationError(f"RetentionPolicy.by_size: max_bytes ({hi}) is below bytes ({lo})")
        return cls(kind="size", min=float(lo or 0), max=None if hi is None else float(hi))

    @classmethod
    def by_consumption(cls) -> "RetentionPolicy":
        """Truncate at the slowest subscribed reader group's cut, with no time or size bound."""
        return cls(kind="consumption")

    def to_json(self) -> dict[str, object]:
        if self.kind in ("none", "consumption"):
            return {"kind": self.kind}
        return {"kind": self.kind, "min": self.min, "max": self.max}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> "RetentionPolicy":
        kind = d.get("kind") if isinstance(d, dict) else None
        if kind == "none":
            return cls.none()
        if kind == "consumption":
            return cls.by_consumption()
        if kind == "time":
            return cls.by_time(seconds=d["min"], max=d["max"])
        if kind == "size":
            return cls.by_size(int(d["min"]), max_bytes=None if d["max"] is None else int(d["max"]))
        raise InvalidConfigurationError(f"unknown retention policy {d!r}")


@dataclass(frozen=True, slots=True, kw_only=True)
class StreamConfiguration:
    """The configuration of a stream: its scaling and retention policies."""

    scaling: ScalingPolicy = field(default_factory=lambda: ScalingPolicy.fixed(1))
    retention: RetentionPolicy = field(default_factory=RetentionPolicy.none)

    def __post_init__(self) -> None:
        if not isinstance(self.scaling, ScalingPolicy):
            raise InvalidConfigurationError(f"scaling must be a ScalingPolicy, got {self.scaling!r}")
        if not isinstance(self.retention, RetentionPolicy):
            raise InvalidConfigurationError(
                f"retention must be a RetentionPolicy, got {self.retention!r}"
            )

    def to_json(self) -> dict[str, object]:
        return {"scaling": self.scaling.to_json(), "retention": self.retention.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, object]) -> "StreamConfiguration":
        return cls(
            scaling=ScalingPolicy.from_json(d["scaling"]),
            retention=RetentionPolicy.from_json(d["retention"]),
        )


def stream_configuration(config: "StreamConfiguration | int | None") -> StreamConfiguration:
    """``create_stream``'s config: a StreamConfiguration, a segment count (``fixed(n)``, as in
    Pravega's Python client) or None (one segment)."""
    if config is None:
        return StreamConfiguration()
    if isinstance(config, int) and not isinstance(config, bool):
        return StreamConfiguration(scaling=ScalingPolicy.fixed(config))
    if not isinstance(config, StreamConfiguration):
        raise InvalidConfigurationError(f"config must be a StreamConfiguration or a segment count "
                                        f"(create_stream(scope, stream, 4)), got {config!r}")
    return config


def one_stream(config: object, stream: str | None) -> object:
    """``create_reader_group``'s streams: ``config`` as given, or with ``stream`` given, the one
    stream ``(config, stream)`` (``create_reader_group(name, scope, stream)``)."""
    if stream is None:
        return config
    if not isinstance(config, str):
        raise InvalidConfigurationError("create_reader_group(name, scope, stream) names one stream: "
                                        "with a ReaderGroupConfig or a list of streams give no stream")
    return [(config, stream)]


DEFAULT_FILE_BYTES = 128 << 20
DEFAULT_FILE_AGE_S = 180.0


@dataclass(frozen=True, slots=True)
class TieringOptions:
    """How a store tiers to tier 2 (``pe.open(tier2=..., tier2_options=..., ...)``;
    docs/tiering.md, "Knobs")."""

    url: str  # any fsspec URL or local path
    storage_options: Mapping[str, object] = field(default_factory=dict)  # fsspec's options
    file_bytes: int = DEFAULT_FILE_BYTES  # a file closes at this much segment data
    file_age: float = DEFAULT_FILE_AGE_S  # ... or when its oldest data is this old (seconds)
    interval: float = 1.0  # how often the tierer looks (seconds)
    local_budget: int | None = None  # writers wait while the local journal holds this many bytes
    budget_timeout: float = 60.0  # ... and raise LocalBudgetError after this long (seconds)
    delete_grace: float = 60.0  # files left out by a truncation are deleted this much later

    def __post_init__(self) -> None:
        if not isinstance(self.url, str) or not self.url:
            raise InvalidConfigurationError(f"tier2 must be a non-empty URL or path, got {self.url!r}")
        if not isinstance(self.storage_options, Mapping):
            raise InvalidConfigurationError(
                f"tier2_options must be a dict of fsspec options, got {self.storage_options!r}")
        if isinstance(self.file_bytes, bool) or not isinstance(self.file_bytes, int) or \
                not (1 << 10) <= self.file_bytes <= (1 << 31):
            raise InvalidConfigurationError(
                f"tier2_file_bytes must be an int in [1 KiB, 2 GiB], got {self.file_bytes!r}")
        if self.local_budget is not None and (isinstance(self.local_budget, bool) or not isinstance(
                self.local_budget, int) or self.local_budget < (2 << 20)):
            raise InvalidConfigurationError(
                f"local_budget must be None or an int of bytes >= 2 MiB, got {self.local_budget!r}")
        g = self.delete_grace
        if isinstance(g, bool) or not isinstance(g, (int, float)) or not 0 <= g <= 86400 * 365:
            raise InvalidConfigurationError(
                f"tier2_delete_grace must be seconds in [0, 1 year], got {g!r}")
        for what, x in (("tier2_file_age", self.file_age), ("tiering interval", self.interval),
                        ("local_budget_timeout", self.budget_timeout)):
            if isinstance(x, bool) or not isinstance(x, (int, float)) or not 0 < x <= 86400:
                raise InvalidConfigurationError(f"{what} must be seconds in (0, 86400], got {x!r}")
