"""The public surface is typed: no ``Any`` in the signatures of the names ``pe.__all__``
exports (but the documented exceptions), and a typed program using the API passes
``mypy --strict`` against the package's own annotations (``py.typed``)."""

from __future__ import annotations

import inspect
import subprocess
import sys
from pathlib import Path

import pravega_embedded as pe

HERE = Path(__file__).resolve().parent
# Deliberate: JSON decodes to any JSON value, as json.loads does.
ALLOWED = {"JsonSerializer.deserialize"}


def _signatures() -> dict[str, str]:
    out = {}
    for name in pe.__all__:
        obj = getattr(pe, name)
        members = vars(obj).items() if inspect.isclass(obj) else [("", obj)]
        for attr, fn in members:
            if attr.startswith("_") and attr != "__init__":
                continue
            target = fn.fget if isinstance(fn, property) else getattr(obj, attr) if attr else obj
            if not callable(target):
                continue
            try:
                sig = inspect.signature(target)
            except (TypeError, ValueError):
                continue
            if attr == "__init__" and "engine" in sig.parameters:
                continue  # made by the store (store.create_writer, ...), not by users
            out[f"{name}.{attr}" if attr else name] = str(sig)
    return out


def test_no_any_in_public_signatures():
    sigs = _signatures()
    assert len(sigs) > 200  # the scan sees the API
    with_any = {k: v for k, v in sigs.items() if "Any" in v and k not in ALLOWED}
    assert with_any == {}


def test_a_typed_program_passes_mypy_strict(tmp_path):
    out = subprocess.run(
        [sys.executable, "-m", "mypy", "--strict", "--follow-imports=silent", "--ignore-missing-imports",
         "--cache-dir", str(tmp_path / "cache"), str(HERE / "typed_usage.py")],
        capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stdout + out.stderr
    sys.path.insert(0, str(HERE))
    try:
        import typed_usage
    finally:
        sys.path.remove(str(HERE))
    assert typed_usage.use(str(tmp_path / "store")) >= 4  # and it runs
