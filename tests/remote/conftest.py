"""Fixtures of the multi-process tests: an owner store in this process and a client of it."""

from __future__ import annotations

import pytest

import pravega_embedded as pe


@pytest.fixture
def owner(tmp_path):
    store = pe.open(tmp_path / "store", durability="none", tier2=False)
    assert isinstance(store, pe.Store)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture
def client(owner):
    store = pe.open(owner.path)
    assert isinstance(store, pe.RemoteStore)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["in-process", "connected"])
def handle(request, owner):
    """The contract suite's store: the owner itself, or a client connected to it."""
    return owner if request.param == "in-process" else request.getfixturevalue("client")
