"""The options of ``format("pravega")``: parsed and checked once, into a frozen value.

Owns: the names and meanings of the source's options (docs/spark.md lists them beside
spark-sql-kafka's), their defaults, and the errors for bad ones. Spark hands options over as a
case-insensitive map of strings; every value is checked here, in the process that plans the
query, so a typo fails the query at once with a message naming the option.

Invariants:
  1. An option name this source does not know is an InvalidConfigurationError listing the
     known ones (a misspelt ``end_stream_cut`` must not silently read to the tail).
  2. ``ReadOptions`` is picklable and holds no open resource: it travels to Spark's workers.

Thread-safety: pure functions; immutable values.
"""

from __future__ import annotations

import json
import os
import re
from dataclasses import dataclass, field
from typing import Mapping

from ..errors import InvalidConfigurationError
from ..names import validate_scope, validate_stream, validate_writer_id
from ..streamcut import StreamCut
from ..timelookup import timestamp_ns

__all__ = ["ReadOptions", "StreamOptions", "WriteOptions", "parse_read_options",
           "parse_stream_options", "parse_write_options", "READ_OPTIONS", "STREAM_OPTIONS",
           "WRITE_OPTIONS", "DEFAULT_MAX_BYTES_PER_TRIGGER", "DEFAULT_MAX_PARTITION_BYTES", "DEFAULT_TXN_LEASE",
           "DEFAULT_MAX_TRIGGER_DELAY", "parse_size", "parse_duration"]

READ_OPTIONS = frozenset({
    "path", "scope", "stream", "start_stream_cut", "end_stream_cut", "starting_timestamp",
    "ending_timestamp", "min_partitions", "max_partition_bytes", "storage_options", "tier2",
    "tier2_options", "filter_pushdown",
})
STREAM_OPTIONS = frozenset({
    "path", "scope", "stream", "start_stream_cut", "starting_timestamp", "max_events_per_trigger",
    "max_bytes_per_trigger", "min_events_per_trigger", "max_trigger_delay", "fail_on_data_loss",
    "tier2", "tier2_options",
})
WRITE_OPTIONS = frozenset({
    "path", "scope", "stream", "exactly_once", "writer_id", "txn_lease", "tier2", "tier2_options",
    "checkpointlocation",  # Spark's own, passed on to every streaming sink
})
DEFAULT_MAX_BYTES_PER_TRIGGER = 128 << 20  # every micro-batch is bounded, the first too
DEFAULT_MAX_PARTITION_BYTES = 128 << 20  # Spark's spark.sql.files.maxPartitionBytes
DEFAULT_TXN_LEASE = 3600.0  # a task's transaction waits this long for the driver's commit
DEFAULT_MAX_TRIGGER_DELAY = 900.0  # min_events_per_trigger waits at most this long (Kafka's 15m)
MIN_TXN_LEASE = 10.0
_MIN_MS, _MAX_MS = 10**11, 10**14  # ms since the epoch: 1973 .. 5138 (smaller: seconds by mistake)
_UNITS = {"": 1, "b": 1, "k": 1 << 10, "kb": 1 << 10, "m": 1 << 20, "mb": 1 << 20,
          "g": 1 << 30, "gb": 1 << 30}


@dataclass(frozen=True, slots=True)
class ReadOptions:
    """A batch read: where (a store directory or a tier-2 URL), which stream, between which
    cuts (None: the head / the tail when planned), and how finely to split it."""

    path: str
    scope: str
    stream: str
    start: StreamCut | None = None
    end: StreamCut | None = None
    start_ns: int | None = None  # starting_timestamp: the cut at that time is the start
    end_ns: int | None = None  # ending_timestamp: the cut at that time is the end
    min_partitions: int | None = None  # None: the session's parallelism (``register``)
    max_partition_bytes: int = DEFAULT_MAX_PARTITION_BYTES
    storage_options: dict[str, object] = field(default_factory=dict)  # a tier-2 URL's fsspec options
    tier2: str | bool | None = None  # pe.open's tier2, should a worker be the first to open the store
    tier2_options: dict[str, object] = field(default_factory=dict)
    fail_on_data_loss: bool = True  # a range truncated away while read: an error, or skipped
    filter_pushdown: bool | None = None  # take Spark's filters (None: as the registered source)

    @property
    def is_tier2(self) -> bool:
        """The path is a tier-2 URL or folder, read with no store (``pe.open_tier2``)."""
        return is_tier2_path(self.path)


@dataclass(frozen=True, slots=True)
class StreamOptions:
    """A micro-batch read (``readStream``) of a stream of a store directory: where it starts
    (None: the head; "latest": the tail when the query starts) and each batch's soft limits."""

    path: str
    scope: str
    stream: str
    start: StreamCut | str | None = "latest"
    start_ns: int | None = None  # starting_timestamp (instead of start)
    max_events: int | None = None
    max_bytes: int = DEFAULT_MAX_BYTES_PER_TRIGGER
    min_events: int | None = None  # a batch waits for this many events ...
    max_trigger_delay: float = DEFAULT_MAX_TRIGGER_DELAY  # ... at most this many seconds
    fail_on_data_loss: bool = True
    tier2: str | bool | None = None
    tier2_options: dict[str, object] = field(default_factory=dict)

    @property
    def read(self) -> ReadOptions:
        """The batch-read options a micro-batch's partitions are read with."""
        return ReadOptions(path=self.path, scope=self.scope, stream=self.stream, tier2=self.tier2,
                           tier2_options=dict(self.tier2_options),
                           fail_on_data_loss=self.fail_on_data_loss)


@dataclass(frozen=True, slots=True)
class WriteOptions:
    """A write (``df.write`` / ``writeStream``) to a stream of a store directory: exactly once
    through transactions (default) or plain writes; the writer id of the sink's marks (None: the
    streaming query's id); the lease of each task's transaction."""

    path: str
    scope: str
    stream: str
    exactly_once: bool = True
    writer_id: str | None = None
    txn_lease: float = DEFAULT_TXN_LEASE
    tier2: str | bool | None = None
    tier2_options: dict[str, object] = field(default_factory=dict)

    @property
    def store(self) -> ReadOptions:
        """How a Spark process opens the store (as a read does)."""
        return ReadOptions(path=self.path, scope=self.scope, stream=self.stream, tier2=self.tier2,
                           tier2_options=dict(self.tier2_options))


def is_tier2_path(path: str) -> bool:
    """A URL with a scheme other than file://, or a local directory that holds no store (no
    STORE marker) but tier-2 scope folders."""
    if "://" in path and not path.startswith("file://"):
        return True
    local = path[7:] if path.startswith("file://") else path
    if os.path.exists(os.path.join(local, "STORE")):
        return False
    try:
        return any(n.startswith("scope=") for n in os.listdir(local))
    except OSError:
        return False


def _cut(opts: Mapping[str, str], name: str, default: str, scope: str, stream: str) -> StreamCut | None:
    text = str(opts.get(name, default)).strip()
    if text.lower() in ("earliest", "latest", "unbounded", ""):
        if name == "start_stream_cut" and text.lower() == "latest":
            raise InvalidConfigurationError("start_stream_cut 'latest' reads nothing in a batch read: "
                                            "give 'earliest' or a cut's text")
        if name == "end_stream_cut" and text.lower() == "earliest":
            raise InvalidConfigurationError("end_stream_cut 'earliest' reads nothing: give 'latest' "
                                            "or a cut's text")
        return None
    cut = StreamCut.from_text(text)
    if cut.positions is not None and (cut.scope, cut.stream) != (scope, stream):
        raise InvalidConfigurationError(f"{name} is a cut of {cut.scope}/{cut.stream}, not of "
                                        f"{scope}/{stream}")
    return cut


def _json_map(opts: Mapping[str, str], name: str) -> dict[str, object]:
    raw = opts.get(name)
    if raw is None or raw == "":
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise InvalidConfigurationError(f"option {name} must be a JSON object: {exc}") from None
    if not isinstance(value, dict):
        raise InvalidConfigurationError(f"option {name} must be a JSON object, got {raw[:60]!r}")
    return value


def _positive_int(opts: Mapping[str, str], name: str, default: int | None) -> int | None:
    raw = opts.get(name)
    if raw is None:
        return default
    try:
        value = int(str(raw).strip())
    except ValueError:
        raise InvalidConfigurationError(f"option {name} must be an integer >= 1, got {raw!r}") from None
    if value < 1:
        raise InvalidConfigurationError(f"option {name} must be an integer >= 1, got {raw!r}")
    return value


def _tier2(raw: str | None) -> str | bool | None:
    """``pe.open``'s tier2 from text: "false" (no tier 2), a URL or path, or None (default)."""
    if raw is None or str(raw).strip() == "":
        return None
    text = str(raw).strip()
    return False if text.lower() == "false" else text


def _checked(opts: Mapping[str, str], known: frozenset[str], what: str) -> tuple[dict[str, str], str, str]:
    """The options by lower-case name, with the required ones there and none unknown
    (invariant 1); and the stream's checked scope and name."""
    low = {str(k).lower(): v for k, v in opts.items()}
    unknown = sorted(set(low) - known)
    if unknown:
        raise InvalidConfigurationError(f"{what} has no option {', '.join(map(repr, unknown))}; its "
                                        f"options are {', '.join(sorted(known))} (docs/spark.md)")
    for name in ("path", "scope", "stream"):
        if not low.get(name):
            raise InvalidConfigurationError(f"{what} needs option {name!r} (docs/spark.md)")
    return low, validate_scope(low["scope"]), validate_stream(low["stream"])


def _time(opts: Mapping[str, str], name: str, instead_of: str) -> int | None:
    """A timestamp option in ns: milliseconds since the epoch (spark-sql-kafka's form) or
    ISO-8601 text with a zone; refused beside the cut option it replaces."""
    raw = opts.get(name)
    if raw is None or str(raw).strip() == "":
        return None
    if str(opts.get(instead_of) or "").strip():
        raise InvalidConfigurationError(f"give {name} or {instead_of}, not both")
    text = str(raw).strip()
    if re.fullmatch(r"[+-]?[0-9]+", text):
        ms = int(text)
        if not _MIN_MS <= ms <= _MAX_MS:
            raise InvalidConfigurationError(
                f"option {name} {text} is not milliseconds since the epoch of a time this store "
                f"could have written (seconds? multiply by 1000), or give ISO-8601 text")
        return ms * 1_000_000
    return timestamp_ns(text, f"option {name}")


def _bool(opts: Mapping[str, str], name: str, default: bool) -> bool:
    text = str(opts.get(name, default)).strip().lower()
    if text not in ("true", "false"):
        raise InvalidConfigurationError(f"option {name} must be true or false, got {text!r}")
    return text == "true"


def parse_read_options(opts: Mapping[str, str]) -> ReadOptions:
    """``ReadOptions`` from Spark's option map (case-insensitive names; invariant 1)."""
    low, scope, stream = _checked(opts, READ_OPTIONS, "format('pravega')")
    start_ns = _time(low, "starting_timestamp", "start_stream_cut")
    end_ns = _time(low, "ending_timestamp", "end_stream_cut")
    if start_ns is not None and end_ns is not None and end_ns < start_ns:
        raise InvalidConfigurationError("ending_timestamp is before starting_timestamp")
    return ReadOptions(
        path=str(low["path"]), scope=scope, stream=stream,
        start=_cut(low, "start_stream_cut", "earliest", scope, stream),
        end=_cut(low, "end_stream_cut", "latest", scope, stream),
        start_ns=start_ns, end_ns=end_ns,
        min_partitions=_positive_int(low, "min_partitions", None),
        max_partition_bytes=(DEFAULT_MAX_PARTITION_BYTES if low.get("max_partition_bytes") is None
                             else parse_size(low["max_partition_bytes"], "max_partition_bytes")),
        storage_options=_json_map(low, "storage_options"),
        tier2=_tier2(low.get("tier2")),
        tier2_options=_json_map(low, "tier2_options"),
        filter_pushdown=None if low.get("filter_pushdown") is None else _bool(low, "filter_pushdown", False),
    )


def parse_size(raw: str, name: str) -> int:
    """``64m``, ``512k``, ``1g``, ``1048576``: a byte count >= 1 (binary units)."""
    text = str(raw).strip().lower()
    digits = text.rstrip("bkmg")
    unit = text[len(digits):]
    if not digits.isdigit() or unit not in _UNITS or int(digits) < 1:
        raise InvalidConfigurationError(f"option {name} must be a size such as 64m, 512k or 1048576, "
                                        f"got {raw!r}")
    return int(digits) * _UNITS[unit]


def parse_duration(raw: str, name: str) -> float:
    """``15m``, ``30s``, ``500ms``, ``1h``, ``2d`` or plain seconds: a duration >= 0 in seconds."""
    text = str(raw).strip().lower().replace(" ", "")
    for unit, scale in (("ms", 1e-3), ("s", 1.0), ("m", 60.0), ("h", 3600.0), ("d", 86400.0), ("", 1.0)):
        if text.endswith(unit):
            number = text[: len(text) - len(unit)]
            try:
                value = float(number) * scale
            except ValueError:
                continue
            if value >= 0 and value == value and value != float("inf"):
                return value + 0.0  # not -0.0
    raise InvalidConfigurationError(f"option {name} must be a duration such as 15m, 30s or 500ms, got {raw!r}")


def parse_stream_options(opts: Mapping[str, str]) -> StreamOptions:
    """``StreamOptions`` from Spark's option map (invariant 1)."""
    low, scope, stream = _checked(opts, STREAM_OPTIONS, "readStream.format('pravega')")
    path = str(low["path"])
    if is_tier2_path(path):
        raise InvalidConfigurationError(f"readStream.format('pravega') reads a store directory, not a "
                                        f"tier-2 URL ({path}): tier 2 is history; read it in batch")
    start_ns = _time(low, "starting_timestamp", "start_stream_cut")
    text = str(low.get("start_stream_cut", "latest")).strip()
    start: StreamCut | str | None
    if text.lower() == "latest":
        start = "latest"
    else:
        start = _cut(low, "start_stream_cut", "earliest", scope, stream)
    raw_events, raw_min = low.get("max_events_per_trigger"), low.get("min_events_per_trigger")
    raw_delay = low.get("max_trigger_delay")
    if raw_delay is not None and raw_min is None:
        raise InvalidConfigurationError("option max_trigger_delay bounds the wait of "
                                        "min_events_per_trigger: give that too")
    max_events = None if raw_events is None else _positive_int(low, "max_events_per_trigger", 1)
    min_events = None if raw_min is None else _positive_int(low, "min_events_per_trigger", 1)
    if max_events is not None and min_events is not None and min_events > max_events:
        raise InvalidConfigurationError("min_events_per_trigger is above max_events_per_trigger")
    return StreamOptions(
        path=path, scope=scope, stream=stream, start=start, start_ns=start_ns,
        max_events=max_events, min_events=min_events,
        max_trigger_delay=(DEFAULT_MAX_TRIGGER_DELAY if raw_delay is None
                           else parse_duration(raw_delay, "max_trigger_delay")),
        max_bytes=(parse_size(low["max_bytes_per_trigger"], "max_bytes_per_trigger")
                   if low.get("max_bytes_per_trigger") else DEFAULT_MAX_BYTES_PER_TRIGGER),
        fail_on_data_loss=_bool(low, "fail_on_data_loss", True),
        tier2=_tier2(low.get("tier2")), tier2_options=_json_map(low, "tier2_options"))


def parse_write_options(opts: Mapping[str, str]) -> WriteOptions:
    """``WriteOptions`` from Spark's option map (invariant 1)."""
    low, scope, stream = _checked(opts, WRITE_OPTIONS, "write.format('pravega')")
    path = str(low["path"])
    if is_tier2_path(path):
        raise InvalidConfigurationError(f"format('pravega') writes to a store directory, not to a "
                                        f"tier-2 URL ({path}): tier 2 is written by the store's tiering")
    once = _bool(low, "exactly_once", True)
    writer_id = low.get("writer_id") or None
    if writer_id is not None:
        validate_writer_id(str(writer_id))
    raw_lease = str(low.get("txn_lease", DEFAULT_TXN_LEASE)).strip()
    try:
        lease = float(raw_lease)
    except ValueError:
        lease = -1.0
    if not MIN_TXN_LEASE <= lease <= 86400:
        raise InvalidConfigurationError(f"option txn_lease must be seconds in [{MIN_TXN_LEASE:g}, 86400] "
                                        f"(a task's transaction waits that long for the commit), got {raw_lease!r}")
    return WriteOptions(path=path, scope=scope, stream=stream, exactly_once=once,
                        writer_id=None if writer_id is None else str(writer_id), txn_lease=lease,
                        tier2=_tier2(low.get("tier2")), tier2_options=_json_map(low, "tier2_options"))
