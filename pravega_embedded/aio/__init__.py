"""asyncio: an async façade over the same store (docs/journeys/async.md).

``pe.open_async(path)`` opens what ``pe.open(path)`` opens — the owning ``Store``, or a
``RemoteStore`` client when the store is open elsewhere — in a worker thread, and returns an
``AsyncStore``: its admin calls are coroutines; writers, readers, reader groups, slices and
transactions are async handles. Nothing that may block (an fsync, a disk read, a socket, a
lock a writer holds) runs on the event loop, and every call is cancel-safe::

    async with pe.open_async("./data") as store:
        w = store.create_writer("iot", "sensors")
        await w.write_event(b"21.5", routing_key="sensor-7")
        await w.flush()
        async for ev in store.create_reader("iot", "sensors"):
            ...

Layout (one module per concept):

- ``threads``      the thread pools (work, waits), ordered lanes, results back to the loop
- ``handle``       ``LaneHandle``: a handle opened in the background, closed behind its calls
- ``store``        ``open_async``, ``AsyncStore``: open, admin, handles, close
- ``writer``       ``AsyncWriter``
- ``reader``       the cancel-safe read protocol (``ReadPump``) and ``AsyncReader``
- ``readergroup``  ``AsyncReaderGroup``, ``AsyncGroupReader``, ``AsyncCheckpoint``
- ``slice``        ``AsyncSlice``
- ``transaction``  ``AsyncTransactionalWriter``, ``AsyncTransaction``

Background threads log through ``logging`` (``pravega_embedded.aio``).
"""

from .reader import AsyncReader
from .readergroup import AsyncCheckpoint, AsyncGroupReader, AsyncReaderGroup
from .slice import AsyncSlice
from .store import AsyncStore, open_async
from .transaction import AsyncTransaction, AsyncTransactionalWriter
from .writer import AsyncWriter

__all__ = [
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
]
