"""pravega_embedded: Pravega's streams in one process, the way SQLite is a database in one.

Layout (dependencies point one way, top to bottom):

- ``_native``      cffi binding of the C core in ``csrc/`` (framing, CRC32C, journal, group commit)
- engine           ``engine`` (the internals an open store shares), ``failstop`` (the fail-stop
                   latch and the loggers), ``journal`` (files, recovery, appends, positions,
                   checked reads), ``metadata`` (LMDB), ``segindex`` (sections, tail cache),
                   ``journalfiles`` (files table, pins, reclaiming), ``checkpoint``,
                   ``sequences``, ``replay``, ``records``, ``storedir`` (lock, marker)
- streams          ``store`` (the public API), ``background`` (threads, status), ``append``,
                   ``segsource``, ``reader``, ``writer``, ``staging``, ``transactions``,
                   ``largeevents``, ``bytestream``, ``scaling``, ``retention``, ``watermarks``,
                   ``segment``, ``stream``, ``arrow``, ``routing``, ``streamcut``, ``events``,
                   ``serializers``, ``config``, ``names``, ``errors``
- ``readergroup``  reader groups, checkpoints, positions (built on the core; registers the
                   service behind ``store.create_reader_group``)
- ``tiering``      tier 2: Parquet files and manifests copied in the background (registers
                   the tierer ``pe.open`` starts)
- ``remote``       many processes on one store: the owner serves it on a unix socket; ``pe.open``
                   in another process returns a ``RemoteStore`` connected to it; ``serve_tcp``
                   and ``pe.connect`` do the same over TCP with tokens and TLS
- ``aio``          asyncio: ``open_async`` and async handles over the sync API (blocking calls
                   run in threads the async store owns)
- ``spark``, ``cli``             built on the public API

Quick start::

    import pravega_embedded as pe
    with pe.open("./data") as store:
        store.create_scope("iot", exist_ok=True)
        store.create_stream("iot", "sensors", pe.StreamConfiguration(scaling=pe.ScalingPolicy.fixed(4)), exist_ok=True)
        with store.create_writer("iot", "sensors", writer_id="gw-1") as w:
            w.write_event(b"21.5", routing_key="sensor-7")
        table = store.read_slice("iot", "sensors").to_arrow()
"""

import logging as _logging

from . import errors
from .background import BackgroundFailure, StoreStatus
from .bytestream import ByteStream
from .config import RetentionPolicy, ScalingPolicy, StreamConfiguration
from .events import EventPointer, EventRead
from .reader import EventStreamReader, Slice
from .readergroup import (
    Checkpoint,
    CheckpointFuture,
    GroupReader,
    Position,
    ReaderGroup,
    ReaderGroupConfig,
    SegmentDistribution,
)
from .segment import SegmentInfo
from .serializers import BytesSerializer, JsonSerializer, TextSerializer
from .store import Store, open_temporary
from .batch import SegmentRange, Truncation
from .stream import EpochInfo, SegmentWithRange, StreamInfo
from .streamcut import StreamCut
from .tiering import Tier2Slice, Tier2Store, Tier2StreamInfo, TieringStatus, open_tier2
from .remote import RemoteReader, RemoteStore, RemoteWriter, TokenTable, connect, open, serve_tcp
from .transactions import Transaction, TransactionalEventStreamWriter, TransactionInfo, TxnStatus
from .watch import SegmentCountChange, SegmentWatcher
from .watermarks import TimeWindow
from .writer import MAX_EVENT_SIZE, EventStreamWriter
from .aio import (
    AsyncCheckpoint,
    AsyncGroupReader,
    AsyncReader,
    AsyncReaderGroup,
    AsyncSlice,
    AsyncStore,
    AsyncTransaction,
    AsyncTransactionalWriter,
    AsyncWriter,
    open_async,
)

__version__ = "0.1.0"

# Silent by default: the library logs (``pravega_embedded.engine``, ``pravega_embedded.streams``)
# only where the application configures logging.
_logging.getLogger("pravega_embedded").addHandler(_logging.NullHandler())

__all__ = [
    "errors",
    "open",
    "connect",
    "serve_tcp",
    "TokenTable",
    "open_temporary",
    "open_tier2",
    "Store",
    "RemoteStore",
    "RemoteWriter",
    "RemoteReader",
    "Tier2Store",
    "Tier2StreamInfo",
    "Tier2Slice",
    "StoreStatus",
    "TieringStatus",
    "BackgroundFailure",
    "StreamConfiguration",
    "ScalingPolicy",
    "RetentionPolicy",
    "StreamInfo",
    "SegmentInfo",
    "EpochInfo",
    "SegmentRange",
    "Truncation",
    "SegmentWithRange",
    "SegmentCountChange",
    "SegmentWatcher",
    "TimeWindow",
    "StreamCut",
    "EventRead",
    "EventPointer",
    "EventStreamWriter",
    "TransactionalEventStreamWriter",
    "Transaction",
    "TxnStatus",
    "TransactionInfo",
    "ByteStream",
    "EventStreamReader",
    "Slice",
    "ReaderGroupConfig",
    "ReaderGroup",
    "GroupReader",
    "Checkpoint",
    "CheckpointFuture",
    "Position",
    "SegmentDistribution",
    "BytesSerializer",
    "TextSerializer",
    "JsonSerializer",
    "MAX_EVENT_SIZE",
    "open_async",
    "AsyncStore",
    "AsyncWriter",
    "AsyncReader",
    "AsyncReaderGroup",
    "AsyncGroupReader",
    "AsyncCheckpoint",
    "AsyncSlice",
    "AsyncTransactionalWriter",
    "AsyncTransaction",
    "__version__",
]
