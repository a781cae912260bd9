"""Stream configuration value objects: StreamConfiguration, ScalingPolicy, RetentionPolicy.

Owns: validation of configuration values and their JSON form in the metadata store.

Invariants:
  1. Value objects are frozen; a valid object round-trips through ``to_json``/``from_json``.
  2. ``ScalingPolicy.fixed(n)`` has ``1 <= n <= 1024`` segments.

Thread-safety: immutable values, safe to share.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .errors import InvalidConfigurationError

__all__ = ["ScalingPolicy", "RetentionPolicy", "StreamConfiguration"]

MAX_SEGMENTS = 1024


@dataclass(frozen=True, slots=True, kw_only=True)
class ScalingPolicy:
    """How a stream's segment count is chosen. Only ``fixed`` is implemented so far."""

    kind: str = "fixed"
    min_segments: int = 1

    @classmethod
    def fixed(cls, n: int) -> "ScalingPolicy":
        """A fixed number of segments, each owning an equal part of the key space [0, 1)."""
        if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SEGMENTS:
            raise InvalidConfigurationError(
                f"ScalingPolicy.fixed(n) needs an int 1..{MAX_SEGMENTS}, got {n!r}"
            )
        return cls(kind="fixed", min_segments=n)

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind, "min_segments": self.min_segments}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "ScalingPolicy":
        if d.get("kind") != "fixed":
            raise InvalidConfigurationError(f"unknown scaling policy {d!r}")
        return cls.fixed(int(d["min_segments"]))


@dataclass(frozen=True, slots=True, kw_only=True)
class RetentionPolicy:
    """How long data is kept. Only ``none()`` (keep everything) is implemented so far."""

    kind: str = "none"

    @classmethod
    def none(cls) -> "RetentionPolicy":
        return cls(kind="none")

    def to_json(self) -> dict[str, Any]:
        return {"kind": self.kind}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "RetentionPolicy":
        if d.get("kind") != "none":
            raise InvalidConfigurationError(f"unknown retention policy {d!r}")
        return cls.none()


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

    def to_json(self) -> dict[str, Any]:
        return {"scaling": self.scaling.to_json(), "retention": self.retention.to_json()}

    @classmethod
    def from_json(cls, d: dict[str, Any]) -> "StreamConfiguration":
        return cls(
            scaling=ScalingPolicy.from_json(d["scaling"]),
            retention=RetentionPolicy.from_json(d["retention"]),
        )
