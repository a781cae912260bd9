"""Tier 2: segment history tiered in the background to any fsspec target as Parquet (issue 13).

Built so far (the engine does not tier to them yet, so nothing here is public API):
``layout`` (paths, schema, Parquet options), ``target`` (an fsspec root with complete-or-nothing
puts), ``manifest`` (the versioned per-stream manifests), ``parquetfile`` (a segment's data
files, written and read back by offset range), ``rows`` (a committed range of a segment as
the rows of such a file) and ``copier`` (copying such a range to tier 2 with its state in LMDB,
and the clean-up after a crash). docs/format.md, "Tier 2", has every byte.
"""

__all__: list[str] = []
