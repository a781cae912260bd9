"""Reader groups, checkpoints and reader positions (docs/reader-groups.md).

Layout: ``config`` (value objects), ``state`` (the revisioned group state in LMDB),
``assignment`` (the balancing rule), ``reader`` (a reader of a group), ``group`` (the group
handle and the per-store service behind ``store.create_reader_group``).
"""

from ..store import register_service
from .config import Checkpoint, Position, ReaderGroupConfig, SegmentDistribution
from .group import ReaderGroup, ReaderGroupService
from .reader import GroupReader
from .state import CheckpointFuture

register_service("readergroups", ReaderGroupService)

__all__ = [
    "ReaderGroupConfig",
    "ReaderGroup",
    "GroupReader",
    "Checkpoint",
    "CheckpointFuture",
    "Position",
    "SegmentDistribution",
]
