"""Tier 2: segment history tiered in the background to any fsspec target as Parquet (issue 13).

Modules: ``layout`` (paths, schema, Parquet options), ``target`` (an fsspec root with
complete-or-nothing puts), ``manifest`` (the versioned per-stream manifests), ``parquetfile``
(a segment's data files, written and read back by offset range), ``rows`` (a committed range of
a segment as the rows of such a file), ``copier`` (copying such a range to tier 2 with its state
in LMDB, and the clean-up after a crash) and ``tierer`` (the background thread deciding what
to copy when, ``flush_tier2`` and ``tiering_status``), ``tier2store`` (``pe.open_tier2``: a
tier-2 root read with no store). Importing the package registers the
tierer that ``pe.open`` starts. docs/format.md, "Tier 2", has every byte.
"""

from ..store import register_tiering
from .tier2store import Tier2Slice, Tier2Store, Tier2StreamInfo, open_tier2
from .tierer import Tierer, TieringStatus

register_tiering(Tierer)

__all__ = ["TieringStatus", "Tier2Store", "Tier2StreamInfo", "Tier2Slice", "open_tier2"]
