"""Fixtures of the fail-stop and disk-full tests: stores that are always closed, and small
file systems (tmpfs, loop-mounted ext4) that are always unmounted, also when a test fails."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest

import pravega_embedded as pe
from fault_helpers import SmallDisk


@pytest.fixture
def opener(tmp_path: Path) -> Iterator[Callable[..., pe.Store]]:
    """open(path=None, **options) -> a store (default path tmp_path/"store"); every store opened
    through it is closed at the end of the test (errors ignored: the test judged them)."""
    opened: list[pe.Store] = []

    def open_(path: Path | None = None, **kw: Any) -> pe.Store:
        s = pe.open(path or tmp_path / "store", **kw)
        opened.append(s)
        return s

    yield open_
    for s in opened:
        try:
            s.close()
        except Exception:  # noqa: BLE001 - teardown
            pass


@pytest.fixture
def small_disk(tmp_path: Path) -> Iterator[Callable[[str, int], SmallDisk]]:
    """make(kind, size_kib) -> a mounted SmallDisk ("tmpfs" or "ext4"); its stores are closed
    and it is unmounted (and its loop device detached) at the end of the test."""
    made: list[SmallDisk] = []

    def make(kind: str, size_kib: int) -> SmallDisk:
        base = tmp_path / f"disk{len(made)}"
        base.mkdir()
        d = SmallDisk(kind, base, size_kib)
        made.append(d)  # before mounting: teardown undoes whatever part of it happened
        return d.mount()

    yield make
    for d in reversed(made):
        d.close()
