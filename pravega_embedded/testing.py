"""Test support: a pytest fixture with a fresh temporary store.

Use it from a conftest.py::

    pytest_plugins = ["pravega_embedded.testing"]

    def test_pipeline(pe_store):
        pe_store.create_scope("s")

Thread-safety: one store per test.
"""

from __future__ import annotations

from typing import Iterator

import pytest

from .store import Store, open_temporary

__all__ = ["pe_store"]


@pytest.fixture
def pe_store() -> Iterator[Store]:
    """A new store in a temporary directory (durability "none"), closed and removed after the test."""
    store = open_temporary()
    try:
        yield store
    finally:
        store.close()
