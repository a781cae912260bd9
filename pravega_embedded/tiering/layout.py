"""Tier-2 layout: where each Parquet file and manifest of a stream lives, and its columns.

Owns: the tier-2 path scheme, the Arrow schema of a tiered file and the Parquet options it is
written with (docs/format.md, "Tier 2"). Everything here is a pure function of its arguments.

Invariants:
  1. A segment's data files live in ``scope=<scope>/stream=<stream>/segment=<segment id>/``
     (Hive partitioning: ``segment`` is the 64-bit segment id in decimal, so engines read it as a
     BIGINT) and are named ``<first offset>-<end offset>.parquet``, both offsets zero-padded to
     ``OFFSET_DIGITS`` digits, so names sort in offset order. A name is parsed back only in that
     exact form.
  2. Files being written are staged under a name that starts with ``_`` and does not end with
     ``.parquet`` (``stage_name``): Spark and pyarrow skip ``_`` names, and no ``*.parquet`` glob
     (DuckDB's included) matches it.
  3. A stream's manifests live in ``scope=<scope>/stream=<stream>/_manifest/<version>.json``,
     the version zero-padded to ``VERSION_DIGITS`` digits; the highest version wins.
  4. Scope and stream names are valid names (``names``): letters, digits, ``.`` and ``-``,
     never ``.`` or ``..`` alone, never a leading ``.``, ``-`` or ``_``; with no ``/`` or ``=``
     no path built here leaves the tier-2 root.
  5. The root's owner file ``OWNER_NAME`` (JSON: format, the store's id and path) names the one
     store that tiers to that root; its name starts with ``_`` and ends in ``.json``, so no
     engine reads it as data.

Thread-safety: pure functions and immutable constants.
"""

from __future__ import annotations

import re
import secrets

import pyarrow as pa

from ..errors import InvalidConfigurationError
from ..names import validate_scope, validate_stream

__all__ = [
    "LAYOUT_VERSION",
    "OFFSET_DIGITS",
    "VERSION_DIGITS",
    "ROW_GROUP_ROWS",
    "ROW_GROUP_BYTES",
    "COMPRESSION",
    "STATISTICS_COLUMNS",
    "DICTIONARY_COLUMNS",
    "PARQUET_METADATA_KEY",
    "SCHEMA",
    "stream_dir",
    "segment_dir",
    "file_name",
    "parse_file_name",
    "stage_name",
    "manifest_dir",
    "manifest_name",
    "parse_manifest_name",
    "OWNER_NAME",
]

LAYOUT_VERSION = 1  # the version of this layout and of the manifest format (docs/format.md)
OFFSET_DIGITS = 20  # 2**64 - 1 has 20 decimal digits
VERSION_DIGITS = 20
ROW_GROUP_ROWS = 128 * 1024  # at most this many rows per Parquet row group ...
ROW_GROUP_BYTES = 16 << 20  # ... and about this many bytes of events: offset-range reads skip the
                            # others, and a cold read of one event loads one group
COMPRESSION = "zstd"
# min/max statistics where a reader filters on them; an event's bytes have none worth keeping
STATISTICS_COLUMNS = ("offset", "routing_key", "write_time")
# few distinct keys; the events are distinct and the write times come in runs (one per journal
# section), which zstd packs smaller than a dictionary does
DICTIONARY_COLUMNS = ("routing_key",)
OWNER_NAME = "_pravega_embedded_store.json"  # at the root: which store tiers there (invariant 5)
PARQUET_METADATA_KEY = b"pravega_embedded.tier2"  # key-value metadata: JSON of the file's range

SCHEMA = pa.schema(
    [
        pa.field("offset", pa.int64(), nullable=False),  # the segment offset readers report
        pa.field("routing_key", pa.string()),  # null when the event had no key
        pa.field("event", pa.binary(), nullable=False),
        pa.field("write_time", pa.timestamp("us", tz="UTC"), nullable=False),
    ]
)

_FILE = re.compile(r"([0-9]{%d})-([0-9]{%d})\.parquet" % (OFFSET_DIGITS, OFFSET_DIGITS))
_MANIFEST = re.compile(r"([0-9]{%d})\.json" % VERSION_DIGITS)  # ASCII digits only
_MAX_OFFSET = (1 << 63) - 1  # offsets are int64 in the files


def stream_dir(scope: str, stream: str) -> str:
    """``scope=<scope>/stream=<stream>`` (relative to the tier-2 root)."""
    return f"scope={validate_scope(scope)}/stream={validate_stream(stream)}"


def segment_dir(scope: str, stream: str, segment_id: int) -> str:
    """The folder of one segment's files (relative to the tier-2 root)."""
    if isinstance(segment_id, bool) or not isinstance(segment_id, int) or not 0 <= segment_id <= _MAX_OFFSET:
        raise InvalidConfigurationError(f"segment id must be an int in 0..2**63-1, got {segment_id!r}")
    return f"{stream_dir(scope, stream)}/segment={segment_id}"


def file_name(first: int, end: int) -> str:
    """The name of the file holding segment offsets ``[first, end)``."""
    for v in (first, end):
        if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= _MAX_OFFSET:
            raise InvalidConfigurationError(f"offsets must be ints in 0..2**63-1, got {v!r}")
    if end <= first:
        raise InvalidConfigurationError(f"a tiered file holds at least one byte: [{first}, {end})")
    return f"{first:0{OFFSET_DIGITS}d}-{end:0{OFFSET_DIGITS}d}.parquet"


def parse_file_name(name: str) -> tuple[int, int] | None:
    """``(first, end)`` of a data file's name, or None if ``name`` is not one (invariant 1)."""
    m = _FILE.fullmatch(name)
    if m is None:
        return None
    first, end = int(m.group(1)), int(m.group(2))
    if not first < end <= _MAX_OFFSET:
        return None
    return first, end


def stage_name(final: str) -> str:
    """A fresh staging name for a file to be published as ``final`` (invariant 2)."""
    return f"_stage.{secrets.token_hex(8)}.{final}.partial"


def manifest_dir(scope: str, stream: str) -> str:
    """The folder of a stream's manifests (relative to the tier-2 root)."""
    return f"{stream_dir(scope, stream)}/_manifest"


def manifest_name(version: int) -> str:
    """The file name of manifest ``version`` (>= 1)."""
    if isinstance(version, bool) or not isinstance(version, int) or not 1 <= version <= _MAX_OFFSET:
        raise InvalidConfigurationError(f"a manifest version is an int in 1..2**63-1, got {version!r}")
    return f"{version:0{VERSION_DIGITS}d}.json"


def parse_manifest_name(name: str) -> int | None:
    """The version of a manifest's file name, or None if ``name`` is not one (invariant 3)."""
    m = _MANIFEST.fullmatch(name)
    if m is None:
        return None
    v = int(m.group(1))
    return v if 1 <= v <= _MAX_OFFSET else None
