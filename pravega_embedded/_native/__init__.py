"""cffi binding of the C core in csrc/ (see csrc/pe.h): ``ffi``, ``lib`` and :func:`check`."""

from __future__ import annotations

import errno as _errno
import os

from .. import errors

_EXPECTED_FORMAT_VERSION = 3

try:
    from ._pe_cffi import ffi, lib
except ImportError as exc:  # pragma: no cover - depends on the build
    raise ImportError(
        "pravega_embedded's C core (pravega_embedded._native._pe_cffi) is not built or does not "
        f"load ({exc}); rebuild with: pip install -e ."
    ) from exc

if getattr(lib, "PE_FORMAT_VERSION", None) != _EXPECTED_FORMAT_VERSION:  # pragma: no cover
    raise ImportError(
        f"pravega_embedded's C core is stale (format version {getattr(lib, 'PE_FORMAT_VERSION', '?')}, "
        f"expected {_EXPECTED_FORMAT_VERSION}); rebuild with: pip install -e ."
    )

__all__ = ["ffi", "lib", "check"]

# status -> (exception class, message suffix or None for "strerror(errno)")
_ERRORS: dict[int, tuple[type[BaseException], str | None]] = {
    lib.PE_ERR_INVAL: (errors.InvalidConfigurationError, "invalid argument"),
    lib.PE_ERR_IO: (errors.StorageError, None),
    lib.PE_ERR_NOMEM: (MemoryError, "out of memory"),
    lib.PE_ERR_CORRUPT: (errors.CorruptDataError, "damaged data"),
    lib.PE_ERR_FORMAT: (errors.FormatVersionError, "unknown magic number or format version"),
    lib.PE_ERR_TIMEOUT: (errors.DurabilityTimeoutError, "not durable within the timeout"),
    lib.PE_ERR_FAILED: (errors.StorageError, "the journal failed or is closed; reopen the store"),
    lib.PE_ERR_TOOBIG: (errors.EventTooLargeError, "exceeds the format's size limits"),
}


def check(status: int, what: str, *, errno: int | None = None) -> None:
    """Raises the exception for a C status code (``what`` names the operation); PE_OK passes."""
    if status == lib.PE_OK:
        return
    if errno is None:
        errno = ffi.errno
    cls, text = _ERRORS.get(status, (errors.StorageError, f"unknown status {status}"))
    if status == lib.PE_ERR_IO:
        raise errors.storage_error(errno or _errno.EIO, what)
    if status == lib.PE_ERR_FAILED and errno:
        raise cls(errno, f"{what}: {text} ({os.strerror(errno)})")
    raise cls(f"{what}: {text}")
