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


@pytest.fixture
def tcp_client(owner):
    """A client of the owner over TCP, with a token granted everything."""
    token = "contract-0123456789abcdef"
    srv = pe.serve_tcp(owner, "127.0.0.1:0", tokens=pe.TokenTable.of({token: ["admin:*"]}))
    store = pe.connect(f"tcp://127.0.0.1:{srv.address[1]}", token=token)
    try:
        yield store
    finally:
        store.close()


@pytest.fixture(params=["in-process", "connected", "tcp"])
def handle(request, owner):
    """The contract suite's store: the owner itself, a client connected to it on its unix
    socket, or one connected over TCP."""
    if request.param == "in-process":
        return owner
    return request.getfixturevalue("client" if request.param == "connected" else "tcp_client")
