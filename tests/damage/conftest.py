"""Fixtures of the damage battery: the reference stores (damage_helpers.build), built once per
test module, each checked to open undamaged to exactly the content recorded while building."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parent))

import damage_helpers as h  # noqa: E402


def _checked(ref: h.Reference) -> h.Reference:
    verdict = h.run_single(h.request(ref.path, ref))
    assert "content" in verdict, f"the undamaged {ref.name} store does not open: {verdict}"
    diff = h.compare(verdict["content"], ref.full)
    assert not diff, f"the undamaged {ref.name} store opens to other content: {diff}"
    assert h.disk_state(ref.path), ref.path
    return ref


def _build(tmp_path_factory: pytest.TempPathFactory, roll: int) -> tuple[h.Reference, h.Reference]:
    root = tmp_path_factory.mktemp(f"ref{roll}")
    crash, clean = h.build(root, roll)
    # the check opens a copy: a reference itself is never opened (clean's lock.mdb stays as built)
    for ref in (crash, clean):
        probe = h.fresh_copy(ref, root / f"probe-{ref.name}")
        _checked(h.Reference(ref.name, probe, ref.roll_bytes, ref.crash, ref.applied, ref.full,
                             ref.base, ref.batches, ref.records))
    return crash, clean


@pytest.fixture(scope="module")
def single(tmp_path_factory) -> tuple[h.Reference, h.Reference]:
    """(crash snapshot, cleanly closed) with the default roll size: one journal file."""
    return _build(tmp_path_factory, h.DEFAULT_ROLL)


@pytest.fixture(scope="module")
def rolled(tmp_path_factory) -> tuple[h.Reference, h.Reference]:
    """(crash snapshot, cleanly closed) with roll_bytes = 1 MiB: three journal files."""
    return _build(tmp_path_factory, h.SMALL_ROLL)


@pytest.fixture(scope="module")
def refs(single, rolled) -> dict[str, h.Reference]:
    return {r.name: r for r in (*single, *rolled)}
