"""Fixtures of the power-cut tests: LazyFS built once per session, and a fresh LazyFS mount
(ROOT and MNT under tmp_path) per test. Tests that need LazyFS are marked
``lazyfs.requires_lazyfs`` (a ``skipif`` on ``lazyfs.available()``): where /dev/fuse or LazyFS's
build.sh is missing they are skipped; a failing build fails them."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

import lazyfs
import pc_loop


@pytest.fixture(scope="session")
def lazyfs_binary() -> Path:
    """The LazyFS binary, built (or found built) by build.sh once per session."""
    return lazyfs.build()


@pytest.fixture
def lazyfs_factory(lazyfs_binary: Path, tmp_path: Path) -> Iterator[Callable[..., lazyfs.LazyFS]]:
    """make(cache_size="512mb") -> a mounted LazyFS with ROOT, MNT and its work files under
    tmp_path; unmounted at the end of the test."""
    made: list[lazyfs.LazyFS] = []

    def make(cache_size: str = "512mb") -> lazyfs.LazyFS:
        n = len(made)
        fs = lazyfs.LazyFS(lazyfs_binary, tmp_path / f"root{n}", tmp_path / f"mnt{n}",
                           tmp_path / f"lazyfs{n}", cache_size=cache_size)
        made.append(fs)
        return fs

    yield make
    for fs in made:
        fs.close()


@pytest.fixture
def lazy_fs(lazyfs_factory: Callable[..., lazyfs.LazyFS]) -> lazyfs.LazyFS:
    """A fresh mounted LazyFS (512 MB cache) for one test."""
    return lazyfs_factory()


def pytest_terminal_summary(terminalreporter) -> None:
    if pc_loop.SUMMARIES:
        terminalreporter.section("power cuts")
        for line in pc_loop.SUMMARIES:
            terminalreporter.write_line(line)
