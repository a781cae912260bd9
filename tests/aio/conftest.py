"""Fixtures of the asyncio tests: an async store as the owner, as a client of an owner on its
unix socket, or over TCP; and helpers that observe the event loop while a call runs."""

from __future__ import annotations

import pytest_asyncio

import pravega_embedded as pe
from pravega_embedded.aio import AsyncStore

TOKEN = "aio-contract-0123456789abcdef"


@pytest_asyncio.fixture(params=["in-process", "connected", "tcp"])
async def ahandle(request, tmp_path):
    """An AsyncStore: the owner itself (``pe.open_async`` of a fresh path), a client of a
    sync owner on its unix socket (``pe.open_async`` of the owner's path), or over TCP."""
    path = tmp_path / "store"
    if request.param == "in-process":
        async with pe.open_async(path, durability="none", tier2=False) as store:
            assert not store.is_remote
            yield store
        return
    owner = pe.open(path, durability="none", tier2=False)
    try:
        if request.param == "connected":
            store = await pe.open_async(owner.path)
        else:
            srv = pe.serve_tcp(owner, "127.0.0.1:0", tokens=pe.TokenTable.of({TOKEN: ["admin:*"]}))
            url = f"tcp://127.0.0.1:{srv.address[1]}"
            store = await AsyncStore(lambda: pe.connect(url, token=TOKEN))
        assert store.is_remote
        try:
            yield store
        finally:
            await store.close()
    finally:
        owner.close()
