"""The public surface: ``pravega_embedded.__all__`` and the exception tree of ``errors``."""

from __future__ import annotations

import builtins as builtins_module
import inspect
import re

import pravega_embedded as pe
from pravega_embedded import errors

# The documented public names (README, issue 2, DESIGN.md section 4).
DOCUMENTED = {
    "errors", "open", "open_temporary", "open_tier2", "Store", "StoreStatus", "TieringStatus",
    "RemoteStore", "RemoteWriter", "RemoteReader", "connect", "serve_tcp", "TokenTable",
    "Tier2Store", "Tier2StreamInfo", "Tier2Slice", "BackgroundFailure",
    "StreamConfiguration", "ScalingPolicy", "RetentionPolicy", "StreamInfo", "SegmentInfo", "EpochInfo", "SegmentWithRange", "SegmentRange", "Truncation", "SegmentCountChange", "SegmentWatcher", "TimeWindow", "TransactionalEventStreamWriter", "Transaction", "TxnStatus", "TransactionInfo", "ByteStream", "StreamCut", "EventRead", "EventPointer",
    "EventStreamWriter", "EventStreamReader", "Slice", "BytesSerializer", "TextSerializer",
    "JsonSerializer", "MAX_EVENT_SIZE", "__version__",
    "ReaderGroupConfig", "ReaderGroup", "GroupReader", "Checkpoint", "CheckpointFuture",
    "Position", "SegmentDistribution",
    "open_async", "AsyncStore", "AsyncWriter", "AsyncReader", "AsyncReaderGroup", "AsyncGroupReader",
    "AsyncCheckpoint", "AsyncSlice", "AsyncTransactionalWriter", "AsyncTransaction",
}

# class -> (parent in the tree, the builtin it must also be), as in errors.py's docstring.
TREE: dict[str, tuple[str, tuple[type, ...]]] = {
    "InvalidNameError": ("PravegaEmbeddedError", (ValueError,)),
    "InvalidConfigurationError": ("PravegaEmbeddedError", (ValueError,)),
    "InvalidStreamCutError": ("PravegaEmbeddedError", (ValueError,)),
    "InvalidEventPointerError": ("PravegaEmbeddedError", (ValueError,)),
    "EventTooLargeError": ("PravegaEmbeddedError", (ValueError,)),
    "InvalidRoutingKeyError": ("PravegaEmbeddedError", (ValueError,)),
    "InvalidSequenceError": ("PravegaEmbeddedError", (ValueError,)),
    "SerializationError": ("PravegaEmbeddedError", (ValueError, TypeError)),
    "NotFoundError": ("PravegaEmbeddedError", (LookupError,)),
    "ScopeNotFoundError": ("NotFoundError", (LookupError,)),
    "StreamNotFoundError": ("NotFoundError", (LookupError,)),
    "SegmentNotFoundError": ("NotFoundError", (LookupError,)),
    "AlreadyExistsError": ("PravegaEmbeddedError", (FileExistsError,)),
    "ScopeExistsError": ("AlreadyExistsError", (FileExistsError,)),
    "StreamExistsError": ("AlreadyExistsError", (FileExistsError,)),
    "WriterExistsError": ("AlreadyExistsError", (FileExistsError,)),
    "ScopeNotEmptyError": ("PravegaEmbeddedError", (OSError,)),
    "StreamSealedError": ("PravegaEmbeddedError", (RuntimeError,)),
    "SegmentSealedError": ("StreamSealedError", (RuntimeError,)),
    "TruncatedDataError": ("PravegaEmbeddedError", (LookupError,)),
    "ClosedError": ("PravegaEmbeddedError", (ValueError,)),
    "StoreClosedError": ("ClosedError", (ValueError,)),
    "WriterClosedError": ("ClosedError", (ValueError,)),
    "ReaderClosedError": ("ClosedError", (ValueError,)),
    "StoreLockedError": ("PravegaEmbeddedError", (BlockingIOError,)),
    "ConnectionLostError": ("PravegaEmbeddedError", (ConnectionError,)),
    "ProtocolError": ("PravegaEmbeddedError", (ConnectionError,)),
    "PermissionDeniedError": ("PravegaEmbeddedError", (PermissionError,)),
    "StorageError": ("PravegaEmbeddedError", (OSError,)),
    "StorageFullError": ("StorageError", (OSError,)),
    "StoragePermissionError": ("StorageError", (PermissionError,)),
    "LocalBudgetError": ("StorageFullError", (OSError,)),
    "CorruptDataError": ("PravegaEmbeddedError", (OSError,)),
    "FormatVersionError": ("CorruptDataError", (OSError,)),
    "DurabilityTimeoutError": ("PravegaEmbeddedError", (TimeoutError,)),
    "TieringTimeoutError": ("PravegaEmbeddedError", (TimeoutError,)),
    "ReinitializationRequiredError": ("PravegaEmbeddedError", (RuntimeError,)),
    "ReaderGroupNotFoundError": ("NotFoundError", (LookupError,)),
    "ReaderNotFoundError": ("NotFoundError", (LookupError,)),
    "ReaderGroupExistsError": ("AlreadyExistsError", (FileExistsError,)),
    "ReaderExistsError": ("AlreadyExistsError", (FileExistsError,)),
    "CheckpointExistsError": ("AlreadyExistsError", (FileExistsError,)),
    "InvalidPositionError": ("PravegaEmbeddedError", (ValueError,)),
    "ReaderGroupClosedError": ("ClosedError", (ValueError,)),
    "ReaderNotInGroupError": ("PravegaEmbeddedError", (RuntimeError,)),
    "MaxCheckpointsExceededError": ("PravegaEmbeddedError", (RuntimeError,)),
    "CheckpointFailedError": ("PravegaEmbeddedError", (RuntimeError,)),
    "TxnNotFoundError": ("NotFoundError", (LookupError,)),
    "StoreNotFoundError": ("NotFoundError", (LookupError,)),
    "StreamKindError": ("PravegaEmbeddedError", (TypeError,)),
    "TxnFailedError": ("PravegaEmbeddedError", (RuntimeError,)),
}


def test_all_is_exactly_the_documented_names_and_each_resolves():
    assert len(pe.__all__) == len(set(pe.__all__)), "duplicates in __all__"
    assert set(pe.__all__) == DOCUMENTED
    for name in pe.__all__:
        assert getattr(pe, name) is not None, name
    namespace: dict[str, object] = {}
    exec("from pravega_embedded import *", namespace)  # noqa: S102
    assert DOCUMENTED - {"__version__"} <= set(namespace)
    assert isinstance(pe.__version__, str) and re.fullmatch(r"\d+\.\d+\.\d+.*", pe.__version__)
    assert pe.MAX_EVENT_SIZE == 8 * 1024 * 1024
    assert pe.errors is errors


def test_every_public_class_and_function_has_a_docstring():
    for name in pe.__all__:
        obj = getattr(pe, name)
        if inspect.isclass(obj) or inspect.isfunction(obj):
            assert inspect.getdoc(obj), f"pravega_embedded.{name} has no docstring"


def test_errors_all_lists_every_exception_class_of_the_module():
    defined = {n for n, o in vars(errors).items()
               if inspect.isclass(o) and issubclass(o, BaseException) and o.__module__ == errors.__name__}
    assert set(errors.__all__) == defined
    assert set(errors.__all__) == set(TREE) | {"PravegaEmbeddedError"}


def test_every_error_subclasses_the_base_and_its_builtin():
    base = errors.PravegaEmbeddedError
    assert issubclass(base, Exception)
    for name in errors.__all__:
        cls = getattr(errors, name)
        assert issubclass(cls, base), name
        if name == "PravegaEmbeddedError":
            continue
        parent, builtins = TREE[name]
        assert issubclass(cls, getattr(errors, parent)), f"{name} is not a {parent}"
        for b in builtins:
            assert issubclass(cls, b), f"{name} is not a {b.__name__}"
        assert cls.__doc__, f"{name} has no docstring"


def _docstring_tree() -> dict[str, tuple[str, tuple[str, ...]]]:
    """Parse the tree drawn in errors.py's module docstring: name -> (parent, builtins)."""
    tree: dict[str, tuple[str, tuple[str, ...]]] = {}
    stack: list[tuple[int, str]] = []
    for line in (errors.__doc__ or "").splitlines():
        m = re.match(r"^(\s*[│ ]*[├└]── )(\w+)\s*(\(([^)]*)\))?", line)
        if not m:
            root = re.match(r"^\s*(PravegaEmbeddedError)\s*$", line)
            if root:
                stack = [(-1, root.group(1))]
            continue
        depth = len(m.group(1))
        while stack and stack[-1][0] >= depth:
            stack.pop()
        builtins = tuple(b.strip() for b in (m.group(4) or "").split(",") if b.strip())
        tree[m.group(2)] = (stack[-1][1], builtins)
        stack.append((depth, m.group(2)))
    return tree


def test_the_docstring_tree_is_the_class_tree():
    drawn = _docstring_tree()
    assert set(drawn) == set(TREE), "errors.py's docstring tree and errors.__all__ differ"
    for name, (parent, builtins) in drawn.items():
        assert parent == TREE[name][0], f"docstring puts {name} under {parent}"
        cls = getattr(errors, name)
        assert cls.__bases__[0] is getattr(errors, parent)
        for b in builtins:  # a builtin drawn next to a class is one of its bases
            assert issubclass(cls, getattr(builtins_module, b)), f"{name} should be a {b}"


def test_store_locked_error_carries_pid_and_path():
    exc = errors.StoreLockedError("locked", path="/x", pid=42)
    assert exc.pid == 42 and exc.path == "/x" and "locked" in str(exc)
    assert isinstance(exc, BlockingIOError)
