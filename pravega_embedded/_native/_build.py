"""cffi out-of-line API-mode builder for the C core in csrc/.

Used by setup.py (``cffi_modules=["pravega_embedded/_native/_build.py:ffi"]``), so it works for
``pip install .``, ``pip install -e .`` and ``python setup.py build_ext --inplace``. Running it
directly (``python pravega_embedded/_native/_build.py``) compiles into the current directory.
"""

from __future__ import annotations

import os
from pathlib import Path

import cffi

_ROOT = Path(__file__).resolve().parent.parent.parent
_CSRC = _ROOT / "csrc"


def _rel(path: Path) -> str:
    # setuptools prefers source paths relative to the project root (the cwd of the build).
    try:
        return os.path.relpath(path, os.getcwd()) if path.is_relative_to(Path.cwd()) else str(path)
    except ValueError:
        return str(path)


ffi = cffi.FFI()
ffi.cdef((_CSRC / "pe.h").read_text(encoding="utf-8"))
ffi.set_source(
    "pravega_embedded._native._pe_cffi",
    '#include "pe.h"',
    sources=[_rel(p) for p in sorted(_CSRC.glob("*.c"))],
    include_dirs=[_rel(_CSRC)],
    depends=[_rel(p) for p in sorted(_CSRC.glob("*.h"))],
    extra_compile_args=["-O2", "-std=c11", "-D_GNU_SOURCE", "-Wall", "-Wextra"],
    libraries=["pthread"],
)

if __name__ == "__main__":
    ffi.compile(verbose=True)
