"""Shared fixtures: the shipped ``pe_store`` fixture plus a durable on-disk store."""

from __future__ import annotations

import pytest

import pravega_embedded as pe

pytest_plugins = ["pravega_embedded.testing"]


@pytest.fixture
def store_path(tmp_path):
    return tmp_path / "store"


@pytest.fixture
def durable_store(store_path):
    """A store with the default durability (real fdatasync) in a test directory."""
    store = pe.open(store_path)
    try:
        yield store
    finally:
        store.close()
