"""Many processes, one store: the owner serves its store to the other processes that open the
same directory (docs/multiprocess.md; bytes in docs/wire-protocol.md).

- ``wire``     frames, the handshake, the binary bodies; every parser capped and fuzzed
- ``values``   typed values and errors as JSON
- ``framing``  frames over a socket
- ``session``  one connection's handles and allowed calls, in the owner
- ``server``   the owner's unix socket, its threads, the peer check and the caps
- ``connection`` one socket to the owner: handshake, calls, pipelined writes
- ``client``   ``RemoteStore``, ``RemoteWriter``, ``RemoteReader``
- ``handles``  reader groups and their readers, checkpoints, transactions, byte streams,
               watchers and slices of a client
- ``opening``  ``pe.open``: own the store, or connect to its owner
- ``auth``     tokens, their grants, and the permission each call needs (TCP)
- ``tcp``      ``serve_tcp`` in the owner, ``pe.connect`` in a client

Importing this package registers the server with the store (``store.register_server``).
"""

from ..store import register_server
from ..tiering import TieringStatus
from .client import RemoteReader, RemoteStore, RemoteWriter
from .handles import (
    RemoteByteStream,
    RemoteCheckpointFuture,
    RemoteGroupReader,
    RemoteReaderGroup,
    RemoteSegmentWatcher,
    RemoteSlice,
    RemoteTransaction,
    RemoteTransactionalWriter,
)
from .opening import open
from .auth import TokenTable, load_tokens
from .server import OwnerServer
from .tcp import connect, serve_tcp
from .values import register_value_type

__all__ = ["open", "connect", "serve_tcp", "TokenTable", "load_tokens", "RemoteStore", "RemoteWriter", "RemoteReader", "OwnerServer",
           "RemoteReaderGroup", "RemoteGroupReader", "RemoteCheckpointFuture",
           "RemoteTransactionalWriter", "RemoteTransaction", "RemoteByteStream",
           "RemoteSegmentWatcher", "RemoteSlice"]

register_server(OwnerServer)
register_value_type(TieringStatus)
